"""Tracing a promoted run (``PTRACE_SEIZE``, exit stop): the exit status of a process the supervisor
did not start."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

_PTRACE_SEIZE = 0x4206
_PTRACE_CONT = 7
_PTRACE_DETACH = 17
_PTRACE_LISTEN = 0x4208
_PTRACE_GETEVENTMSG = 0x4201
_PTRACE_O_TRACEEXEC = 0x10
_PTRACE_O_TRACEEXIT = 0x40
_PTRACE_EVENT_EXEC = 4
_PTRACE_EVENT_EXIT = 6
_PTRACE_EVENT_STOP = 128
_WALL = 0x40000000


class Tracer:
    """Learns the exit status of a process this one did not start (a promoted run: the host is
    its parent) by tracing it: ``PTRACE_SEIZE`` with ``PTRACE_O_TRACEEXIT`` stops it once at
    its exit, where ``PTRACE_GETEVENTMSG`` gives the status; every other stop is passed on.

    Every ptrace request must come from the thread that seized: :meth:`start` seizes in a new
    thread and waits for the answer.
    """

    def __init__(self, pid: int) -> None:
        import ctypes

        self._ctypes = ctypes
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.ptrace.restype = ctypes.c_long
        self._libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.pid = pid
        self.status: int | None = None
        self.error: str | None = None
        self._seized = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Seize the process (raises OSError when that is not allowed), then follow it."""
        self._thread.start()
        self._seized.wait()
        if self.error is not None:
            raise OSError(self.error)

    def _ptrace(self, request: int, data: Any = None) -> int:
        return int(self._libc.ptrace(request, self.pid, None, data))

    def _run(self) -> None:
        options = self._ctypes.c_void_p(_PTRACE_O_TRACEEXIT | _PTRACE_O_TRACEEXEC)
        if self._ptrace(_PTRACE_SEIZE, options) != 0:
            self.error = (
                f"cannot trace the command to learn its exit code: {os.strerror(self._ctypes.get_errno())}"
            )
            self._seized.set()
            return
        self._seized.set()
        while True:
            try:
                _, status = os.waitpid(self.pid, _WALL)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                self.status = os.waitstatus_to_exitcode(status)
                return
            if not os.WIFSTOPPED(status):
                continue
            event = status >> 16
            if event == _PTRACE_EVENT_EXIT:
                message = self._ctypes.c_ulong()
                self._ptrace(_PTRACE_GETEVENTMSG, self._ctypes.byref(message))
                self.status = os.waitstatus_to_exitcode(message.value & 0xFFFF)
                self._ptrace(_PTRACE_DETACH)
                return
            if event == _PTRACE_EVENT_STOP:
                self._ptrace(_PTRACE_LISTEN)  # a group stop (SIGSTOP): it stays stopped
            elif event:
                self._ptrace(_PTRACE_CONT)
            else:  # a signal on its way to the process: deliver it
                self._ptrace(_PTRACE_CONT, self._ctypes.c_void_p(os.WSTOPSIG(status)))

    def exit_status(self, timeout: float) -> int | None:
        """The status (as ``waitstatus_to_exitcode``), once the process has exited."""
        self._thread.join(timeout)
        return self.status


def traced_exit(status: int | None) -> tuple[int | None, str | None]:
    """``(exit_code, signal name)`` from a ``waitstatus_to_exitcode`` value."""
    if status is None:
        return None, None
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return 128 - status, name
    return status, None
