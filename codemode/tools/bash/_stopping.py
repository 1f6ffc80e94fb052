"""Controlling a running process: input written to its PTY, a stop of its whole tree (identity
checked first), a change of its completion mode."""

from __future__ import annotations

import contextlib
import errno
import socket
import sqlite3
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from codemode.errors import ErrorCode, ToolError
from codemode.sandbox import cgroup_remove, process_start
from codemode.state import ProcessRecord
from codemode.state import process_records as _records
from codemode.tools.bash._answers import StoppedAnswer, UpdatedAnswer, WrittenAnswer
from codemode.tools.bash._background import PTY_VIEW
from codemode.tools.bash._foreground import (
    TERM_GRACE_SECONDS,
)
from codemode.tools.bash._proctree import terminate_tree
from codemode.tools.bash._table import _live_root
from codemode.tools.bash.supervisor import control_token

if TYPE_CHECKING:
    pass


class Stopping:
    """The :class:`ProcessManager`'s write, stop and update (a mixin: the manager holds the state)."""

    if TYPE_CHECKING:

        def _await_end(self, record: ProcessRecord) -> ProcessRecord: ...
        def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def _get(self, session_id: str, process_id: str) -> ProcessRecord: ...
        def _reconcile(self, record: ProcessRecord) -> ProcessRecord: ...
        def _supervisor_alive(self, record: ProcessRecord) -> bool: ...

    _taken_over: dict[str, str]

    def take_over(self, process_id: str, by: str) -> None:
        """A person (``by``, as shown to the model) types into this process from now on: the
        model's writes are refused (code ``taken_over``) until `hand_back`."""
        self._taken_over[process_id] = by

    def hand_back(self, process_id: str) -> None:
        """The model may write to this process again."""
        self._taken_over.pop(process_id, None)

    def taken_over(self, process_id: str) -> bool:
        """Whether a person has this process's terminal now."""
        return process_id in self._taken_over

    async def write(
        self, session_id: str, process_id: str, text: str, *, operator: bool = False
    ) -> WrittenAnswer:
        """Send ``text`` to a background process's stdin (its PTY); ``operator``: a person's
        keystrokes (the console), let in while they have the terminal taken over.

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: The process has exited or takes no input, or (not ``operator``) a
                person has taken its terminal over.
        """
        by = self._taken_over.get(process_id)
        if by is not None and not operator:
            raise ToolError(
                f"{by} has taken over the terminal of process {process_id}; its input is theirs until they "
                'hand it back. Read its output meanwhile (bash({action: "read"}))',
                {"process_id": process_id},
                code=ErrorCode.TAKEN_OVER,
            )
        record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
        return await anyio.to_thread.run_sync(self._write, record, text.encode())

    def _write(self, record: ProcessRecord, data: bytes) -> WrittenAnswer:
        pid = record.process_id
        if record.kind == "promoted":
            raise ToolError(
                f"process {pid} was started in the foreground with stdin closed, so it takes no input; "
                "start a command that reads input with run_in_background: true",
                {"process_id": pid},
                code=ErrorCode.NO_INPUT,
            )
        exited = ToolError(
            f"process {pid} has ended ({record.state}, exit code "
            f"{'unknown' if record.exit_code is None else record.exit_code}); it takes no more input",
            {"process_id": pid},
            code=ErrorCode.EXITED,
        )
        if not record.live or record.input_path is None or record.input_token is None:
            raise exited
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(10)
        try:
            try:
                sock.connect("\0" + record.input_path.removeprefix("@"))
            except OSError as exc:
                if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                    raise exited from exc
                raise ToolError(
                    f"cannot write to process {pid}: {exc.strerror}", code=ErrorCode.TOOL_FAILED
                ) from exc
            try:
                sock.sendall(record.input_token.encode() + data)
                sock.shutdown(socket.SHUT_WR)
                sock.recv(2)  # the supervisor has handed every byte on
            except TimeoutError:
                raise ToolError(
                    f"process {pid} is not reading its input; some of the {len(data)} bytes may not "
                    "have been sent",
                    code=ErrorCode.INPUT_BLOCKED,
                ) from None
            except OSError as exc:
                raise exited from exc
        finally:
            sock.close()
        return {"process_id": pid, "bytes": len(data)}

    async def resize(self, session_id: str, process_id: str, rows: int, cols: int) -> None:
        """Give a background process's PTY a window of ``rows`` x ``cols`` (1-1000 each); the
        command is told (SIGWINCH). The console's terminal, while a person has it.

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: It has ended or has no PTY, or its supervisor cannot resize (an older
                codemode started it).
        """
        if not (1 <= rows <= 1000 and 1 <= cols <= 1000):
            raise ToolError(
                f"a window of {rows} x {cols} is out of range (1-1000 each)", code=ErrorCode.OUT_OF_RANGE
            )
        record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
        await anyio.to_thread.run_sync(self._resize, record, rows, cols)

    async def restore_size(self, session_id: str, process_id: str) -> None:
        """Give a background process's PTY back the window it started with (the one ``read``
        renders for the model). Raises as `resize` does."""
        await self.resize(session_id, process_id, PTY_VIEW.lines, PTY_VIEW.columns)

    def _resize(self, record: ProcessRecord, rows: int, cols: int) -> None:
        pid = record.process_id
        if record.kind != "background" or not record.live or not record.input_path or not record.input_token:
            raise ToolError(f"process {pid} has no live terminal to resize", code=ErrorCode.EXITED)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(10)
        try:
            sock.connect("\0" + record.input_path.removeprefix("@"))
            sock.sendall(control_token(record.input_token.encode()) + f"{rows} {cols}".encode())
            sock.shutdown(socket.SHUT_WR)
            answered = sock.recv(2) == b"ok"
        except OSError as exc:
            raise ToolError(f"cannot resize process {pid}'s terminal: {exc}", code=ErrorCode.EXITED) from exc
        finally:
            sock.close()
        if not answered:
            raise ToolError(
                f"process {pid}'s supervisor did not resize its terminal (an older codemode started it)",
                code=ErrorCode.TOOL_FAILED,
            )

    async def stop(self, session_id: str, process_id: str) -> StoppedAnswer:
        """Stop a process and its whole tree (identity checked first).

        Returns:
            ``message``, ``process_id``, ``state``, ``exit_code``.

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: The recorded pid now belongs to another process (nothing is signalled).
        """
        with anyio.CancelScope(shield=True):
            record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
            result = await anyio.to_thread.run_sync(self._stop, record)
        return result

    def _stop(self, record: ProcessRecord, note: str = "") -> StoppedAnswer:
        pid = record.process_id
        if not record.live:
            # Anything it left behind that still carries its marker goes too.
            terminate_tree(record.marker, grace_seconds=TERM_GRACE_SECONDS, cgroup=record.cgroup)
            if record.cgroup:
                cgroup_remove(record.cgroup)
            return {
                "message": f"Process {pid} had already ended ({record.state}, exit code "
                f"{'unknown' if record.exit_code is None else record.exit_code}); nothing to stop.",
                "process_id": pid,
                "state": record.state,
                "exit_code": record.exit_code,
            }
        root = _live_root(record)
        if root is None and record.pid is not None and process_start(record.pid) is not None:
            with self._db() as conn:
                _records.update(conn, pid, stop_requested=1)
            raise ToolError(
                f"process {pid}: its pid {record.pid} now belongs to another process (the start time "
                "differs), so nothing was signalled; the original process has ended",
                {"process_id": pid},
                code=ErrorCode.PID_REUSED,
            )
        with self._db() as conn:
            _records.update(conn, pid, stop_requested=1)
        terminate_tree(
            record.marker, pgid=root, root_pid=root, grace_seconds=TERM_GRACE_SECONDS, cgroup=record.cgroup
        )
        fresh = self._await_end(record)
        if fresh.live and not self._supervisor_alive(fresh):
            fresh = self._reconcile(fresh)
        elif fresh.live:
            with self._db() as conn:
                _records.record_end(conn, pid, exit_code=None, exit_signal=None, state="stopped", note=note)
                fresh = _records.get(conn, pid) or fresh
        code = "unknown" if fresh.exit_code is None else fresh.exit_code
        return {
            "message": f"Stopped process {pid} and every process it started (exit code {code}).",
            "process_id": pid,
            "state": fresh.state,
            "exit_code": fresh.exit_code,
        }

    def _update(self, session_id: str, process_id: str, completion_mode: str) -> UpdatedAnswer:
        record = self._get(session_id, process_id)
        with self._db() as conn:
            _records.update(conn, process_id, completion_mode=completion_mode)
        when = "" if record.live else " (it has already ended, so this changes nothing)"
        return {
            "message": f"Process {process_id}: completion_mode is now {completion_mode}{when}.",
            "process_id": process_id,
            "completion_mode": completion_mode,
        }
