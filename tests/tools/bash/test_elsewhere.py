"""Processes across machines (a real PostgreSQL): a session moves to another front while its
background process runs on where it started. The new front answers for that process with where
it runs (or that it was lost with its machine, or how it ended), and the completion reaches the
session there, once, through LISTEN/NOTIFY; the log is readable there once the process ended."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from codemode.errors import HostFault, ProcessNotFound
from codemode.sandbox import SandboxPolicy, placed_identity
from codemode.state import State
from codemode.state import session_holds as holds
from codemode.tools._model import ToolContext
from codemode.tools.bash import ProcessManager

from .conftest import Caller

pytestmark = pytest.mark.anyio

SECRET = "ghp_" + "R5t9Y3u7I1o5P9a3S7d1F5g9H3j7K1l5Z9x3"


@dataclass
class Machine:
    state: State
    manager: ProcessManager
    bash: Caller


@pytest.fixture
async def machines(
    tmp_path: Path, database_url: str, workspace: Path, policy: SandboxPolicy
) -> AsyncIterator[tuple[Machine, Machine]]:
    """Two fronts, each with its own state directory, on one shared database."""
    made: list[Machine] = []
    for name in ("a", "b"):
        state = State(tmp_path / name, database_url=database_url, holder=placed_identity())
        manager = ProcessManager(state.archive, handoff_seconds=None, sessions=state.shared)
        ctx = ToolContext("s1", workspace, policy, state.archive)
        made.append(Machine(state, manager, Caller(manager, ctx)))
    try:
        yield made[0], made[1]
    finally:
        for machine in made:
            await machine.manager.aclose()
            machine.state.close()


def _move_away(machine: Machine, session_id: str) -> None:
    """The session is now held by another front (a stranger's identity: not this process's)."""
    with machine.state.shared.connection() as conn:
        holds.hold(conn, session_id, "4242t1@0123456789ab")


async def _pending_on(machine: Machine, session_id: str, seconds: float = 20) -> list[int]:
    with anyio.fail_after(seconds):
        while not (notes := machine.manager.pending_notifications(session_id)):
            await anyio.sleep(0.05)
    return [n.id for n in notes]


async def test_a_moved_sessions_process_is_answered_for_and_its_completion_reaches_it(
    machines: tuple[Machine, Machine],
) -> None:
    a, b = machines
    a.manager.hold_session("s1")
    started = await a.bash(command=f"echo token={SECRET}; read go; echo finished", run_in_background=True)
    process_id = started.structured_content["process_id"]
    a.manager.beat()
    a.manager.publish()
    _move_away(a, "s1")

    # b does not run it: it says where it runs, for this session only.
    with pytest.raises(
        ProcessNotFound, match=r"runs on another machine \(.*\), where this session started it"
    ):
        await b.bash(action="read", process_id=process_id)
    with pytest.raises(ProcessNotFound, match="no such process"):
        await b.bash.as_session("s2")(action="read", process_id=process_id)

    # It ends on a; a no longer holds s1, so a publishes the completion and b, told by a NOTIFY
    # (it looked and found nothing before), delivers it.
    with anyio.fail_after(20):
        while not b.manager.listening:
            await anyio.sleep(0.05)
    assert b.manager.pending_notifications("s1") == []
    await _finish(a, process_id)
    with anyio.fail_after(20):
        while a.manager.publish() == 0:
            await anyio.sleep(0.05)
    # a's own queue no longer has it: what is left is the published one, for any front to deliver
    # (a sees it too once its listener is told).
    assert [n for n in a.manager.pending_notifications("s1") if n.id > 0] == []
    ids = await _pending_on(b, "s1")
    (note,) = b.manager.pending_notifications("s1")
    assert note.process_id == process_id and note.kind == "completion" and note.exit_code == 0
    assert note.id < 0 and SECRET not in note.text + str(note.data) + note.command
    assert b.manager.ack("s1", ids) == ids and b.manager.ack("s1", ids) == []  # once
    assert b.manager.pending_notifications("s1") == []
    assert a.manager.publish() == 0  # published once

    # b now answers how it ended, and reads its log.
    with pytest.raises(
        ProcessNotFound, match=r"ran on another machine .* has ended \(exited, exit code 0\)"
    ) as ended:
        await b.bash(action="read", process_id=process_id)
    log_ref = ended.value.data["log_ref"]
    page = b.state.archive.read(log_ref, session_id="s1")
    assert b"finished" in page.data and SECRET.encode() not in page.data


async def _ended_after_its_session_moved(a: Machine) -> str:
    """A process of session s1 started on ``a``, s1 moved to another front, then the process
    ended: its completion is now ``a``'s to publish. Its id."""
    a.manager.hold_session("s1")
    started = await a.bash(command="read go; echo over", run_in_background=True)
    process_id: str = started.structured_content["process_id"]
    _move_away(a, "s1")
    await _finish(a, process_id)
    return process_id


async def _finish(machine: Machine, process_id: str) -> None:
    """Let the process end (it waits for a line) and wait until its end is recorded."""
    await machine.bash(action="write", process_id=process_id, input="go\n")
    with anyio.fail_after(20):
        while True:
            row = machine.manager.process_row("s1", process_id)
            if row["state"] != "running":
                return
            await anyio.sleep(0.05)


async def test_a_process_on_a_machine_that_went_silent_is_reported_lost(
    machines: tuple[Machine, Machine],
) -> None:
    a, b = machines
    started = await a.bash(command="read go", run_in_background=True)
    process_id = started.structured_content["process_id"]
    a.manager.publish()  # a never beat: as a machine silent for a minute is
    with pytest.raises(ProcessNotFound, match=r"was lost: the machine it ran on .* has not been heard from"):
        await b.bash(action="stop", process_id=process_id)
    await a.bash(action="stop", process_id=process_id)


async def test_a_front_that_starts_after_a_completion_was_published_still_delivers_it(
    machines: tuple[Machine, Machine], tmp_path: Path, database_url: str
) -> None:
    a, _b = machines
    process_id = await _ended_after_its_session_moved(a)
    with anyio.fail_after(20):
        while a.manager.publish() == 0:
            await anyio.sleep(0.05)
    with State(tmp_path / "c", database_url=database_url, holder=placed_identity()) as state:
        late = ProcessManager(state.archive, handoff_seconds=None, sessions=state.shared)
        try:
            with anyio.fail_after(20):
                while not late.listening:
                    await anyio.sleep(0.05)
            (note,) = late.pending_notifications("s1")
            assert note.process_id == process_id and late.ack("s1", [note.id]) == [note.id]
        finally:
            await late.aclose()


async def test_a_failed_publication_leaves_the_notification_pending_where_it_was(
    machines: tuple[Machine, Machine], database_url: str
) -> None:
    a, _b = machines
    process_id = await _ended_after_its_session_moved(a)
    with a.state.shared.connection() as conn:
        conn.execute("ALTER TABLE shared_notifications RENAME TO shared_notifications_away")
    with anyio.fail_after(20):
        while not [n for n in a.manager.pending_notifications("s1") if n.id > 0]:
            await anyio.sleep(0.05)
    with pytest.raises(HostFault):
        a.manager.publish()
    (note,) = a.manager.pending_notifications("s1")
    assert note.id > 0 and note.process_id == process_id  # still this front's to deliver


def test_a_machine_is_alive_while_any_of_its_fronts_beats(tmp_path: Path, database_url: str) -> None:
    """A front that restarted leaves its processes running: they are not lost while another
    front of the same machine beats."""
    with State(tmp_path / "s", database_url=database_url) as state, state.shared.connection() as conn:
        now = time.time()
        holds.beat(conn, "200t9@0123456789ab", now)
        assert holds.place_alive(conn, "100t1@0123456789ab", now)  # its old front, gone
        assert not holds.place_alive(conn, "100t1@fedcba987654", now)
        assert not holds.place_alive(conn, "100t1@0123456789ab", now + holds.STALE_SECONDS + 1)
