"""Only the argv ``["sudo", PROGRAM, ...]`` reaches sudo, and only after a person allowed that
call: every other way to get sudo (or su, doas) run is refused before anyone is asked.

The approver here allows everything and ``sudo`` is a stand-in first on PATH that records any
run, so a smuggled shape that got through would show in its log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import ApprovalRequest, Decision, Host

pytestmark = pytest.mark.anyio

SMUGGLED: list[tuple[dict[str, Any], str]] = [
    ({"argv": ["sudo", "-u", "root", "ls"]}, "no options"),  # sudo's flags run anything as anyone
    ({"argv": ["sudo", "-s"]}, "no options"),
    ({"argv": ["sudo", "LD_PRELOAD=/tmp/x.so", "ls"]}, "no options"),
    ({"argv": ["sudo", "sudo", "ls"]}, "inside sudo"),  # nested
    ({"argv": ["sudo", "su", "-c", "ls"]}, "inside sudo"),
    ({"argv": ["sudo", "bash", "-c", "sudo ls"]}, "only as argv"),
    ({"argv": ["sudo", "/usr/bin/ls"]}, "is a path"),  # the program by path
    ({"argv": ["/usr/bin/sudo", "ls"]}, "only as argv"),  # sudo itself by path
    ({"argv": ["env", "sudo", "ls"]}, "only as argv"),  # behind a wrapper
    ({"argv": ["sh", "-c", "sudo ls"]}, "only as argv"),  # inside sh -c
    ({"command": "sudo ls"}, "only as argv"),  # a command line
    ({"command": "sudo ls", "sandbox": False}, "only as argv"),
    ({"command": "echo ok && doas ls"}, "only as argv"),
    ({"command": "bash -c 'su -c ls'", "sandbox": False}, "only as argv"),
]


@pytest.fixture
def host_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[ApprovalRequest]]:
    bin_dir = tmp_path / "sbin"
    bin_dir.mkdir()
    log = tmp_path / "sudo.log"
    sudo = bin_dir / "sudo"
    sudo.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n')
    sudo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws", log, []


async def run(tmp_path: Path, asked: list[ApprovalRequest], args: dict[str, Any]) -> Any:
    async def approve(requests: list[ApprovalRequest]) -> list[Decision]:
        asked.extend(requests)
        return [Decision.allow() for _ in requests]

    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", approve=approve) as host:
        with anyio.fail_after(60):
            return await host.call_tool("bash", args)


@pytest.mark.parametrize(("args", "why"), SMUGGLED, ids=[str(a) for a, _ in SMUGGLED])
async def test_a_smuggled_sudo_is_refused_before_anyone_is_asked(
    tmp_path: Path, host_parts: tuple[Path, Path, list[ApprovalRequest]], args: dict[str, Any], why: str
) -> None:
    _, log, asked = host_parts
    result = await run(tmp_path, asked, args)
    assert result.is_error and why in result.text, result.text
    assert asked == [] and not log.exists()


async def test_a_sudo_planted_where_commands_write_is_not_run(
    tmp_path: Path, host_parts: tuple[Path, Path, list[ApprovalRequest]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PATH that names a workspace directory first: a confined command could have put a
    `sudo` there, which would then run unconfined under the name the person allowed."""
    ws, log, asked = host_parts
    planted = ws / "bin"
    planted.mkdir()
    (planted / "sudo").write_text(f'#!/bin/sh\necho planted >> "{log}"\n')
    (planted / "sudo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted}{os.pathsep}{os.environ['PATH']}")
    result = await run(tmp_path, asked, {"argv": ["sudo", "ls"]})
    assert result.is_error and "where commands can write" in result.text, result.text
    assert not log.exists()
