"""Observing background processes without polling: wait, paced reads, exactly-once completions,
keyword reports, lifetimes, verification after the hand-off, promotion that outlives its host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.errors import ToolError
from codemode.sandbox import SandboxPolicy
from codemode.state import Archive
from codemode.tools._model import ToolContext
from codemode.tools.bash import Notification, ProcessManager
from codemode.tools.bash._results import BashRead, BashWaited

from .conftest import Caller

pytestmark = pytest.mark.anyio


async def _start(bash: Caller, command: str, **extra: Any) -> str:
    result = await bash(command=command, run_in_background=True, **extra)
    assert not result.is_error, result.text
    process_id: str = result.structured_content["process_id"]
    return process_id


async def _pending(
    manager: ProcessManager, session: str, kind: str, seconds: float = 60
) -> list[Notification]:
    """The session's pending notifications of ``kind``, once there is one (nothing read)."""
    with anyio.fail_after(seconds):
        while not (found := [n for n in manager.pending_notifications(session) if n.kind == kind]):
            await anyio.sleep(0.01)
    return found


async def test_wait_on_a_pattern_then_on_exit(bash: Caller, manager: ProcessManager, workspace: Path) -> None:
    pid = await _start(
        bash,
        f"echo starting; sleep 0.2; echo 'listening on 8123'; while [ ! -e {workspace}/stop ]; do sleep 0.01; done; "
        "echo bye; exit 3",
    )
    ready = await bash(
        action="wait", process_id=pid, until={"pattern": r"listening on \d+"}, timeout_ms=60_000
    )
    data = BashWaited.model_validate(ready.structured_content).model_dump()
    assert (data["reason"], data["line"], data["exited"]) == ("pattern", "listening on 8123", False)
    assert "a line matched" in ready.text and "listening on 8123" in ready.text
    # next_offset is just past the matching line: waiting on from there sees only what follows.
    again = await bash(
        action="wait",
        process_id=pid,
        until={"pattern": "listening"},
        offset_bytes=data["next_offset"],
        timeout_ms=50,
    )
    assert again.structured_content["reason"] == "timeout" and "timed out" in again.text
    (workspace / "stop").touch()
    ended = await bash(action="wait", process_id=pid, timeout_ms=60_000)
    assert ended.structured_content["reason"] == "exit" and ended.structured_content["exit_code"] == 3
    assert manager.pending_notifications("s1") == []  # the wait showed the exit: delivered


async def test_wait_times_out_and_says_so(bash: Caller) -> None:
    pid = await _start(bash, "exec sleep 1000")
    result = await bash(action="wait", process_id=pid, until="exit", timeout_ms=100)
    assert result.structured_content["reason"] == "timeout"
    assert result.structured_content["state"] == "running"
    await bash(action="stop", process_id=pid)


async def test_wait_with_a_bad_pattern_is_a_clear_error(bash: Caller) -> None:
    pid = await _start(bash, "exec sleep 1000")
    with pytest.raises(ToolError, match="not a valid regular expression"):
        await bash(action="wait", process_id=pid, until={"pattern": "(unclosed"})
    await bash(action="stop", process_id=pid)


async def test_a_waiting_read_is_paced_not_woken_by_the_first_byte(bash: Caller) -> None:
    # A byte every 10 ms, forever: the read returns at max_bytes, not with one byte.
    pid = await _start(bash, "while :; do printf x; sleep 0.01; done")
    result = await bash(action="read", process_id=pid, wait_ms=20_000, max_bytes=50)
    assert result.structured_content["output"] == "x" * 50
    await bash(action="stop", process_id=pid)
    # A short burst, then quiet: the read returns once it is quiet, with more than its first byte.
    pid = await _start(bash, "for i in $(seq 30); do printf y; sleep 0.01; done; exec sleep 1000")
    burst = await bash(action="read", process_id=pid, wait_ms=20_000)
    assert len(burst.structured_content["output"]) > 1
    await bash(action="stop", process_id=pid)


async def test_a_read_that_shows_the_exit_delivers_the_completion(
    bash: Caller, manager: ProcessManager
) -> None:
    pid = await _start(bash, "echo hi; exit 2")
    with anyio.fail_after(60):
        while not (await bash(action="read", process_id=pid, wait_ms=1000)).structured_content["exited"]:
            pass
    assert manager.pending_notifications("s1") == []


async def test_keyword_report_then_its_rate_limit(
    bash: Caller, manager: ProcessManager, workspace: Path
) -> None:
    pid = await _start(
        bash,
        f"echo 'ERROR: disk is full'; while [ ! -e {workspace}/f ]; do sleep 0.05; done; echo 'fatal: again'; "
        f"while [ ! -e {workspace}/g ]; do sleep 0.05; done; exit 0",
    )
    (report,) = await _pending(manager, "s1", "report")
    assert (
        report.process_id == pid and "still running" in report.text and "ERROR: disk is full" in report.text
    )
    assert report.data is not None and report.data["keyword"] == "error"
    assert "ERROR: disk is full" in report.data["output"]
    (workspace / "f").touch()
    seen = await bash(action="wait", process_id=pid, until={"pattern": "fatal: again"}, timeout_ms=60_000)
    assert seen.structured_content["reason"] == "pattern"
    (workspace / "g").touch()
    (completion,) = await _pending(manager, "s1", "completion")
    # Within 30 s of the first report there is no second one; the completion keeps the output's end.
    assert [n.kind for n in manager.pending_notifications("s1")] == ["report", "completion"]
    assert completion.data is not None and "fatal: again" in completion.data["output_tail"]


async def test_report_on_empty_reports_nothing(
    bash: Caller, manager: ProcessManager, workspace: Path
) -> None:
    pid = await _start(bash, f"echo error; while [ ! -e {workspace}/f ]; do sleep 0.05; done", report_on=[])
    started = await bash(action="wait", process_id=pid, until={"pattern": "error"})
    assert started.structured_content["reason"] == "pattern"
    (workspace / "f").touch()
    await _pending(manager, "s1", "completion")
    assert [n.kind for n in manager.pending_notifications("s1")] == ["completion"]


async def test_a_background_timeout_stops_it_and_says_so(bash: Caller, manager: ProcessManager) -> None:
    started = await bash(command="exec sleep 1000", run_in_background=True, timeout_seconds=1)
    assert "stopped after 1 s" in started.text
    (completion,) = await _pending(manager, "s1", "completion")
    assert "was stopped" in completion.text and "timeout_seconds (1 s)" in completion.text


async def test_a_background_test_run_ends_with_its_summary(
    bash: Caller, manager: ProcessManager, workspace: Path
) -> None:
    (workspace / "test_two.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    assert False\n")
    pid = await _start(bash, f"{sys.executable} -m pytest -q test_two.py -p no:cacheprovider")
    (completion,) = await _pending(manager, "s1", "completion")
    assert "1 failed, 1 passed" in completion.text
    assert completion.data is not None and completion.data["verification"]["failed"] == 1
    read = await bash(action="read", process_id=pid)
    data = BashRead.model_validate(read.structured_content).model_dump()
    assert data["verification"]["passed"] == 1 and "1 failed, 1 passed" in read.text


async def test_a_test_run_that_outlives_the_handoff_ends_with_its_summary(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    manager = ProcessManager(archive, handoff_seconds=0.3)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    go = workspace / "go"
    (workspace / "test_slow.py").write_text(
        f"import os, time\n\ndef test_slow():\n    while not os.path.exists({str(go)!r}):\n        time.sleep(0.01)\n"
    )
    result = await bash(command=f"{sys.executable} -m pytest -q test_slow.py -p no:cacheprovider")
    pid = result.structured_content["promoted_process_id"]
    assert pid and pid in result.text
    go.touch()
    (completion,) = await _pending(manager, "s1", "completion")
    assert completion.process_id == pid and "1 passed" in completion.text
    await manager.aclose()


_CLI_ENV_KEYS = ("PATH", "HOME", "TIKTOKEN_CACHE_DIR", "CODEMODE_TIKTOKEN_DOWNLOAD")


def _cli(state: Path, workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: os.environ[k] for k in _CLI_ENV_KEYS if k in os.environ}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "codemode",
            args[0],
            "--state-dir",
            str(state),
            "--workspace",
            str(workspace),
            *args[1:],
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.slow  # the CLI's call waits out the default handoff (10 s) before it promotes the command
def test_a_command_promoted_under_codemode_call_outlives_the_cli(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    state = tmp_path / "state"
    go = workspace / "go"
    command = f"echo before; while [ ! -e {go} ]; do sleep 0.02; done; echo after; exit 4"
    first = _cli(state, workspace, "call", "--json", "bash", json.dumps({"command": command}))
    assert first.returncode == 0, first.stderr
    pid = json.loads(first.stdout)["structured_content"]["promoted_process_id"]
    assert pid
    go.touch()  # the CLI has exited: the command goes on, read by its own supervisor
    args = {"action": "wait", "process_id": pid, "until": "exit", "timeout_ms": 60_000}
    waited = _cli(state, workspace, "call", "--json", "bash", json.dumps(args))
    assert json.loads(waited.stdout)["structured_content"]["exit_code"] == 4, waited.stdout
    read = _cli(state, workspace, "call", "--json", "bash", json.dumps({"action": "read", "process_id": pid}))
    data = json.loads(read.stdout)["structured_content"]
    assert "before" in data["output"] and "after" in data["output"]
    assert (data["exited"], data["exit_code"]) == (True, 4)
    assert "exited with code 4" not in read.stderr  # the wait showed the exit: delivered then
