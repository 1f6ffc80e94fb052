"""Approvals: the host's callback decides, in batches, on calls that need it (real Host, real
QuickJS, real files)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import ApprovalRequest, Decision, Host
from codemode.policy import ApprovalKind, Approvals
from codemode.tools import make_tool
from tests.host_support import MakeHost, assert_healthy

pytestmark = pytest.mark.anyio

SECRET = "ghp_" + "Z9y8X7w6V5" * 3 + "abc123"


class Asker:
    """An approval callback that records each batch and answers with ``answer(request)``."""

    def __init__(self, answer: Any = None) -> None:
        self.batches: list[list[ApprovalRequest]] = []
        self.answer = answer or (lambda request: Decision.allow())
        self.gate: anyio.Event | None = None

    async def __call__(self, requests: list[ApprovalRequest]) -> Sequence[Decision]:
        self.batches.append(requests)
        if self.gate is not None:
            await self.gate.wait()
        return [self.answer(request) for request in requests]


async def run(host: Host, source: str) -> Any:
    with anyio.fail_after(60):
        return await host.run_code(source)


async def test_calls_started_together_reach_the_callback_as_one_batch(tmp_path: Path) -> None:
    asker = Asker(lambda r: Decision.deny("not b") if "b.txt" in r.summary else Decision.allow())
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "r.txt").write_text("read")
    async with Host(workspace=ws, state_dir=tmp_path / "state", approve=asker) as host:
        result = await run(
            host,
            "const r = await Promise.allSettled([...['a', 'b', 'c'].map(n =>"
            " tools.write_file({path: n + '.txt', content: n})), tools.read_file({path: 'r.txt'})]);"
            "print(JSON.stringify(r.map(x => x.status === 'fulfilled' ? 'ok' : x.reason.code + ': ' + x.reason.message)));",
        )
    assert len(asker.batches) == 1, asker.batches
    (batch,) = asker.batches  # only the writes: the read-only call needs no decision
    assert [r.kind for r in batch] == [ApprovalKind.TOOL] * 3
    assert [r.tool for r in batch] == ["write_file"] * 3
    assert all(r.rule == "write_file" for r in batch)
    assert (ws / "a.txt").read_text() == "a" and (ws / "c.txt").read_text() == "c"
    assert not (ws / "b.txt").exists()  # the denied call never ran
    assert (
        '"ok"' in result.text
        and "denied: write_file: the call of write_file was denied: not b" in result.text
    )


async def test_the_program_waits_only_for_the_calls_that_need_a_decision(make_host: MakeHost) -> None:
    asker = Asker()
    asker.gate = anyio.Event()
    async with make_host(approve=asker) as (host, _):

        @host.tool()
        def open_gate() -> str:
            """Let the approval callback answer."""
            assert asker.gate is not None
            asker.gate.set()
            return "open"

        # read_file is read-only (allowed) and open_gate declares nothing: both run while the
        # write waits. Were they held behind the approval, nothing would ever open the gate.
        (host.workspace / "r.txt").write_text("read me")
        result = await run(
            host,
            "const w = tools.write_file({path: 'w.txt', content: 'x'});"
            "const r = await tools.read_file({path: 'r.txt'}); print(r.content);"
            "print(await tools.open_gate()); await w; print('written');",
        )
    assert result.ok, result.text
    assert result.text.splitlines() == ["read me", "open", "written"]


async def test_allow_for_the_session_is_not_asked_again_and_ends_with_the_session(
    make_host: MakeHost,
) -> None:
    asker = Asker(lambda r: Decision.allow_session())
    async with make_host(approve=asker) as (host, _):
        for n in range(3):
            await run(host, f"await tools.write_file({{path: 'f{n}.txt', content: 'x'}});")
        assert len(asker.batches) == 1
        other = await host.run_code(
            "await tools.write_file({path: 'g.txt', content: 'x'});", session_id="other"
        )
        assert other.ok and len(asker.batches) == 2  # another session is asked for itself
        await host.close_session("default")
        await run(host, "await tools.write_file({path: 'h.txt', content: 'x'});")
        assert len(asker.batches) == 3


async def test_a_deny_permission_refuses_without_any_callback(make_host: MakeHost) -> None:
    async with make_host(tool_permissions={"write_file": "deny"}) as (host, _):
        result = await run(
            host,
            "try { await tools.write_file({path: 'x.txt', content: 'x'}); } catch (e) { print(e.code, e.message); }",
        )
        direct = await host.call_tool("write_file", {"path": "y.txt", "content": "y"})
        assert not (host.workspace / "x.txt").exists() and not (host.workspace / "y.txt").exists()
        await assert_healthy(host)
    assert result.text.startswith("denied write_file: write_file is not allowed on this host"), result.text
    assert direct.is_error and "not allowed on this host" in direct.text


async def test_a_failing_callback_denies_its_batch_and_the_host_stays_up(make_host: MakeHost) -> None:
    async def broken(requests: list[ApprovalRequest]) -> list[Decision]:
        raise RuntimeError("approval service down")

    async def short(requests: list[ApprovalRequest]) -> list[Decision]:
        return []

    for callback, words in (
        (broken, "RuntimeError: approval service down"),
        (short, "0 answers for 1 requests"),
    ):
        async with make_host(approve=callback) as (host, _):
            result = await run(
                host,
                "try { await tools.write_file({path: 'x.txt', content: 'x'}); } catch (e) { print(e.code, e.message); }",
            )
            assert not (host.workspace / "x.txt").exists()
            await assert_healthy(host)
        assert result.text.startswith("denied "), result.text
        assert words in result.text


async def test_direct_calls_ask_too_and_decisions_are_kept_redacted(make_host: MakeHost) -> None:
    asker = Asker(lambda r: Decision.deny("no secrets in files"))
    async with make_host(approve=asker) as (host, _):
        denied = await host.call_tool("write_file", {"path": "k.txt", "content": f"token={SECRET}"})
        records = host.state.approvals.for_session("default")
    assert denied.is_error and "no secrets in files" in denied.text
    assert SECRET not in str(asker.batches[0][0].arguments)  # redacted before it left the host
    (record,) = records
    assert record["verdict"] == "deny" and record["reason"] == "no secrets in files"
    arguments = record["arguments"]
    assert record["tool"] == "write_file" and isinstance(arguments, str) and SECRET not in arguments


async def test_calls_left_waiting_for_a_decision_when_the_program_ends_are_cancelled(
    make_host: MakeHost,
) -> None:
    asker = Asker()
    asker.gate = anyio.Event()  # never opened: the callback never answers
    async with make_host(approve=asker) as (host, _):
        result = await run(
            host, "tools.write_file({path: 'x.txt', content: 'x'}); await sleep(30); print('end');"
        )
        assert not (host.workspace / "x.txt").exists()
        await assert_healthy(host)
    assert result.cancelled_calls == ["write_file"], result.text


def test_capabilities_beyond_the_host_defaults_are_requests_of_their_own() -> None:
    def fetch(url: str, network: bool = False, write_paths: list[str] | None = None) -> str:
        """A tool with per-call capabilities."""
        return url

    tool = make_tool(fetch)
    closed = Approvals(network_default=False)
    open_ = Approvals(network_default=True)
    assert closed.requests(tool, {"url": "u"}, "s") == []
    asked = closed.requests(tool, {"url": "u", "network": True}, "s")
    assert isinstance(asked, list)  # requests, not a refusal
    (network,) = asked
    assert network.kind is ApprovalKind.CAPABILITY and network.rule == "network"
    assert open_.requests(tool, {"url": "u", "network": True}, "s") == []  # the host allows it anyway
    asked = open_.requests(tool, {"url": "u", "write_paths": ["/srv/out"]}, "s")
    assert isinstance(asked, list)
    (paths,) = asked
    assert paths.rule == "write_paths" and "/srv/out" in paths.summary
    refusal = Approvals.refusal([network], [Decision.deny("offline")])
    assert refusal == "the capability 'network' was denied: offline; do something else or ask the user"


def test_permissions_follow_the_annotations_unless_the_host_says_otherwise() -> None:
    def look() -> str:
        """Read-only."""
        return ""

    def change() -> str:
        """Changes things."""
        return ""

    def plain() -> str:
        """Declares nothing."""
        return ""

    look_t = make_tool(look, read_only=True)
    change_t = make_tool(change, destructive=True)
    plain_t = make_tool(plain)
    approvals = Approvals(permissions={"plain": "ask"})
    assert [approvals.permission(t).value for t in (look_t, change_t, plain_t)] == ["allow", "ask", "ask"]
    assert Approvals().permission(plain_t).value == "allow"


async def test_commands_off_the_read_only_allowlist_are_asked_and_the_rest_run(tmp_path: Path) -> None:
    from codemode import CommandPolicy

    asker = Asker(lambda r: Decision.deny("no writes today"))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "seen.txt").write_text("x")
    policy = CommandPolicy(approve_commands=True)
    async with Host(workspace=ws, state_dir=tmp_path / "state", approve=asker, command_policy=policy) as host:
        result = await run(
            host,
            "const r = await Promise.allSettled([tools.bash({command: 'ls'}), tools.bash({command: 'touch made.txt'}),"
            " tools.bash({command: 'cat seen.txt | wc -c'})]);"
            "print(r.map(x => x.status === 'fulfilled' ? x.value.exit_code : x.reason.code).join(' '));",
        )
    assert [[(r.kind.value, r.rule) for r in batch] for batch in asker.batches] == [
        [("command", "touch made.txt")]
    ]
    assert result.text.strip() == "0 denied 0", result.text
    assert not (ws / "made.txt").exists()


@pytest.mark.parametrize(
    ("words", "read_only"),
    [
        (["ls", "-la"], True),
        (["git", "status"], True),
        (["git", "push"], False),
        (["git"], False),
        (["find", ".", "-name", "*.py"], True),
        (["find", ".", "-delete"], False),
        (["find", ".", "-exec", "rm", "{}", ";"], False),
        (["tail", "-f", "log"], False),
        (["cat", ".env"], False),
        (["cat", "config/.env.local"], False),
        (["grep", "-r", "key", "/home/u/.ssh"], False),
        (["cat", "deploy.pem"], False),
        (["sort", "-o", "out", "in"], False),
        (["cat", None], False),
        (["rm", "x"], False),
    ],
)
def test_the_read_only_allowlist(words: list[str | None], read_only: bool) -> None:
    from codemode.policy._readonly import is_read_only

    assert is_read_only(words) is read_only
