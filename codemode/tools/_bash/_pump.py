"""Reading a piped command's output in one worker thread, in big chunks.

One thread per command polls (epoll) both pipes, the command's pidfd (exit) and a wake pipe
(control), reads up to 1 MiB at a time, feeds each stream's :class:`StreamCapture` and writes
the combined stream to the command's log. Measured faster than anyio byte streams (no event-loop
round trip per chunk, no intermediate buffering) and it keeps the event loop free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import subprocess
import threading
import time
from typing import Literal, Protocol

from codemode.tools._capture import StreamCapture


class LogSink(Protocol):
    """Where the combined output goes."""

    def write(self, data: bytes) -> None: ...


_CHUNK = 1 << 20
_F_SETPIPE_SZ = 1031
# After the command's shell exits, descendants it left behind may hold the pipes open; stop
# reading after this long instead of waiting for them.
DRAIN_SECONDS = 0.25

PumpStatus = Literal["finished", "deadline", "woken"]


class Pump:
    """Owns a piped command's output fds until they close.

    Args:
        proc: The command, started with ``stdout`` and ``stderr`` pipes.
        stdout: Capture for stdout.
        stderr: Capture for stderr.
        log: Where the combined output goes (the archive log); may be swapped while the
            pump is not running.
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        stdout: StreamCapture,
        stderr: StreamCapture,
        log: LogSink,
    ) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.log = log
        self.exited = False
        self.done = threading.Event()
        self._captures = {proc.stdout.fileno(): stdout, proc.stderr.fileno(): stderr}
        self._files = {proc.stdout.fileno(): proc.stdout, proc.stderr.fileno(): proc.stderr}
        self._pidfd = os.pidfd_open(proc.pid)
        self._wake_r, self._wake_w = os.pipe()
        self._poll = select.epoll()
        for fd in self._captures:
            os.set_blocking(fd, False)
            with contextlib.suppress(OSError):  # bigger reads, fewer wake-ups; best effort
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _CHUNK)
            self._poll.register(fd, select.EPOLLIN)
        self._poll.register(self._pidfd, select.EPOLLIN)
        self._poll.register(self._wake_r, select.EPOLLIN)
        self._drain_deadline: float | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._wake_lock = threading.Lock()

    def wake(self) -> None:
        """Make a running :meth:`run` return ``"woken"`` soon (thread-safe)."""
        with self._wake_lock:
            if self._closed:
                return
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def run(self, deadline: float | None) -> PumpStatus:
        """Read until the command has exited and its pipes closed, or ``deadline`` passes.

        Args:
            deadline: ``time.monotonic()`` value to return at, or None to run to the end.

        Returns:
            ``"finished"`` (all fds closed, the command exited; not reaped), ``"deadline"``,
            or ``"woken"`` (someone called :meth:`wake`).
        """
        with self._lock:
            if self.done.is_set():
                return "finished"
            while True:
                now = time.monotonic()
                limit = deadline
                if self._drain_deadline is not None and (limit is None or self._drain_deadline < limit):
                    limit = self._drain_deadline
                if limit is not None and now >= limit:
                    if self._drain_deadline is not None and now >= self._drain_deadline:
                        self._finish()
                        return "finished"
                    return "deadline"
                timeout = -1.0 if limit is None else max(limit - now, 0.0)
                try:
                    events = self._poll.poll(timeout)
                except InterruptedError:
                    continue
                for fd, _mask in events:
                    if fd == self._wake_r:
                        try:
                            os.read(self._wake_r, 4096)
                        except BlockingIOError:
                            pass
                        return "woken"
                    if fd == self._pidfd:
                        self._poll.unregister(self._pidfd)
                        self.exited = True
                        self._drain_deadline = time.monotonic() + DRAIN_SECONDS
                        continue
                    self._read(fd)
                if self.exited and not self._captures:
                    self._finish()
                    return "finished"

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
        self._captures[fd].feed(data)
        self.log.write(data)

    def _close_stream(self, fd: int) -> None:
        self._poll.unregister(fd)
        del self._captures[fd]
        self._files.pop(fd).close()

    def _finish(self) -> None:
        for fd in list(self._captures):
            self._close_stream(fd)
        self._poll.close()
        os.close(self._pidfd)
        self.done.set()

    def force_finish(self) -> None:
        """Stop reading now and release the pipes, even if something still holds them open."""
        with self._lock:
            if not self.done.is_set():
                self._finish()

    def close(self) -> None:
        """Release the wake pipe; call once, after the last :meth:`run` returned."""
        with self._wake_lock:
            if not self._closed:
                self._closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)
