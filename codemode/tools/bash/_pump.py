"""Reading a piped command's output in big chunks, on the event loop or in a worker thread.

One epoll set per command holds both pipes, the command's pidfd (exit) and a wake eventfd
(control). :meth:`Pump.step` handles what is ready without blocking, so a quick command is read
on the event loop (the epoll fd is itself pollable): no thread hop. :meth:`Pump.run` blocks and
is used in a worker thread once output turns large, so the loop stays free. Reads take up to
1 MiB at a time, feed each stream's :class:`StreamCapture` and write the combined stream to the
command's log; measured faster than anyio byte streams (no intermediate buffering).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import threading
import time
from typing import Literal, Protocol

from codemode.sandbox import Process
from codemode.tools._capture import StreamCapture
from codemode.tools.bash.supervisor import read_left


class LogSink(Protocol):
    """Where the combined output goes."""

    def write(self, data: bytes) -> None: ...


_CHUNK = 1 << 20
_F_SETPIPE_SZ = 1031
_PIPE_DEFAULT = 65536
# After the command's shell exits, descendants it left behind may hold the pipes open; stop
# reading after this long instead of waiting for them.
DRAIN_SECONDS = 0.25

PumpStatus = Literal["finished", "deadline", "woken"]


class Pump:
    """Owns a piped command's output fds until they close.

    Args:
        proc: The command.
        pipes: The read ends of its stdout and stderr pipes (the pump owns and closes them).
        stdout: Capture for stdout.
        stderr: Capture for stderr.
        log: Where the combined output goes (the archive log); may be swapped while the
            pump is not running.
    """

    def __init__(
        self,
        proc: Process,
        pipes: tuple[int, int],
        stdout: StreamCapture,
        stderr: StreamCapture,
        log: LogSink,
    ) -> None:
        self.proc = proc
        self.log = log
        self.exited = False
        self.bytes_read = 0
        self._finished = False  # set once, under the lock; read from any thread
        out, err = pipes
        self._captures = {out: stdout, err: stderr}
        self._pidfd = os.pidfd_open(proc.pid)
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._wake_requested = False
        self._poll = select.epoll()
        for fd in self._captures:
            fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK)  # a pipe's read end has no other flags
            self._poll.register(fd, select.EPOLLIN)
        self._poll.register(self._pidfd, select.EPOLLIN)
        self._poll.register(self._wake, select.EPOLLIN)
        self._grown: set[int] = set()
        self._drain_deadline: float | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._wake_lock = threading.Lock()

    @property
    def finished(self) -> bool:
        """Whether the command has exited and its pipes are closed (thread-safe to read)."""
        return self._finished

    def wake(self) -> None:
        """Make a running :meth:`run` return ``"woken"`` soon (thread-safe)."""
        with self._wake_lock:
            if self._closed:
                return
            self._wake_requested = True
            with contextlib.suppress(OSError):
                os.eventfd_write(self._wake, 1)

    def tick(self) -> None:
        """Make :meth:`fileno` readable without waking, so a waiter calls :meth:`step`
        (which then sees whether its deadline has come); thread-safe."""
        with self._wake_lock:
            if not self._closed:
                with contextlib.suppress(OSError):
                    os.eventfd_write(self._wake, 1)

    def fileno(self) -> int:
        """An fd that is readable whenever :meth:`step` has something to do (the epoll fd)."""
        return self._poll.fileno()

    def wake_time(self, deadline: float | None) -> float | None:
        """When :meth:`step` must be called again even without events."""
        if self._drain_deadline is not None and (deadline is None or self._drain_deadline < deadline):
            return self._drain_deadline
        return deadline

    def run(self, deadline: float | None) -> PumpStatus:
        """Read until the command has exited and its pipes closed, or ``deadline`` passes.

        Args:
            deadline: ``time.monotonic()`` value to return at, or None to run to the end.

        Returns:
            ``"finished"`` (all fds closed, the command exited; not reaped), ``"deadline"``,
            or ``"woken"`` (someone called :meth:`wake`).
        """
        with self._lock:
            while True:
                status = self._cycle(deadline, block=True)
                if status is not None:
                    return status

    def step(self, deadline: float | None) -> PumpStatus | None:
        """Handle what is ready now without blocking (for an event loop).

        Returns:
            As :meth:`run`, or None when there is nothing more to do for now.
        """
        with self._lock:
            return self._cycle(deadline, block=False)

    def _cycle(self, deadline: float | None, *, block: bool) -> PumpStatus | None:
        if self._finished:
            return "finished"
        now = time.monotonic()
        limit = self.wake_time(deadline)
        if limit is not None and now >= limit:
            if self._drain_deadline is not None and now >= self._drain_deadline:
                self._finish()
                return "finished"
            return "deadline"
        timeout = 0.0 if not block else -1.0 if limit is None else max(limit - now, 0.0)
        try:
            events = self._poll.poll(timeout)
        except InterruptedError:
            return None
        for fd, _mask in events:
            if fd == self._wake:
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(self._wake)
                if self._wake_requested:
                    self._wake_requested = False
                    return "woken"
                continue  # a tick: the caller re-checks the time
            if fd == self._pidfd:
                self._poll.unregister(self._pidfd)
                self.exited = True
                self._drain_deadline = time.monotonic() + DRAIN_SECONDS
                continue
            if fd in self._captures:  # (else a stale event of a stream closed in this same poll)
                self._read(fd)
        if self.exited and not self._captures:
            self._finish()
            return "finished"
        return None

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_stream(fd)
            return
        if len(data) >= _PIPE_DEFAULT and fd not in self._grown:
            # A full pipe: a lot of output is coming. Bigger pipe, bigger reads, fewer wake-ups.
            self._grown.add(fd)
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _CHUNK)
        self._take(fd, data)

    def _take(self, fd: int, data: bytes) -> None:
        self.bytes_read += len(data)
        self._captures[fd].feed(data)
        self.log.write(data)

    def _close_stream(self, fd: int) -> None:
        # Out of the epoll set first: closing the fd is not enough while another copy of the
        # pipe is open (a child another command forked meanwhile holds it until it execs), and
        # epoll would go on reporting this number, which may by then name another file.
        with contextlib.suppress(OSError):
            self._poll.unregister(fd)
        del self._captures[fd]
        os.close(fd)

    def _finish(self) -> None:
        for fd in list(self._captures):
            # The drain's time is over, yet what the command wrote before it exited may still
            # be unread (the loop was busy, or there was more than one read's worth).
            for data in read_left(fd):
                self._take(fd, data)
            self._close_stream(fd)
        self._poll.close()
        os.close(self._pidfd)
        self._finished = True

    def pipes(self) -> tuple[int, ...]:
        """The output fds still open (to pass to another process at a hand-off)."""
        return tuple(self._captures)

    def hand_off(self) -> None:
        """Let go of everything without reading again: another process now reads the pipes."""
        with self._lock:
            if not self._finished:
                for fd in list(self._captures):
                    self._close_stream(fd)
                self._poll.close()
                os.close(self._pidfd)
                self._finished = True

    def force_finish(self) -> None:
        """Stop reading now and release the pipes, even if something still holds them open."""
        with self._lock:
            if not self._finished:
                self._finish()

    def close(self) -> None:
        """Release the wake eventfd; call once, after the last :meth:`run` returned."""
        with self._wake_lock:
            if not self._closed:
                self._closed = True
                os.close(self._wake)
