"""Held sessions in a database several machines share: a host ends at start the sessions of the
dead holders of its own place (machine, boot and pid namespace) and leaves the others' alone,
since another place's pid names nothing here. Its own holds carry its place."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from codemode.sandbox import placed_identity, process_identity, process_place
from codemode.state import State
from codemode.state import session_holds as holds
from codemode.tools.bash import ProcessManager

pytestmark = pytest.mark.anyio


def _dead_identity() -> str:
    child = subprocess.Popen(["sleep", "60"])
    identity = process_identity(child.pid)
    child.kill()
    child.wait()
    assert identity
    return identity


async def test_a_host_ends_only_its_own_places_dead_holders_sessions(
    tmp_path: Path, database_url: str
) -> None:
    dead = _dead_identity()
    with State(tmp_path / "a", database_url=database_url) as state:
        with state.shared.connection() as conn:
            holds.hold(conn, "mine", f"{dead}@{process_place()}")
            holds.hold(
                conn, "elsewhere", f"{dead}@0123456789ab"
            )  # another machine's: its pid means nothing here
            holds.hold(conn, "alive", placed_identity())
        manager = ProcessManager(state.archive, handoff_seconds=None, sessions=state.shared)
        try:  # opening runs the start-up upkeep
            with state.shared.connection() as conn:
                ended = holds.ending(conn, "mine")
                assert ended is not None and ended.reason == "server_died"
                assert holds.ending(conn, "elsewhere") is None and holds.ending(conn, "alive") is None
                manager.hold_session("new")
                (row,) = conn.execute(
                    "SELECT holder FROM session_holds WHERE session_id = ?", ("new",)
                ).fetchall()
                assert row[0] == placed_identity()
            with state.db.connection() as local:  # the state directory's own database holds none
                assert local.execute("SELECT COUNT(*) FROM session_holds").fetchone() == (0,)
        finally:
            await manager.aclose()


async def test_the_sessions_of_a_host_that_stopped_beating_end_from_another_machine(
    tmp_path: Path, database_url: str
) -> None:
    """A machine that died cannot be asked about its pids: its fronts stop beating, and any
    other host's beat ends their sessions a minute later; a host still beating, or one that
    never beat (an older version), keeps its sessions."""
    with State(tmp_path / "a", database_url=database_url) as state:
        now = time.time()
        with state.shared.connection() as conn:
            holds.hold(conn, "lost", "100t1@0123456789ab")
            holds.hold(conn, "lost-too", "100t1@0123456789ab")
            holds.hold(conn, "beating", "200t1@0123456789ab")
            holds.hold(conn, "silent-old-version", "300t1@0123456789ab")
            holds.beat(conn, "100t1@0123456789ab", now - holds.STALE_SECONDS - 1)
            holds.beat(conn, "200t1@0123456789ab", now - holds.STALE_SECONDS + 20)
        manager = ProcessManager(state.archive, handoff_seconds=None, sessions=state.shared)
        try:
            assert sorted(manager.beat()) == ["lost", "lost-too"]
            assert manager.beat() == []  # once
            with state.shared.connection() as conn:
                ended = holds.ending(conn, "lost")
                assert ended is not None and ended.reason == "server_died"
                assert (
                    holds.ending(conn, "beating") is None and holds.ending(conn, "silent-old-version") is None
                )
                beats = dict(conn.execute("SELECT holder, seen_at FROM front_beats").fetchall())
                assert set(beats) == {"200t1@0123456789ab", placed_identity()}  # its own beat is recorded
        finally:
            await manager.aclose()
