"""Escalation: ``sandbox: false`` and argv ``["sudo", PROGRAM, ...]`` run outside the sandbox
only after a person allowed that very call (kind ``escalation``, never remembered); with no
one to ask they do not run. A real Host, real processes; ``sudo`` is a stand-in on PATH that
records how it was called (this machine may have no real one) and runs the rest."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import ApprovalRequest, Decision, Host
from codemode.policy import ApprovalKind

pytestmark = pytest.mark.anyio

FAKE_SUDO = """#!/bin/sh
# A stand-in for sudo: records its words and the signals it gets, runs the program after -n.
printf '%s\\n' "$*" >> "{log}"
[ "$1" = "-n" ] || {{ echo "sudo: expected -n first" >&2; exit 64; }}
shift
trap 'echo TERM >> "{log}"; kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM
"$@" &
child=$!
wait "$child"
"""


@pytest.fixture
def fake_sudo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A ``sudo`` first on the host's PATH (outside every writable root); yields its log."""
    bin_dir = tmp_path / "sbin"
    bin_dir.mkdir()
    log = tmp_path / "sudo.log"
    sudo = bin_dir / "sudo"
    sudo.write_text(FAKE_SUDO.format(log=log))
    sudo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    yield log


class Approver:
    """Records every request; answers each with ``answer``."""

    def __init__(self, answer: Decision) -> None:
        self.answer = answer
        self.asked: list[ApprovalRequest] = []

    async def __call__(self, requests: list[ApprovalRequest]) -> list[Decision]:
        self.asked.extend(requests)
        return [self.answer for _ in requests]


def make_host(tmp_path: Path, approve: Any = None, **kw: Any) -> Host:
    (tmp_path / "ws").mkdir(exist_ok=True)
    return Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", approve=approve, **kw)


async def call(host: Host, **args: Any) -> Any:
    with anyio.fail_after(60):
        return await host.call_tool("bash", args)


async def test_sudo_is_asked_on_every_call_even_when_allowed_for_the_session(
    tmp_path: Path, fake_sudo: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    approver = Approver(Decision.allow_session())
    # An allow rule for bash itself does not cover an escalation either.
    async with make_host(tmp_path, approver, tool_permissions={"bash": "allow"}) as host:
        first = await call(host, argv=["sudo", "touch", str(outside / "a")])
        second = await call(host, argv=["sudo", "touch", str(outside / "b")])
    assert not first.is_error and not second.is_error, (first.text, second.text)
    assert (outside / "a").exists() and (outside / "b").exists()  # outside every writable root
    assert [(r.kind, r.rule) for r in approver.asked] == [(ApprovalKind.ESCALATION, "sudo")] * 2
    assert approver.asked[0].summary == f"sudo: touch {outside / 'a'}"
    assert fake_sudo.read_text().splitlines() == [f"-n touch {outside / 'a'}", f"-n touch {outside / 'b'}"]


async def test_unsandboxed_runs_outside_every_layer_and_is_asked_every_time(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    approver = Approver(Decision.allow_session())
    write = f"touch {outside}/x && echo done"
    async with make_host(tmp_path, approver, network=False) as host:
        confined = await call(host, command=write)
        # network and write_paths no longer apply: one request, of kind escalation.
        free = await call(host, command=write, sandbox=False, network=True, write_paths=[str(outside)])
        again = await call(host, command=f"rm {outside}/x", sandbox=False)
    assert confined.structured_content["exit_code"] != 0 and "Permission denied" in confined.text
    assert free.structured_content["exit_code"] == 0 and "done" in free.text, free.text
    assert again.structured_content["exit_code"] == 0
    assert [r.summary for r in approver.asked] == [f"unsandboxed: {write}", f"unsandboxed: rm {outside}/x"]
    assert {r.kind for r in approver.asked} == {ApprovalKind.ESCALATION}


@pytest.mark.parametrize("form", ["sudo", "sandbox: false"])
async def test_with_no_one_to_ask_it_does_not_run_and_says_so(
    tmp_path: Path, fake_sudo: Path, form: str
) -> None:
    target = tmp_path / "outside-file"
    args: dict[str, Any] = (
        {"argv": ["sudo", "touch", str(target)]}
        if form == "sudo"
        else {"command": f"touch {target}", "sandbox": False}
    )
    async with make_host(tmp_path) as host:  # no approval callback
        result = await call(host, **args)
    assert result.is_error and "was not run" in result.text and "outside the sandbox" in result.text, (
        result.text
    )
    assert not target.exists() and not fake_sudo.exists()


async def test_a_denied_escalation_does_not_run(tmp_path: Path, fake_sudo: Path) -> None:
    approver = Approver(Decision.deny("not on my machine"))
    async with make_host(tmp_path, approver) as host:
        result = await call(host, argv=["sudo", "apt-get", "install", "-y", "jq"])
    assert result.is_error and "not on my machine" in result.text
    assert approver.asked[0].summary == "sudo: apt-get install -y jq"
    assert not fake_sudo.exists()


async def test_a_refused_shape_is_not_asked_about(tmp_path: Path, fake_sudo: Path) -> None:
    approver = Approver(Decision.allow())
    async with make_host(tmp_path, approver) as host:
        flags = await call(host, argv=["sudo", "-u", "root", "ls"])
        in_shell = await call(host, command="sudo ls", sandbox=False)
    assert flags.is_error and "no options" in flags.text and '["sudo", PROGRAM, ...]' in flags.text
    assert in_shell.is_error and "only as argv" in in_shell.text
    assert approver.asked == [] and not fake_sudo.exists()


async def test_sudo_rm_really_deletes_while_a_plain_rm_goes_to_the_trash(
    tmp_path: Path, fake_sudo: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "gone").write_text("x")
    (ws / "kept").write_text("y")
    async with make_host(tmp_path, Approver(Decision.allow())) as host:
        sudo_rm = await call(host, argv=["sudo", "rm", "gone"])
        plain_rm = await call(host, argv=["rm", "kept"])
    assert sudo_rm.structured_content["exit_code"] == 0 and "trashed" not in sudo_rm.structured_content
    assert not (ws / "gone").exists()
    assert [e["path"] for e in plain_rm.structured_content["trashed"]] == [str(ws / "kept")]


async def test_stopping_a_sudo_run_sends_sigterm_to_sudo(tmp_path: Path, fake_sudo: Path) -> None:
    async with make_host(tmp_path, Approver(Decision.allow())) as host:
        started = await call(host, argv=["sudo", "sleep", "300"], run_in_background=True)
        pid = started.structured_content["process_id"]
        with anyio.fail_after(30):
            while not fake_sudo.exists():  # sudo has started: its log has its words
                await anyio.sleep(0.01)
        stopped = await call(host, action="stop", process_id=pid)
    assert not stopped.is_error, stopped.text
    words, *signals = fake_sudo.read_text().splitlines()
    # The group and each process found are asked (sudo relays it to its program); none needed a kill.
    assert words == "-n sleep 300" and signals and set(signals) == {"TERM"}


@pytest.mark.skipif(shutil.which("sudo") is None, reason="no real sudo on this machine")
async def test_a_real_sudo_without_a_password_rule_fails_at_once(tmp_path: Path) -> None:
    """``-n``: sudo never waits for a password the model cannot type."""
    async with make_host(tmp_path, Approver(Decision.allow())) as host:
        result = await call(host, argv=["sudo", "true"], timeout_seconds=30)
    assert result.structured_content["exit_code"] in (0, 1), result.text
