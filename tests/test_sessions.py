"""Sessions stay apart: ids are checked where they enter (Host, CLI, MCP); records and archive
refs belong to their session. Real hosts, a real `codemode` subprocess, a real MCP client."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from codemode import Host
from codemode._ids import ID_MAX_CHARS, check_id
from codemode.errors import UserError

pytestmark = pytest.mark.anyio

BAD_IDS = [
    ("", "must not be empty"),
    ("x" * (ID_MAX_CHARS + 1), "257 characters long; the limit is 256"),
    ("team\x1fvictim", "U+001F at position 4"),
    ("a\x00b", "U+0000 at position 1"),
    ("line\nbreak", "U+000A"),
    ("del\x7f", "U+007F"),
    ("c1\x85", "U+0085"),
    ("sep\u2028", "U+2028"),
    ("half\ud800", "U+D800"),
]


@pytest.mark.parametrize(("value", "message"), BAD_IDS)
def test_check_id_refuses_empty_long_and_control_characters(value: str, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("+", r"\+")):
        check_id(value, "call_id")


@pytest.mark.parametrize("value", ["c1", "x" * ID_MAX_CHARS, "run 2024-01-01 / é😀", "tab-free\u00a0space"])
def test_check_id_keeps_ordinary_ids(value: str) -> None:
    assert check_id(value, "session_id") == value


def test_check_id_refuses_a_non_string() -> None:
    with pytest.raises(UserError, match="call_id must be a string, got int"):
        check_id(7, "call_id")


async def test_the_record_collision_of_issue_8_cannot_happen(host: Host) -> None:
    victim = await host.run_code('print("victim result")', session_id="team-victim", call_id="c1")
    assert victim.text == "victim result\n"
    # The attack needs a separator inside an id: refused where it enters.
    with pytest.raises(UserError, match="call_id contains U\\+001F"):
        await host.run_code('print("attacker")', session_id="team", call_id="victim\x1fc1")
    with pytest.raises(UserError, match="session_id contains U\\+001F"):
        await host.run_code('print("attacker")', session_id="team\x1fvictim", call_id="c1")
    # And the same call id in another session runs afresh.
    other = await host.run_code('print("other")', session_id="team", call_id="c1")
    assert other.text == "other\n"


@pytest.mark.parametrize(("value", "message"), BAD_IDS[:4])
async def test_host_entry_points_check_ids(host: Host, value: str, message: str) -> None:
    calls: list[Any] = [
        host.run_code("print(1)", session_id=value),
        host.run_code("print(1)", call_id=value),
        host.call_tool("read_archive", {"ref": "ar_x"}, session_id=value),
        host.call_tool("read_archive", {"ref": "ar_x"}, call_id=value),
        host.close_session(value),
    ]
    for call in calls:
        with pytest.raises(UserError, match=message.replace("+", r"\+")):
            await call
    with pytest.raises(UserError):
        host.pending_notifications(value)
    with pytest.raises(UserError):
        host.ack_notifications([], value)


def test_host_config_checks_its_session_id(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="session_id contains U\\+001F"):
        Host(workspace=tmp_path, state_dir=tmp_path.parent / "state", session_id="a\x1fb")


async def test_another_sessions_archive_ref_is_as_unknown_as_a_made_up_one(host: Host) -> None:
    long = await host.run_code('print("secret of A ".repeat(5000))', session_id="A", max_output_tokens=300)
    (ref,) = long.refs
    mine = await host.call_tool("read_archive", {"ref": ref, "limit": 20}, session_id="A")
    assert not mine.is_error and mine.text.startswith("secret of A")
    theirs = await host.call_tool("read_archive", {"ref": ref, "limit": 20}, session_id="B")
    made_up = await host.call_tool("read_archive", {"ref": "ar_" + "x" * 20, "limit": 20}, session_id="B")
    assert theirs.is_error and made_up.is_error
    assert "secret" not in theirs.text
    assert theirs.text.replace(ref, "REF") == made_up.text.replace("ar_" + "x" * 20, "REF")
    # From a program too.
    program = await host.run_code(
        f'try {{ await tools.read_archive({{ref: "{ref}"}}) }} catch (e) {{ print(e.message) }}',
        session_id="B",
    )
    assert "no archived text" in program.text and "secret" not in program.text


async def test_another_sessions_bash_log_ref_is_unknown(host: Host) -> None:
    ran = await host.call_tool(
        "bash", {"command": "head -c 300000 /dev/zero | tr '\\0' s"}, session_id="A", max_output_tokens=300
    )
    ref = ran.structured_content["log"]["ref"]
    assert ref is not None
    mine = await host.call_tool("read_archive", {"ref": ref, "limit": 10}, session_id="A")
    assert not mine.is_error and mine.structured_content["text"] == "s" * 10
    theirs = await host.call_tool("read_archive", {"ref": ref, "limit": 10}, session_id="B")
    assert theirs.is_error and "no archived text" in theirs.text


def _codemode(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    env = {**os.environ, "CODEMODE_HOME": str(tmp_path / "state")}
    return subprocess.run(
        [sys.executable, "-m", "codemode", *args, "--workspace", str(workspace)],
        input='print("EXECUTED")',
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.blackbox  # starts codemode as a separate process
def test_cli_refuses_a_session_or_call_id_with_a_control_character(tmp_path: Path) -> None:
    bad_session = _codemode(tmp_path, "run", "-", "--session", "team\x1fvictim")
    assert bad_session.returncode == 2, bad_session
    assert "session_id contains U+001F" in bad_session.stderr and "EXECUTED" not in bad_session.stdout
    bad_call = _codemode(tmp_path, "run", "-", "--call-id", "victim\x1fc1")
    assert bad_call.returncode == 2, bad_call
    assert "call_id contains U+001F" in bad_call.stderr and "EXECUTED" not in bad_call.stdout
    good = _codemode(tmp_path, "run", "-", "--call-id", "c1")
    assert good.returncode == 0 and good.stdout == "EXECUTED\n", good


@pytest.mark.blackbox  # starts codemode as a separate process
async def test_mcp_run_code_refuses_a_bad_call_id_with_a_clear_error(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "codemode", "mcp", "--workspace", str(workspace), "--session", "mcp-ids"],
        env={**os.environ, "CODEMODE_HOME": str(tmp_path / "state")},
    )
    with anyio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for call_id, message in [("victim\x1fc1", "U+001F"), ("", "empty"), (7, "must be a string")]:
                result = await session.call_tool(
                    "run_code", {"code": 'print("EXECUTED")', "call_id": call_id}
                )
                assert isinstance(result, types.CallToolResult) and result.is_error, call_id
                text = result.content[0]
                assert isinstance(text, types.TextContent)
                assert "call_id" in text.text and message in text.text and "EXECUTED" not in text.text, (
                    text.text
                )
            ok = await session.call_tool("run_code", {"code": 'print("EXECUTED")', "call_id": "c1"})
            assert isinstance(ok, types.CallToolResult) and not ok.is_error


async def test_a_call_id_replays_its_own_source_only(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state") as host:
        first = await host.run_code("print(1 + 1)", call_id="c1")
        again = await host.run_code("print(1 + 1)", call_id="c1")
        assert again == first and first.text.strip() == "2"
        other = await host.run_code("print('different')", call_id="c1")
        assert not other.ok and other.error is not None and other.error.name == "CallIdReused"
        assert "'c1'" in other.text and "different program" in other.text and "nothing ran" in other.text
        assert "different" not in other.text.replace("different program", "")
        assert (await host.run_code("print(1 + 1)", call_id="c1")) == first  # still replays


async def test_a_run_without_a_call_id_keeps_no_record_but_the_session_is_known(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state") as host:
        for _ in range(3):
            result = await host.run_code("print(1)", session_id="fresh")
        assert host.state.runs.get("fresh", result.call_id) is None  # nothing can replay it
        assert host.session_exists("fresh") and not host.session_exists("never-ran")
        conn = host.state.db.connect()
        try:
            assert conn.execute("SELECT COUNT(*) FROM run_records").fetchone()[0] == 0
        finally:
            conn.close()


async def test_a_sessions_temp_dir_is_made_once_off_the_event_loop(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Making it mounts a tmpfs (a millisecond or more): never on the loop's thread, and two
    # first calls of one session at once make one dir, not two.
    import threading

    from codemode import _sessions
    from codemode.sandbox import make_session_tmp as real

    made_on: list[int] = []

    def recording(*args: Any) -> Path:
        made_on.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(_sessions, "make_session_tmp", recording)
    loop_thread = threading.get_ident()
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(functools.partial(host.call_tool, "bash", {"command": "true"}, session_id="fresh"))
    assert len(made_on) == 1 and made_on[0] != loop_thread
