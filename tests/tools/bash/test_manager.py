"""Background processes, hand-off and the control actions, through the bash tool."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from codemode.errors import ProcessNotFound, ToolError
from codemode.sandbox import SandboxPolicy
from codemode.state import Archive, State
from codemode.tools._model import ToolContext
from codemode.tools.bash import ProcessManager
from codemode.tools.bash._completions import QuietSessions
from tests.host_support import survivors

from .conftest import Caller

pytestmark = pytest.mark.anyio


async def _read_until(bash: Caller, process_id: str, needle: str, *, seconds: float = 10) -> str:
    """Read a process's output until ``needle`` shows up (deadline, no fixed sleeps)."""
    seen = ""
    offset = 0
    with anyio.fail_after(seconds):
        while needle not in seen:
            result = await bash(action="read", process_id=process_id, offset_bytes=offset, wait_ms=2000)
            seen += result.structured_content["output"]
            offset = result.structured_content["next_offset"]
    return seen


async def _wait_exited(bash: Caller, process_id: str, *, seconds: float = 10) -> dict[str, Any]:
    with anyio.fail_after(seconds):
        while True:
            result = await bash(action="read", process_id=process_id, wait_ms=1000, offset_bytes=0)
            if result.structured_content["exited"]:
                data: dict[str, Any] = result.structured_content
                return data


async def _start(bash: Caller, command: str, **extra: Any) -> str:
    result = await bash(command=command, run_in_background=True, **extra)
    assert not result.is_error, result.text
    process_id: str = result.structured_content["process_id"]
    assert process_id in result.text
    return process_id


async def test_background_run_read_write_exit_and_notify_once(bash: Caller, manager: ProcessManager) -> None:
    pid = await _start(bash, 'echo ready; read line; echo "got $line"; read _; exit 4')
    assert pid.startswith("p_")
    await _read_until(bash, pid, "ready")
    written = await bash(action="write", process_id=pid, input="hello\n")
    assert written.structured_content["bytes"] == 6
    output = await _read_until(bash, pid, "got hello")
    assert "got hello" in output
    await bash(action="write", process_id=pid, input="\n")
    # Not read to its exit: the completion waits for the session.
    with anyio.fail_after(30):
        while not (pending := manager.pending_notifications("s1")):
            await anyio.sleep(0.01)
    assert [n.process_id for n in pending] == [pid]
    assert pending[0].exit_code == 4
    assert pid in pending[0].text and "code 4" in pending[0].text
    assert manager.pending_notifications("s2") == []
    manager.ack("s1", [pending[0].id])
    assert manager.pending_notifications("s1") == []
    data = await _wait_exited(bash, pid)
    assert (data["exit_code"], data["state"]) == (4, "exited")


async def _wait_pending(manager: ProcessManager, session: str) -> list[Any]:
    """The session's pending notifications, once there are some (without reading the process)."""
    with anyio.fail_after(30):
        while not (pending := manager.pending_notifications(session)):
            await anyio.sleep(0.01)
    return pending


async def test_background_runs_in_a_pty_with_term(bash: Caller) -> None:
    pid = await _start(bash, 'test -t 0 && test -t 1 && echo "tty $TERM"')
    output = await _read_until(bash, pid, "tty ")
    assert "tty xterm-256color" in output


async def test_read_snapshot_and_offsets(bash: Caller) -> None:
    pid = await _start(bash, "printf 'abcdef'")
    await _wait_exited(bash, pid)
    first = await bash(action="read", process_id=pid, offset_bytes=0, max_bytes=3)
    assert first.structured_content["output"] == "abc"
    assert "offset_bytes 3" in first.text
    rest = await bash(action="read", process_id=pid, offset_bytes=first.structured_content["next_offset"])
    assert rest.structured_content["output"] == "def"
    assert rest.structured_content["exited"] is True


async def test_read_wait_returns_on_exit_without_output(bash: Caller) -> None:
    pid = await _start(bash, "sleep 0.2")
    with anyio.fail_after(10):
        result = await bash(action="read", process_id=pid, wait_ms=60_000)
        while not result.structured_content["exited"]:
            result = await bash(action="read", process_id=pid, wait_ms=60_000)
    assert result.structured_content["exit_code"] == 0
    assert "exit code 0" in result.text


async def test_stop_ends_tree_including_setsid_nohup_child(bash: Caller) -> None:
    token = f"bgnohup{os.getpid()}"
    pid = await _start(
        bash,
        f"setsid nohup bash -c 'exec -a {token} sleep 1000' >/dev/null 2>&1 & "
        f"(setsid bash -c '(exec -a {token} sleep 1000) &' &) ; echo spawned; sleep 1000",
    )
    await _read_until(bash, pid, "spawned")
    with anyio.fail_after(10):
        while len(survivors(token)) < 2:
            await anyio.sleep(0.01)
    result = await bash(action="stop", process_id=pid)
    assert "Stopped process" in result.text
    assert survivors(token) == []
    assert result.structured_content["state"] == "stopped"


async def test_stop_ignoring_sigterm(bash: Caller) -> None:
    pid = await _start(bash, "trap '' TERM; echo armed; while true; do sleep 0.1; done")
    await _read_until(bash, pid, "armed")
    result = await bash(action="stop", process_id=pid)
    assert result.structured_content["exit_code"] == 137


async def test_stopped_process_queues_no_notification(bash: Caller, manager: ProcessManager) -> None:
    pid = await _start(bash, "sleep 1000")
    await bash(action="stop", process_id=pid)
    assert manager.pending_notifications("s1") == []


async def test_detached_queues_no_notification(bash: Caller, manager: ProcessManager) -> None:
    pid = await _start(bash, "true", completion_mode="detached")
    await _wait_exited(bash, pid)
    assert manager.pending_notifications("s1") == []


async def test_update_completion_mode(bash: Caller, manager: ProcessManager) -> None:
    pid = await _start(bash, "read x", completion_mode="detached")
    result = await bash(action="update", process_id=pid, completion_mode="resume")
    assert "resume" in result.text
    await bash(action="write", process_id=pid, input="go\n")
    assert [n.process_id for n in await _wait_pending(manager, "s1")] == [pid]


async def test_list_shows_session_processes_only(bash: Caller) -> None:
    mine = await _start(bash, "echo mine")
    other = bash.as_session("s2")
    theirs = await _start(other, "echo theirs")
    await _wait_exited(bash, mine)
    listed = await bash(action="list")
    ids = [p["process_id"] for p in listed.structured_content["processes"]]
    assert ids == [mine]
    row = listed.structured_content["processes"][0]
    assert row["state"] == "exited" and row["exit_code"] == 0 and row["log_bytes"] > 0
    assert row["command"] == "echo mine" and row["started"]
    assert mine in listed.text
    await _wait_exited(other, theirs)


@pytest.mark.parametrize("action", ["read", "write", "stop", "update"])
async def test_unknown_and_foreign_ids_are_no_such_process(bash: Caller, action: str) -> None:
    extra: dict[str, Any] = {"write": {"input": "x"}, "update": {"completion_mode": "detached"}}.get(
        action, {}
    )
    with pytest.raises(ProcessNotFound, match="no such process"):
        await bash(action=action, process_id="p_doesnotexist", **extra)
    theirs = await _start(bash.as_session("s2"), "sleep 1000")
    with pytest.raises(ProcessNotFound, match="no such process"):
        await bash(action=action, process_id=theirs, **extra)
    await bash.as_session("s2")(action="stop", process_id=theirs)


async def test_exited_process_read_write_stop(bash: Caller) -> None:
    pid = await _start(bash, "echo bye")
    await _wait_exited(bash, pid)
    read = await bash(action="read", process_id=pid)
    assert read.structured_content["exited"] and "bye" in read.text
    with pytest.raises(ToolError, match="has ended"):
        await bash(action="write", process_id=pid, input="x")
    stopped = await bash(action="stop", process_id=pid)
    assert "already ended" in stopped.text


async def test_stop_refuses_a_reused_pid(bash: Caller, archive: Archive) -> None:
    pid = await _start(bash, "sleep 1000")
    stranger = subprocess.Popen(["sleep", "1000"])
    try:
        conn = sqlite3.connect(archive.db_path)
        with conn:
            row = conn.execute("SELECT pid FROM bash_processes WHERE process_id = ?", (pid,)).fetchone()
            real_pid = row[0]
            # The record now names another live process with a different start time.
            conn.execute(
                "UPDATE bash_processes SET pid = ?, pid_started = pid_started - 1000 WHERE process_id = ?",
                (stranger.pid, pid),
            )
        conn.close()
        with pytest.raises(ToolError, match="belongs to another process"):
            await bash(action="stop", process_id=pid)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
        os.kill(real_pid, 9)


async def test_cap_on_live_background_processes(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    manager = ProcessManager(archive, handoff_seconds=None, max_background_per_session=2)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    first = await _start(bash, "sleep 1000")
    await _start(bash, "sleep 1000")
    with pytest.raises(ToolError, match="cap"):
        await bash(command="sleep 1000", run_in_background=True)
    other = await _start(bash.as_session("s2"), "sleep 1000")  # per session
    await bash(action="stop", process_id=first)
    await _start(bash, "true")  # room again
    await manager.close_session("s1")
    await manager.close_session("s2")
    assert all(p["state"] != "running" for p in manager.list_processes(None)), other
    await manager.aclose()


async def test_close_session_stops_session_lifecycle_only(bash: Caller, manager: ProcessManager) -> None:
    session_pid = await _start(bash, "sleep 1000")
    managed_pid = await _start(bash, "sleep 1000", lifecycle="managed")
    await manager.close_session("s1")
    states = {p["process_id"]: p["state"] for p in manager.list_processes("s1")}
    assert states == {session_pid: "stopped", managed_pid: "running"}
    await bash(action="stop", process_id=managed_pid)


async def test_background_outlives_manager_and_new_manager_controls_it(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    first = ProcessManager(archive, handoff_seconds=None)
    pid = await _start(Caller(first, ToolContext("s1", workspace, policy, archive)), "read x; echo got $x")
    await first.aclose()
    second = ProcessManager(archive, handoff_seconds=None)
    bash = Caller(second, ToolContext("s1", workspace, policy, archive))
    assert [p["state"] for p in second.list_processes("s1")] == ["running"]
    await bash(action="write", process_id=pid, input="later\n")
    await _read_until(bash, pid, "got later")
    await _wait_exited(bash, pid)
    assert second.owner_of(pid) == "s1"
    await second.aclose()


async def test_background_child_is_confined(bash: Caller, tmp_path: Path) -> None:
    outside = tmp_path / "bg-outside.txt"
    pid = await _start(bash, f"echo x > {outside}; echo rc=$?")
    output = await _read_until(bash, pid, "rc=")
    assert "rc=1" in output
    assert not outside.exists()


async def test_handoff_promotes_the_same_process(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    manager = ProcessManager(archive, handoff_seconds=0.5)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    marker = workspace / "go"
    result = await bash(
        command=f"echo first; while [ ! -e {marker} ]; do sleep 0.02; done; echo second; exit 5"
    )
    data = result.structured_content
    assert data["timed_out"] is False
    assert data["exit_code"] == -1
    pid = data["promoted_process_id"]
    assert pid in result.text and "first" in result.text
    marker.touch()
    output = await _read_until(bash, pid, "second")
    assert "first" in output  # the same log, from the start
    exited = await _wait_exited(bash, pid)
    assert exited["exit_code"] == 5
    with pytest.raises(ToolError, match="stdin closed"):
        # Exited by now, but a promoted run never takes input: either message is a clear refusal.
        await bash(action="write", process_id=pid, input="x")
    # The reads showed its exit: that was the completion's delivery, not to be repeated.
    assert manager.pending_notifications("s1") == []
    await manager.aclose()


async def test_handoff_respects_shorter_timeout_and_stop(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    manager = ProcessManager(archive, handoff_seconds=30)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    token = f"promoted{os.getpid()}"
    result = await bash(command=f"exec -a {token} sleep 1000", timeout_seconds=1)
    pid = result.structured_content["promoted_process_id"]
    assert survivors(token)
    stopped = await bash(action="stop", process_id=pid)
    assert stopped.structured_content["state"] == "stopped"
    assert survivors(token) == []
    await manager.aclose()


async def test_aclose_leaves_promoted_and_background_running(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    manager = ProcessManager(archive, handoff_seconds=0.2)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    token = f"shutdown{os.getpid()}"
    promoted = (await bash(command=f"exec -a {token}p sleep 1000")).structured_content["promoted_process_id"]
    background = await _start(bash, f"exec -a {token}b sleep 1000")
    await manager.aclose()
    # Both have supervisors of their own: the next manager finds them running and stops them.
    assert survivors(f"{token}p") != []
    assert survivors(f"{token}b") != []
    later = ProcessManager(archive, handoff_seconds=None)
    states = {p["process_id"]: p["state"] for p in later.list_processes("s1")}
    assert states[promoted] == "running"
    assert states[background] == "running"
    stopped = await later.stop("s1", promoted)
    assert stopped["state"] == "stopped"
    await later.stop("s1", background)
    assert survivors(f"{token}p") == []
    assert survivors(f"{token}b") == []
    await later.aclose()


async def test_a_managers_end_closes_its_database_connections(archive: Archive) -> None:
    # Each manager opens two connections (its own, and the one that asks whether sessions are
    # quiet); twenty opened and closed in turn leave no descriptor behind (one each leaked 23).
    before = psutil.Process().num_fds()
    for _ in range(20):
        manager = ProcessManager(archive, handoff_seconds=None)
        assert manager.pending_notifications("s1") == []
        await manager.aclose()
    assert psutil.Process().num_fds() - before < 5


@pytest.mark.parametrize("count", [10, pytest.param(100, marks=pytest.mark.slow)])
async def test_many_background_processes_list_read_stop(
    bash: Caller, archive: Archive, workspace: Path, count: int
) -> None:
    manager = ProcessManager(archive, handoff_seconds=None, max_background_per_session=count)
    caller = Caller(manager, ToolContext("many", workspace, bash.ctx.policy, archive))
    ids = [await _start(caller, f"echo n{i}; sleep 1000") for i in range(count)]
    listed = manager.list_processes("many")
    assert sorted(p["process_id"] for p in listed) == sorted(ids)
    for i, pid in enumerate(ids):
        assert f"n{i}" in await _read_until(caller, pid, f"n{i}")
    for pid in ids:
        await caller(action="stop", process_id=pid)
    assert all(p["state"] == "stopped" for p in manager.list_processes("many"))
    assert psutil.Process().num_fds() < 200
    await manager.aclose()


async def test_supervisor_killed_exit_code_unknown(
    bash: Caller, manager: ProcessManager, archive: Archive
) -> None:
    token = f"supkilled{os.getpid()}"
    pid = await _start(bash, f"trap '' HUP; exec -a {token} sleep 1000")
    conn = sqlite3.connect(archive.db_path)
    (supervisor,) = conn.execute(
        "SELECT supervisor_pid FROM bash_processes WHERE process_id = ?", (pid,)
    ).fetchone()
    conn.close()
    waiting: list[Any] = []

    async def reader() -> None:
        waiting.append(await bash(action="read", process_id=pid, wait_ms=300_000))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)  # a read waiting for output that will never come
            os.kill(supervisor, 9)
    assert waiting[0].structured_content["exited"]  # it noticed, long before its wait_ms
    rows = {p["process_id"]: p for p in manager.list_processes("s1")}
    assert (rows[pid]["state"], rows[pid]["exit_code"]) == ("lost", None)
    assert survivors(token) == []
    # The waiting read showed the end: its completion counts as delivered.
    assert manager.pending_notifications("s1") == []
    read = await bash(action="read", process_id=pid)
    assert read.structured_content["exited"] and "exit code unknown" in read.text


async def test_write_ctrl_c_interrupts_through_the_pty(bash: Caller) -> None:
    pid = await _start(bash, "trap 'echo interrupted; exit 9' INT; echo ready; while :; do sleep 0.05; done")
    await _read_until(bash, pid, "ready")
    await bash(action="write", process_id=pid, input="\x03")
    assert "interrupted" in await _read_until(bash, pid, "interrupted")
    assert (await _wait_exited(bash, pid))["exit_code"] == 9


async def test_aclose_stops_a_running_foreground_command(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    manager = ProcessManager(archive, handoff_seconds=None)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    token = f"fgshutdown{os.getpid()}"
    started = workspace / "started"
    results: list[Any] = []

    async def run() -> None:
        results.append(await bash(command=f"touch {started}; exec -a {token} sleep 1000"))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            while not started.exists():
                await anyio.sleep(0.01)
            await manager.aclose()
    assert results[0].is_error and "stopped" in results[0].text
    assert survivors(token) == []


async def test_promoted_offsets_follow_the_stored_log(
    workspace: Path, policy: SandboxPolicy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-" + "z" * 24
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    archive_state = State(tmp_path / "state2")  # its redactor knows the secret
    archive = archive_state.archive
    manager = ProcessManager(archive, handoff_seconds=0.3)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    go = workspace / "go"
    command = (
        f'echo "key=$MY_SERVICE_TOKEN"; printf partial; while [ ! -e {go} ]; do sleep 0.02; done; '
        'echo " rest"; echo done'
    )
    result = await bash(command=command)
    data = result.structured_content
    pid = data["promoted_process_id"]
    assert secret not in result.text
    go.touch()
    output = ""
    offset = data["next_offset"]
    with anyio.fail_after(30):
        while True:
            page = (
                await bash(action="read", process_id=pid, offset_bytes=offset, wait_ms=2000)
            ).structured_content
            output += page["output"]
            offset = page["next_offset"]
            if page["exited"] and page["eof"]:
                break
    assert page["state"] == "exited" and page["exit_code"] == 0, page
    # Nothing lost or repeated at the hand-off point: the result showed "partial", the log
    # goes on from the byte after it.
    assert "partial" in result.text
    assert output.startswith(" rest")
    assert secret not in output
    await manager.aclose()
    archive_state.close()


async def test_a_quiet_session_hears_of_a_process_another_host_started(
    archive: Archive, workspace: Path, policy: SandboxPolicy, manager: ProcessManager
) -> None:
    # Nothing live or pending: later asks are answered without reading the tables, until
    # another connection commits (here another host's manager and its supervisor).
    assert manager.pending_notifications("s1") == []
    assert manager.pending_notifications("s1") == []
    other = ProcessManager(archive, handoff_seconds=None)
    try:
        pid = await _start(Caller(other, ToolContext("s1", workspace, policy, archive)), "exit 3")
        pending = await _wait_pending(manager, "s1")
        assert [(n.process_id, n.exit_code) for n in pending] == [(pid, 3)]
    finally:
        await other.aclose()


async def test_quiet_sessions_asked_in_turn_are_answered_without_reading_the_tables(
    archive: Archive, manager: ProcessManager
) -> None:
    # A front's sessions interleave: each found quiet once stays known quiet while the bash
    # tables are unchanged, whatever others asked in between.
    sessions = [f"s{i}" for i in range(8)]
    for session in sessions:
        assert manager.pending_notifications(session) == []
    statements: list[str] = []
    manager._conn.set_trace_callback(statements.append)
    try:
        for session in sessions * 2:
            assert manager.pending_notifications(session) == []
        assert statements == []
        # Another connection's write (a supervisor's) to the tables: every session is looked at
        # again, and the one it was for hears of it.
        with sqlite3.connect(archive.db_path) as other:
            other.execute(
                "INSERT INTO notifications (session_id, process_id, kind, seq, command, text, created_at)"
                " VALUES ('s5', 'p_x', 'completion', 0, 'exit 0', 'from elsewhere', 0)"
            )
        other.close()
        assert [n.text for s in sessions for n in manager.pending_notifications(s)] == ["from elsewhere"]
        assert statements != []
    finally:
        manager._conn.set_trace_callback(None)


def test_quiet_sessions_remembered_are_bounded(archive: Archive) -> None:
    quiet = QuietSessions(archive.db_path)
    try:
        changes = quiet.changes()
        for i in range(10_001):
            quiet.found_quiet(f"s{i}", changes)
        assert quiet.is_quiet("s10000", changes)
        assert not quiet.is_quiet("s0", changes)  # forgotten, to be looked at again
    finally:
        quiet.close()


async def test_a_write_to_other_tables_keeps_the_quiet_sessions_known(
    archive: Archive, manager: ProcessManager
) -> None:
    for session in ("s1", "s2"):
        assert manager.pending_notifications(session) == []
    with sqlite3.connect(archive.db_path) as other:  # a run record: not the bash tables
        other.execute("INSERT INTO sessions (session_id, first_seen) VALUES ('s9', 0)")
    other.close()
    statements: list[str] = []
    manager._conn.set_trace_callback(statements.append)
    try:
        assert manager.pending_notifications("s1") == manager.pending_notifications("s2") == []
        assert statements == []
    finally:
        manager._conn.set_trace_callback(None)


async def test_a_quiet_session_hears_of_a_note_written_on_the_same_connection(
    bash: Caller, manager: ProcessManager
) -> None:
    pid = await _start(bash, "exit 0", completion_mode="detached")
    await _wait_exited(bash, pid)
    assert manager.pending_notifications("s1") == []
    with manager._db() as conn:  # a write on the manager's own connection is counted too
        conn.execute(
            "INSERT INTO notifications (session_id, process_id, kind, seq, command, text, created_at)"
            " VALUES ('s1', ?, 'completion', 99, 'exit 0', 'written here', 0)",
            (pid,),
        )
    assert [n.text for n in manager.pending_notifications("s1")] == ["written here"]
