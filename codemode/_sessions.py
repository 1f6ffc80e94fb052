"""What a Host keeps per session beside the state directory: the session's temp dir (its
commands' ``TMPDIR``, made at its first call), the `ToolContext` of each call, and delivery
of the session's notifications (completions, keyword reports, Monitor events)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import anyio
import anyio.to_thread

from codemode._ids import check_id
from codemode.sandbox import SandboxPolicy, make_session_tmp, remove_session_tmp, session_inbox
from codemode.state import HeldSession, SessionEnd, State, session_holds
from codemode.tools import ToolContext, WriterTurn
from codemode.tools.bash import Notification, ProcessManager

__all__ = ["HeldSessions", "Sessions"]

log = logging.getLogger("codemode.sessions")


# How long the temp dir of a session none of whose commands runs is tried again while its mount
# is in use: the process of a command that just ended (its supervisor) may still be leaving it.
_BUSY_SECONDS = 2.0


async def _remove_tmp(session_id: str, temp: Path, busy_seconds: float) -> None:
    """Remove a session's temp dir and inbox off the event loop; a failure is logged."""
    try:
        await anyio.to_thread.run_sync(remove_session_tmp, temp, busy_seconds)
    except Exception:
        log.exception("could not remove the temp dir of session %s (%s)", session_id, temp)


class Sessions:
    """One host's sessions.

    Args:
        default: The session a call that names none runs in.
        workspace: The host's workspace.
        tmp_quota_bytes: Each session temp dir's share (a tmpfs where the host can mount).
        policy: The sandbox policy in force.
        state: The open state directory (raises `UserError` when the host is not open).
        processes: The process manager, or None (not open, or no built-in tools).
        notify_in_results: Whether results carry the session's pending notifications.
        serialize_writers: Give each session a `WriterTurn` (the command policy's
            ``serialize_writers``): its calls that may change things run one at a time.
    """

    def __init__(
        self,
        default: str,
        workspace: Path,
        tmp_quota_bytes: int,
        *,
        policy: Callable[[], SandboxPolicy],
        state: Callable[[], State],
        processes: Callable[[], ProcessManager | None],
        notify_in_results: bool,
        serialize_writers: bool = True,
    ) -> None:
        self._default = default
        self._workspace = workspace
        self._tmp_quota_bytes = tmp_quota_bytes
        self._policy = policy
        self._state = state
        self._processes = processes
        self._notify_in_results = notify_in_results
        self.temp_dirs: dict[str, Path] = {}
        self._making_temp = anyio.Lock()
        self._serialize_writers = serialize_writers
        self._writers: dict[str, WriterTurn] = {}

    def check(self, session_id: str | None) -> str:
        """The session a call names (checked), or the default one.

        Raises:
            UserError: The id is empty, too long or holds control characters.
        """
        return self._default if session_id is None else check_id(session_id, "session_id")

    async def context(self, session_id: str, call_id: str | None) -> ToolContext:
        """A call's context: the session's temp dir (made now if it has none), the policy in
        force with it, the archive, the session's store, its writers' turn."""
        state = self._state()
        temp = self.temp_dirs.get(session_id)
        if temp is None:
            async with self._making_temp:  # (one at a time: two first calls make one dir)
                temp = self.temp_dirs.get(session_id)
                if temp is None:
                    # Inside the state directory, so other sessions' commands cannot read it (the
                    # sandbox keeps the whole state directory out of reach but for a session's own
                    # temp dir). A tmpfs of tmp_quota_mb where the host can mount, else a counted
                    # plain directory. Off the event loop: a mount is a millisecond or more.
                    temp = await anyio.to_thread.run_sync(
                        make_session_tmp,
                        state.archive.state_dir / "tmp",
                        self._tmp_quota_bytes,
                        self._workspace,
                    )
                    self.temp_dirs[session_id] = temp
        return ToolContext(
            session_id=session_id,
            workspace=self._workspace,
            policy=replace(self._policy(), temp_dir=temp, trash_inbox=session_inbox(temp)),
            archive=state.archive,
            call_id=call_id,
            store=state.values.for_session(session_id),
            writers=self._writers.setdefault(session_id, WriterTurn()) if self._serialize_writers else None,
        )

    async def remove_idle_temp_dirs(self) -> None:
        """At the host's close: remove each session's temp dir unless the session still has
        running background processes, which keep using it. Each in a worker thread (its
        commands wrote it: it may hold millions of names), each failure logged, never
        stopping the others."""
        for session, path in list(self.temp_dirs.items()):
            if not self._running(session):
                await _remove_tmp(session, path, _BUSY_SECONDS)

    def _running(self, session_id: str) -> bool:
        """Whether a process of the session still runs (and may use its temp dir)."""
        processes = self._processes()
        return processes is not None and any(
            p["state"] == "running" for p in processes.list_processes(session_id, watchers=True)
        )

    async def drop(self, session_id: str, file_trash: Callable[[Path], object] | None) -> None:
        """Remove the session's temp dir (its end), after ``file_trash`` (run in a worker
        thread with the temp dir) filed what its commands moved to its trash inboxes."""
        if not self._writers.get(session_id):  # (a call still in its line keeps it)
            self._writers.pop(session_id, None)
        temp = self.temp_dirs.pop(session_id, None)
        if temp is not None:
            if file_trash is not None:
                try:
                    await anyio.to_thread.run_sync(
                        file_trash, temp
                    )  # before the inbox goes with the temp dir
                except Exception:
                    log.exception("filing the trash inbox of session %s failed", session_id)
            await _remove_tmp(session_id, temp, 0.0 if self._running(session_id) else _BUSY_SECONDS)

    def exists(self, session_id: str) -> bool:
        """`Host.session_exists`: a background process of the session, or anything of it in
        the state directory."""
        processes = self._processes()
        if processes is not None and processes.list_processes(session_id, watchers=True):
            return True
        return self._state().has_session(session_id)

    def pending(self, session_id: str) -> list[Notification]:
        """The session's notifications not yet acknowledged."""
        processes = self._processes()
        return [] if processes is None else processes.pending_notifications(session_id)

    def ack(self, session_id: str, ids: list[int]) -> list[int]:
        """Mark notifications delivered; the ids this call marked."""
        processes = self._processes()
        return [] if processes is None else processes.ack(session_id, ids)

    def take_notifications(self, session_id: str, hold: frozenset[str] = frozenset()) -> list[str]:
        """The session's pending notifications, claimed for one result (when results carry them);
        those of the processes in ``hold`` stay pending (for the next result)."""
        processes = self._processes()
        if not self._notify_in_results or processes is None:
            return []
        notes = [n for n in processes.pending_notifications(session_id) if n.process_id not in hold]
        if not notes:
            return []
        claimed = set(processes.ack(session_id, [n.id for n in notes]))
        return [n.text for n in notes if n.id in claimed]

    async def follow(self, session: str, poll_seconds: float) -> AsyncIterator[Notification]:
        """`Host.notifications`: each notification as it arrives, acknowledged as it is yielded."""
        version: int | None = None
        reconciled = 0.0
        while True:
            processes = self._processes()
            if processes is not None:
                now = time.monotonic()
                changed = processes.pending_changed()
                if changed != version or now - reconciled >= 1.0:
                    version = changed
                    reconcile = now - reconciled >= 1.0
                    if reconcile:
                        reconciled = now
                    for note in processes.pending_notifications(session, reconcile=reconcile):
                        if processes.ack(session, [note.id]):
                            yield note
            await anyio.sleep(poll_seconds)


class HeldSessions:
    """`Host.held`: the sessions a front holds open (an MCP session over HTTP), how each ended,
    and the secrets that resume an ended one. All of it lives where sessions are shared: the
    state directory, or the shared database (nothing without built-in tools: no process
    manager)."""

    def __init__(self, processes: Callable[[], ProcessManager | None]) -> None:
        self._processes = processes

    def hold(self, session_id: str, *, tenant: str | None = None, client: str | None = None) -> None:
        """Make ``session_id`` end with this host: if the host dies without closing it, the next
        host on the state directory ends it, stopping its ``lifecycle: session`` processes.
        `end_of` then says how it ended. ``tenant`` and ``client`` are what every front's
        console shows of it (`open_sessions`).

        Raises:
            UserError: ``session_id`` is not a valid id.
        """
        held = self._processes()
        if held is not None:
            held.hold_session(check_id(session_id, "session_id"), tenant, client)

    def beat(self, stale_seconds: float = session_holds.STALE_SECONDS) -> list[str]:
        """A front holding sessions calls it every `codemode.state.session_holds.BEAT_SECONDS`
        (blocking): with a shared database it says this host is alive and ends the sessions of
        hosts silent for ``stale_seconds`` (`ProcessManager.beat`); the sessions it ended."""
        held = self._processes()
        return [] if held is None else held.beat(stale_seconds)

    def held_here(self) -> frozenset[str]:
        """The sessions the state says this host holds open now (blocking): after a time cut off
        from a shared database, those that another front ended or took are missing."""
        held = self._processes()
        return frozenset() if held is None else held.held_here()

    def publish(self) -> int:
        """A front holding sessions in a shared database calls it about once a second
        (blocking): it publishes its processes and the notifications of sessions it no longer
        holds, for the fronts that hold them now (`ProcessManager.publish`); how many
        notifications it published."""
        held = self._processes()
        return 0 if held is None else held.publish()

    def open_sessions(self, limit: int = 1000) -> list[HeldSession]:
        """The sessions every front on this state directory holds open now, the newest
        ``limit`` (blocking: it reads the state). Empty without built-in tools."""
        held = self._processes()
        return [] if held is None else held.held_sessions(limit)

    def end_of(self, session_id: str) -> SessionEnd | None:
        """How a held session ended (None: still held, or never held)."""
        held = self._processes()
        return None if held is None else held.session_end(session_id)

    def resume_secret(self, session_id: str, tenant: str) -> str | None:
        """A new secret with which ``tenant`` may resume this held session's store and archive
        once it ended (`resume_target`); the session's earlier secret stops working. None
        without built-in tools.

        Raises:
            UserError: ``session_id`` is not a valid id.
        """
        held = self._processes()
        return None if held is None else held.issue_resume(check_id(session_id, "session_id"), tenant)

    def resume_target(self, secret: str, tenant: str) -> tuple[str, bool] | None:
        """The session ``secret`` resumes for ``tenant`` and whether a front still holds it open
        (it resumes once ended); None when no session of this tenant has this secret."""
        held = self._processes()
        return None if held is None else held.resume_target(secret, tenant)
