"""The supervisor of one background process: owns its PTY, writes its log, records its exit.

Started by the host as ``python -I -S <this file> SITE_DIRS...`` (or ``python -m
codemode.tools._bash._supervisor``) in a new session, with the JSON spec on stdin. It forks
once so the host can reap the first process at once; the second lives on without the host
(init adopts it). It imports only the standard library and psutil (the redactor for its
notification line adds hyperscan and re2) — not the ``codemode`` package — so a hundred of
them stay cheap; the record SQL comes from the sibling
``codemode/archive/_processes.py`` and the launch primitive from ``codemode/sandbox/_spawn.py``, loaded by path.

Steps: open a PTY and start ``bash -c COMMAND`` on it through the sandbox's exec helper (the
host prepared every layer and passed their fds: the same launch path as foreground commands),
record pid and start time, answer the host with one JSON line on stdout, then copy PTY output
to the log file and input to the PTY until the command exits; end what is left in its cgroup;
finally record the exit code and queue the completion in one transaction.

Input arrives on an abstract unix socket whose name is in the process record; a connection is
accepted only after it sends the record's secret token (the state database, which holds it,
is out of reach of confined commands, and Landlock's scoping keeps them from abstract sockets
outside their sandbox), so no other command can type into this one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hmac
import importlib.util
import json
import os
import select
import signal
import socket
import struct
import sys
import termios
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

# Started with ``python -I -S`` (no site processing: quicker, smaller); the host passes the
# directory holding psutil as an argument.
sys.path.extend(arg for arg in sys.argv[1:] if arg not in sys.path)

import psutil

_READ = 1 << 16
# After bash exits, descendants may hold the PTY open; stop copying after this long.
_DRAIN_SECONDS = 0.25
_TOKEN_BYTES = 64  # hex of 32 random bytes
_SPAWN_PATH = Path(__file__).resolve().parents[2] / "sandbox" / "_spawn.py"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _load_records() -> ModuleType:
    return _load(Path(__file__).resolve().parents[2] / "archive" / "_processes.py", "_codemode_bash_records")


def _answer(message: dict[str, Any]) -> None:
    """Send the host its one-line answer and let go of stdout."""
    try:
        os.write(1, (json.dumps(message) + "\n").encode())
    except OSError:
        pass
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.close(devnull)


class _Child:
    """The command on its PTY: what the copier needs (``pid``, the master ``fd``)."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd


def _exit_status(pid: int) -> tuple[int | None, str | None]:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None, None
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return 128 + sig, name
    return os.waitstatus_to_exitcode(status), None


def _open_pty(rows: int, cols: int) -> tuple[int, str]:
    """A new PTY: the master fd (kept here) and the terminal's path (opened by the command).

    Echo is off (input written by the model is not shown twice); the window is ``rows`` x
    ``cols``.
    """
    master, slave = os.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        path = os.ttyname(slave)
    finally:
        os.close(slave)
    os.set_inheritable(master, False)
    return master, path


def _serve_input(server: socket.socket, token: bytes, sink: int) -> None:
    """Accept input connections for the life of the process (a daemon thread).

    A connection must start with ``token``; the rest of its bytes go to ``sink`` (the pipe the
    copier forwards to the PTY), in order, one connection at a time.
    """
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            try:
                received = b""
                while len(received) < len(token):
                    chunk = conn.recv(len(token) - len(received))
                    if not chunk:
                        break
                    received += chunk
                if not hmac.compare_digest(received, token):
                    continue
                while chunk := conn.recv(_READ):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(sink, view) :]
                conn.sendall(b"ok")
            except OSError:
                continue


class _Copier:
    """Copies PTY output to the log and FIFO input to the PTY until the command is done.

    The log is the archive's capped log of the entry (:meth:`open_log`): past its cap it keeps
    the head and the tail and counts every byte, and it reports growth to the state
    directory's quota; neither ever holds the copying up.
    """

    @staticmethod
    def open_log(db_path: str, path: str) -> Any:
        """The entry's ``EntryLog`` from ``codemode/archive/_capped.py`` (standard library only,
        loaded by path like ``_records.py``).

        Raises:
            OSError: The log file cannot be opened.
            sqlite3.Error: The entry's cap cannot be read.
        """
        source = Path(__file__).resolve().parents[2] / "archive" / "_capped.py"
        module = sys.modules.get("_codemode_archive_capped")
        if module is None:
            found = importlib.util.spec_from_file_location("_codemode_archive_capped", source)
            assert found is not None and found.loader is not None
            module = importlib.util.module_from_spec(found)
            sys.modules[found.name] = module
            found.loader.exec_module(module)
        return module.EntryLog(db_path, path)

    def __init__(self, child: Any, log: Any, fifo_fd: int | None) -> None:
        self.child = child
        self.pty = child.fd
        self.log = log
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
        self.log.write(data)
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
    spawn = _load(_SPAWN_PATH, "_codemode_sandbox_spawn")
    layers = spec["layers"]
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        server.bind("\0" + spec["input_name"])
        server.listen(8)
        input_read, input_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(input_write, True)
        fifo_fd: int | None = input_read
        log = _Copier.open_log(spec["db_path"], spec["log_path"])
        master, terminal = _open_pty(*spec["pty_size"])
        proc = spawn.spawn_helper(
            program="/bin/bash",
            argv=["/bin/bash", "-c", spec["command"]],
            env=spec["env"],
            cwd=spec["cwd"],
            terminal=terminal,
            cgroup=spec.get("cgroup"),
            **layers,
        )
    except Exception as exc:
        message = f"could not start the command: {exc}"
        records.update(conn, process_id, state="failed", error=message, ended_at=time.time())
        _answer({"ok": False, "error": message})
        return 1
    for fd in layers.values():
        if fd is not None:
            os.close(fd)
    child = _Child(proc.pid, master)
    threading.Thread(
        target=_serve_input, args=(server, spec["input_token"].encode(), input_write), daemon=True
    ).start()
    started = float(psutil.Process(child.pid).create_time())
    records.update(conn, process_id, state="running", pid=child.pid, pid_started=started)
    _answer({"ok": True, "pid": child.pid, "pid_started": started})

    try:
        _Copier(child, log, fifo_fd).run()
    finally:
        log.close()
        if fifo_fd is not None:
            os.close(fifo_fd)
    exit_code, exit_signal = _exit_status(child.pid)
    with contextlib.suppress(OSError):
        os.close(master)
    server.close()
    # Whatever the command left running ends with it (its cgroup holds every descendant).
    cgroup = spec.get("cgroup")
    if cgroup:
        _end_cgroup(cgroup)
    records.record_end(conn, process_id, exit_code=exit_code, exit_signal=exit_signal)
    conn.close()
    return 0


def _end_cgroup(path: str) -> None:
    """Kill what is left in the command's cgroup and remove it (best effort)."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            left = bool(f.read().strip())
        if left:
            with open(os.path.join(path, "cgroup.kill"), "w") as f:
                f.write("1")
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                with open(os.path.join(path, "cgroup.events")) as f:
                    if "populated 0" in f.read():
                        break
                time.sleep(0.005)
        os.rmdir(path)
        os.rmdir(os.path.dirname(path))  # the session's directory, once its last command is gone
    except OSError:
        pass


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
