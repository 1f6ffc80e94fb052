"""Copying a command's output to its log (and input to its PTY) until it is done; ending its tree."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import time
from typing import Any

from codemode.state import _capped
from codemode.tools.bash.supervisor._pty import READ, read_left

# After bash exits, descendants may hold the PTY open; stop copying after this long.
_DRAIN_SECONDS = 0.25
_TERM_GRACE_SECONDS = 2.0


class Hooks:
    """What a supervisor does with output and time besides copying it to the log."""

    def output(self, fd: int, data: bytes, now: float) -> None:
        """Bytes read from ``fd``."""

    def deadline(self) -> float | None:
        """When :meth:`tick` must run next (monotonic), or None."""
        return None

    def tick(self, now: float) -> None:
        """Time passed."""

    def closed(self, now: float) -> None:
        """Every output is closed and the command has exited."""


class Stopper:
    """Ends the command's tree: SIGTERM to its process group and cgroup, SIGKILL after a grace."""

    def __init__(self, pid: int, cgroup: str | None) -> None:
        self.pid = pid
        self.cgroup = cgroup
        self.why: str | None = None
        self.kill_at: float | None = None

    def stop(self, why: str, now: float) -> None:
        if self.why is not None:
            return
        self.why = why
        self._signal(signal.SIGTERM)
        self.kill_at = now + _TERM_GRACE_SECONDS

    def tick(self, now: float) -> None:
        if self.kill_at is not None and now >= self.kill_at:
            self.kill_at = None
            self._signal(signal.SIGKILL)
            if self.cgroup:
                with contextlib.suppress(OSError), open(os.path.join(self.cgroup, "cgroup.kill"), "w") as f:
                    f.write("1")

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.pid, sig)
        if self.cgroup:
            with contextlib.suppress(OSError), open(os.path.join(self.cgroup, "cgroup.procs")) as f:
                for line in f:
                    with contextlib.suppress(OSError, ValueError):
                        os.kill(int(line), sig)


class Copier:
    """Copies output to the log (and input to the PTY) until the command is done, keeping the
    hooks' timers.

    The log is the archive's capped log of the entry (:meth:`open_log`): past its cap it keeps
    the head and the tail and counts every byte, and it reports growth to the state
    directory's quota; neither ever holds the copying up.

    Args:
        pid: The command.
        outputs: fds to read (a PTY master, or pipes); the copier owns them.
        log: The log.
        fifo_fd: Input for the PTY (``outputs[0]``), or None.
        hooks: What else happens with output and time.
        stopper: Ends the command's tree when a hook says so.
    """

    @staticmethod
    def open_log(db_path: str, path: str) -> _capped.EntryLog:
        """The entry's capped log (``codemode/state/_capped.py``, standard library only).

        Raises:
            OSError: The log file cannot be opened.
            sqlite3.Error: The entry's cap cannot be read.
        """
        return _capped.EntryLog(db_path, path)

    def __init__(
        self,
        pid: int,
        outputs: list[int],
        log: Any,
        fifo_fd: int | None,
        hooks: Hooks,
        stopper: Stopper,
    ) -> None:
        self.outputs = set(outputs)
        self.pty = outputs[0] if fifo_fd is not None else None
        self.log = log
        self.fifo_fd = fifo_fd
        self.hooks = hooks
        self.stopper = stopper
        self.pending = b""
        for fd in outputs:
            os.set_blocking(fd, False)
        self.pidfd = os.pidfd_open(pid)

    def _timeout(self, drain_until: float | None) -> int | None:
        now = time.monotonic()
        limits = [t for t in (drain_until, self.hooks.deadline(), self.stopper.kill_at) if t is not None]
        if not limits:
            return None
        return max(0, int((min(limits) - now) * 1000) + 1)

    def run(self) -> None:
        """Copy until the command has exited and its outputs are closed (or drained for
        `_DRAIN_SECONDS` after the exit: descendants may hold them open)."""
        poll = select.poll()
        for fd in self.outputs:
            poll.register(fd, select.POLLIN)
        poll.register(self.pidfd, select.POLLIN)
        if self.fifo_fd is not None:
            poll.register(self.fifo_fd, select.POLLIN)
        drain_until: float | None = None
        while True:
            if drain_until is not None and (not self.outputs or time.monotonic() >= drain_until):
                break
            try:
                events = poll.poll(self._timeout(drain_until))
            except InterruptedError:
                continue
            now = time.monotonic()
            for fd, mask in events:
                if fd == self.pidfd:
                    poll.unregister(self.pidfd)
                    drain_until = now + _DRAIN_SECONDS
                elif fd in self.outputs:
                    if fd == self.pty and mask & select.POLLOUT and self.pending:
                        self._flush_input()
                        if not self.pending:
                            poll.modify(fd, select.POLLIN)
                    if mask & (select.POLLIN | select.POLLHUP | select.POLLERR) and not self._copy_output(
                        fd, now
                    ):
                        poll.unregister(fd)
                        self.outputs.discard(fd)
                        if fd != self.pty:  # the PTY master is closed by the caller
                            os.close(fd)
                elif fd == self.fifo_fd:
                    self._take_input()
                    if self.pending and self.pty is not None and self.pty in self.outputs:
                        self._flush_input()
                        poll.modify(self.pty, select.POLLIN | (select.POLLOUT if self.pending else 0))
            self.stopper.tick(now)
            deadline = self.hooks.deadline()
            if deadline is not None and now >= deadline:
                self.hooks.tick(now)
        for fd in self.outputs:
            # The drain's time is over, yet what the command wrote before it exited may still
            # be unread (this process was not scheduled in time, or it was read in pieces).
            for data in read_left(fd):
                self.log.write(data)
                self.hooks.output(fd, data, time.monotonic())
            if fd != self.pty:
                os.close(fd)
        self.outputs.clear()
        os.close(self.pidfd)
        self.hooks.closed(time.monotonic())

    def _copy_output(self, fd: int, now: float) -> bool:
        try:
            data = os.read(fd, READ)
        except BlockingIOError:
            return True
        except OSError as exc:  # EIO: every holder of the PTY's other side is gone
            if exc.errno == errno.EIO:
                return False
            raise
        if not data:
            return False
        self.log.write(data)
        self.hooks.output(fd, data, now)
        return True

    def _take_input(self) -> None:
        assert self.fifo_fd is not None
        try:
            data = os.read(self.fifo_fd, READ)
        except BlockingIOError:
            return
        self.pending += data

    def _flush_input(self) -> None:
        assert self.pty is not None
        try:
            written = os.write(self.pty, self.pending)
        except BlockingIOError:
            return
        except OSError:
            self.pending = b""
            return
        self.pending = self.pending[written:]
