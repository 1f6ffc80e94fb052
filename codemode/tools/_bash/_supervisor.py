"""The supervisor of one background process: owns its PTY, writes its log, records its exit.

Started by the host as ``python -I -S <this file> SITE_DIRS...`` (or ``python -m
codemode.tools._bash._supervisor``) in a new session, with the JSON spec on stdin. It forks
once so the host can reap the first process at once; the second lives on without the host
(init adopts it). It imports only the standard library, psutil and ptyprocess — not the
``codemode`` package — so a hundred of them stay cheap; the record SQL comes from the sibling
``_records.py`` loaded by path.

Steps: spawn ``bash -c COMMAND`` in a PTY (confined by the Landlock ruleset fd the host built
and passed in: ``prctl(NO_NEW_PRIVS)`` and ``landlock_restrict_self`` in the child only),
record pid and start time, answer the host with one JSON line on stdout, then copy PTY output
to the log file and the input FIFO to the PTY until the command exits; finally record the exit
code and queue the completion in one transaction.
"""

from __future__ import annotations

import ctypes
import errno
import importlib.util
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

# Started with ``python -I -S`` (no site processing: quicker, smaller); the host passes the
# directories holding psutil and ptyprocess as arguments.
sys.path.extend(arg for arg in sys.argv[1:] if arg not in sys.path)

import psutil
import ptyprocess

_READ = 1 << 16
# After bash exits, descendants may hold the PTY open; stop copying after this long.
_DRAIN_SECONDS = 0.25
_SYS_LANDLOCK_RESTRICT_SELF = 446
_PR_SET_NO_NEW_PRIVS = 38


def _load_records() -> ModuleType:
    path = Path(__file__).with_name("_records.py")
    spec = importlib.util.spec_from_file_location("_codemode_bash_records", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _child_setup(ruleset_fd: int | None, failed_marker: str, failed_exit: int) -> Callable[[], None]:
    """The child side, everything bound before fork: default signal dispositions, then confinement."""
    restore = (signal.SIGPIPE, signal.SIGHUP, signal.SIGINT, signal.SIGXFSZ)
    set_signal, default = signal.signal, signal.SIG_DFL
    if ruleset_fd is None:

        def unconfined() -> None:
            for sig in restore:
                set_signal(sig, default)

        return unconfined
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.restype = ctypes.c_int
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    args = (ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_long(ruleset_fd), ctypes.c_uint32(0))
    get_errno, write, exit_, close = ctypes.get_errno, os.write, os._exit, os.close
    marker = failed_marker.encode()

    def fail(what: bytes) -> None:
        write(2, marker + b" " + what + b" failed with errno " + str(get_errno()).encode() + b"; not run.\n")
        exit_(failed_exit)

    def confined() -> None:
        for sig in restore:
            set_signal(sig, default)
        if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            fail(b"prctl(PR_SET_NO_NEW_PRIVS)")
        if syscall(*args) != 0:
            fail(b"landlock_restrict_self")
        close(ruleset_fd)

    return confined


def _answer(message: dict[str, Any]) -> None:
    """Send the host its one-line answer and let go of stdout."""
    try:
        os.write(1, (json.dumps(message) + "\n").encode())
    except OSError:
        pass
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.close(devnull)


def _exit_status(child: Any) -> tuple[int | None, str | None]:
    try:
        child.wait()
    except ptyprocess.PtyProcessError:
        pass
    if child.signalstatus is not None:
        try:
            name = signal.Signals(child.signalstatus).name
        except ValueError:
            name = f"signal {child.signalstatus}"
        return 128 + int(child.signalstatus), name
    if child.exitstatus is not None:
        return int(child.exitstatus), None
    return None, None


class _Copier:
    """Copies PTY output to the log and FIFO input to the PTY until the command is done."""

    def __init__(self, child: Any, log_fd: int, fifo_fd: int | None) -> None:
        self.child = child
        self.pty = child.fd
        self.log_fd = log_fd
        self.fifo_fd = fifo_fd
        self.pending = b""
        os.set_blocking(self.pty, False)
        self.pidfd = os.pidfd_open(child.pid)

    def run(self) -> None:
        poll = select.poll()
        poll.register(self.pty, select.POLLIN)
        poll.register(self.pidfd, select.POLLIN)
        if self.fifo_fd is not None:
            poll.register(self.fifo_fd, select.POLLIN)
        drain_until: float | None = None
        pty_open = True
        while pty_open:
            timeout = None if drain_until is None else max(0, int((drain_until - time.monotonic()) * 1000))
            if drain_until is not None and timeout == 0:
                break
            try:
                events = poll.poll(timeout)
            except InterruptedError:
                continue
            for fd, mask in events:
                if fd == self.pidfd:
                    poll.unregister(self.pidfd)
                    drain_until = time.monotonic() + _DRAIN_SECONDS
                elif fd == self.pty:
                    if mask & select.POLLOUT and self.pending:
                        self._flush_input()
                        if not self.pending:
                            poll.modify(self.pty, select.POLLIN)
                    if mask & (select.POLLIN | select.POLLHUP | select.POLLERR):
                        pty_open = self._copy_output()
                        if not pty_open:
                            break
                elif fd == self.fifo_fd:
                    self._take_input()
                    if self.pending:
                        self._flush_input()
                        poll.modify(self.pty, select.POLLIN | (select.POLLOUT if self.pending else 0))

    def _copy_output(self) -> bool:
        try:
            data = os.read(self.pty, _READ)
        except BlockingIOError:
            return True
        except OSError as exc:  # EIO: every holder of the PTY's other side is gone
            if exc.errno == errno.EIO:
                return False
            raise
        if not data:
            return False
        view = memoryview(data)
        while view:
            view = view[os.write(self.log_fd, view) :]
        return True

    def _take_input(self) -> None:
        assert self.fifo_fd is not None
        try:
            data = os.read(self.fifo_fd, _READ)
        except BlockingIOError:
            return
        self.pending += data

    def _flush_input(self) -> None:
        try:
            written = os.write(self.pty, self.pending)
        except BlockingIOError:
            return
        except OSError:
            self.pending = b""
            return
        self.pending = self.pending[written:]


def supervise(spec: dict[str, Any]) -> int:
    """Run one background process to its end (in the forked supervisor)."""
    records = _load_records()
    conn = records.connect(spec["db_path"])
    process_id = spec["process_id"]
    me = psutil.Process()
    records.update(conn, process_id, supervisor_pid=me.pid, supervisor_started=float(me.create_time()))
    ruleset_fd = spec.get("ruleset_fd")
    fifo_path = spec["input_path"]
    try:
        os.mkfifo(fifo_path, 0o600)
        # Read-write, so the FIFO never reports end-of-file between two writers.
        fifo_fd: int | None = os.open(fifo_path, os.O_RDWR | os.O_NONBLOCK)
        log_fd = os.open(spec["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        child = ptyprocess.PtyProcess.spawn(
            ["/bin/bash", "-c", spec["command"]],
            cwd=spec["cwd"],
            env=spec["env"],
            echo=False,
            preexec_fn=_child_setup(ruleset_fd, spec["failed_marker"], spec["failed_exit"]),
            pass_fds=(ruleset_fd,) if ruleset_fd is not None else (),
            dimensions=(50, 200),
        )
    except Exception as exc:
        message = f"could not start the command: {exc}"
        records.update(conn, process_id, state="failed", error=message, ended_at=time.time())
        _answer({"ok": False, "error": message})
        return 1
    if ruleset_fd is not None:
        os.close(ruleset_fd)
    started = float(psutil.Process(child.pid).create_time())
    records.update(conn, process_id, state="running", pid=child.pid, pid_started=started)
    _answer({"ok": True, "pid": child.pid, "pid_started": started})

    try:
        _Copier(child, log_fd, fifo_fd).run()
    finally:
        os.close(log_fd)
        if fifo_fd is not None:
            os.close(fifo_fd)
    exit_code, exit_signal = _exit_status(child)
    # The FIFO's absence tells readers the command has ended: remove it only now.
    try:
        os.unlink(fifo_path)
    except OSError:
        pass
    child.delayafterclose = child.delayafterterminate = 0  # it has exited: no need to wait
    try:
        child.close(force=True)
    except Exception:  # the PTY is gone either way
        pass
    records.record_end(conn, process_id, exit_code=exit_code, exit_signal=exit_signal)
    conn.close()
    return 0


def main() -> int:
    """Entry point: read the spec, fork, supervise in the child."""
    spec = json.loads(sys.stdin.buffer.read())
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    if os.fork() != 0:
        os._exit(0)  # the host reaps this one at once; the child is adopted by init
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        return supervise(spec)
    except Exception as exc:  # nothing else can report it: record it
        try:
            records = _load_records()
            conn = records.connect(spec["db_path"])
            records.record_end(
                conn, spec["process_id"], exit_code=None, exit_signal=None, state="lost", error=str(exc)
            )
        finally:
            _answer({"ok": False, "error": f"supervisor failed: {exc}"})
        return 1


if __name__ == "__main__":
    sys.exit(main())
