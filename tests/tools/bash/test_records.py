"""Start-up upkeep of process records: expiry, compaction, pins, offsets before the retained log."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from codemode.sandbox import SandboxPolicy
from codemode.state import Archive, State
from codemode.tools._model import ToolContext
from codemode.tools.bash import ProcessManager

from .conftest import Caller

pytestmark = pytest.mark.anyio

_DAY = 24 * 3600


async def _finished(bash: Caller, command: str, **extra: object) -> str:
    result = await bash(command=command, run_in_background=True, **extra)
    pid: str = result.structured_content["process_id"]
    # Not read: a read that shows the exit would count as the completion's delivery.
    with anyio.fail_after(20):
        while any(
            p["state"] == "running"
            for p in bash.manager.list_processes(bash.ctx.session_id)
            if p["process_id"] == pid
        ):
            await anyio.sleep(0.01)
    return pid


def _age(db: Path, pid: str, days: float) -> None:
    conn = sqlite3.connect(db)
    with conn:
        then = time.time() - days * _DAY
        conn.execute(
            "UPDATE bash_processes SET started_at = ?, ended_at = ? WHERE process_id = ?", (then, then, pid)
        )
        conn.execute(
            "UPDATE archive_entries SET created = ? WHERE ref = "
            "(SELECT log_ref FROM bash_processes WHERE process_id = ?)",
            (then, pid),
        )
    conn.close()


async def test_old_records_expire_unless_a_completion_is_undelivered(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    manager = ProcessManager(archive, handoff_seconds=None)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    delivered = await _finished(bash, "echo old")
    undelivered = await _finished(bash, "echo kept")
    recent = await _finished(bash, "echo new")
    manager.ack("s1", [n.id for n in manager.pending_notifications("s1") if n.process_id != undelivered])
    await manager.aclose()
    _age(archive.db_path, delivered, 31)
    _age(archive.db_path, undelivered, 31)

    restarted = ProcessManager(archive, handoff_seconds=None)
    ids = {p["process_id"] for p in restarted.list_processes("s1")}
    assert ids == {undelivered, recent}
    assert delivered not in ids
    assert [n.process_id for n in restarted.pending_notifications("s1")] == [undelivered]
    page = await restarted.read("s1", undelivered, 0, None, None)
    assert "kept" in page["output"]  # its log was pinned, not expired
    assert restarted.pending_notifications("s1") == []  # the read showed its exit
    await restarted.aclose()


async def test_finished_log_compacted_and_offset_note(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    manager = ProcessManager(archive, handoff_seconds=None)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    pid = await _finished(
        bash, "head -c 10000000 /dev/zero | tr '\\0' y; echo; echo END", completion_mode="detached"
    )
    await manager.aclose()

    restarted = ProcessManager(archive, handoff_seconds=None)
    archive.maintain()  # the archive's upkeep after the manager's (the host's order)
    data = await restarted.read("s1", pid, 0, 64, None)
    assert "note" in data and "compacted" in data["note"]
    assert data["offset"] > 0
    log_bytes = restarted.list_processes("s1")[0]["log_bytes"]
    assert log_bytes is not None and log_bytes >= 10_000_000
    tail = await restarted.read("s1", pid, log_bytes - 8, None, None)
    assert "END" in tail["output"]
    await restarted.aclose()


async def test_a_read_in_the_dropped_middle_of_a_capped_log_says_so(
    tmp_path: Path, workspace: Path, policy: SandboxPolicy
) -> None:
    archive_state = State(tmp_path / "capped-state", log_cap_bytes=1024 * 1024)
    archive = archive_state.archive
    manager = ProcessManager(archive, handoff_seconds=None)
    bash = Caller(manager, ToolContext("s1", workspace, policy, archive))
    pid = await _finished(bash, "head -c 4000000 /dev/zero | tr '\\0' y; echo; echo END")
    data = await manager.read("s1", pid, 2_000_000, 64, None)
    assert "note" in data and "outgrew its cap" in data["note"], data
    assert data["offset"] > 2_000_000
    tail = await manager.read("s1", pid, data["total_bytes"] - 8, None, None)
    assert "END" in tail["output"]
    await manager.aclose()
    archive_state.close()
