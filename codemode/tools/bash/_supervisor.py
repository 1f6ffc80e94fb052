"""The supervisor of one background process: owns its output, writes its log, records its exit.

Three kinds (``mode`` in the spec): a background run (``pty``: it starts the command on a PTY,
passes input to it, sends keyword reports, stops it at its ``timeout_seconds``); a Monitor
watcher (``watch``: it starts the command with piped output; each complete stdout line is an
event, coalesced and rate limited, stderr only goes to the log; its limits stop it); and a
promoted run (``adopt``: the host passes the pipes of a foreground command it started, and the
supervisor traces the command, which is not its child, to learn its exit status).

Started by the host as ``python -I -S <this file> SITE_DIRS...`` (or ``python -m
codemode.tools.bash._supervisor``) in a new session, with the JSON spec on stdin. It forks
once so the host can reap the first process at once; the second lives on without the host
(init adopts it). It imports only the standard library and psutil (the redactor for its
notification line adds hyperscan and re2) — not the ``codemode`` package — so a hundred of
them stay cheap; the record SQL comes from the sibling
``codemode/state/_processes.py`` and the launch primitive from ``codemode/sandbox/_spawn.py``, loaded by path.

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
    return _load(Path(__file__).resolve().parents[2] / "state" / "_processes.py", "_codemode_bash_records")


def _answer(message: dict[str, Any]) -> None:
    """Send the host its one-line answer and let go of stdout."""
    try:
        os.write(1, (json.dumps(message) + "\n").encode())
    except OSError:
        pass
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.close(devnull)


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
_TERM_GRACE_SECONDS = 2.0
# Keyword reports: once output has been quiet this long after a line with a keyword (waiting
# at most _REPORT_MAX_WAIT), at most one per _REPORT_EVERY; with the latest _REPORT_BYTES.
_REPORT_QUIET = 2.0
_REPORT_MAX_WAIT = 10.0
_REPORT_EVERY = 30.0
_REPORT_BYTES = 8 * 1024
# A completion keeps this much of the output's end.
_TAIL_BYTES = 31 * 1024
# A watcher's event: lines are cut to this many characters, an event holds at most this many
# lines (the rest start the next event).
_EVENT_LINE_CHARS = 4000
_EVENT_MAX_LINES = 200


class _Tracer:
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


def _exit_code(status: int | None) -> tuple[int | None, str | None]:
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


class _Hooks:
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


class _Stopper:
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


class _Copier:
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
    def open_log(db_path: str, path: str) -> Any:
        """The entry's ``EntryLog`` from ``codemode/state/_capped.py`` (standard library only,
        loaded by path like ``_records.py``).

        Raises:
            OSError: The log file cannot be opened.
            sqlite3.Error: The entry's cap cannot be read.
        """
        source = Path(__file__).resolve().parents[2] / "state" / "_capped.py"
        module = sys.modules.get("_codemode_archive_capped")
        if module is None:
            found = importlib.util.spec_from_file_location("_codemode_archive_capped", source)
            assert found is not None and found.loader is not None
            module = importlib.util.module_from_spec(found)
            sys.modules[found.name] = module
            found.loader.exec_module(module)
        return module.EntryLog(db_path, path)

    def __init__(
        self,
        pid: int,
        outputs: list[int],
        log: Any,
        fifo_fd: int | None,
        hooks: _Hooks,
        stopper: _Stopper,
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
            if fd != self.pty:
                os.close(fd)
        self.outputs.clear()
        os.close(self.pidfd)
        self.hooks.closed(time.monotonic())

    def _copy_output(self, fd: int, now: float) -> bool:
        try:
            data = os.read(fd, _READ)
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
            data = os.read(self.fifo_fd, _READ)
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


class _Lines:
    """Splits a byte stream into complete lines (text, without the line end)."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> list[str]:
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        if len(self._partial) > 64 * 1024:  # a line that never ends: take it as it is
            chunks.append(self._partial)
            self._partial = b""
        return [c.decode("utf-8", "replace").rstrip("\r") for c in chunks]

    def rest(self) -> list[str]:
        rest, self._partial = self._partial, b""
        return [rest.decode("utf-8", "replace").rstrip("\r")] if rest.strip() else []


class _Tail:
    """The last ``size`` bytes of a stream."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data = bytearray()

    def feed(self, data: bytes) -> None:
        self.data += data
        if len(self.data) > 2 * self.size:
            del self.data[: len(self.data) - self.size]

    def text(self) -> str:
        return bytes(self.data[-self.size :]).decode("utf-8", "replace")


class _RunHooks(_Hooks):
    """A background run: keyword reports, an optional lifetime, the tail for its completion."""

    def __init__(self, records: Any, conn: Any, spec: dict[str, Any], stopper: _Stopper) -> None:
        self.records = records
        self.conn = conn
        self.process_id = spec["process_id"]
        self.command = spec["command"]
        self.keywords = [k.lower() for k in spec.get("report_on") or ()]
        timeout = spec.get("timeout_seconds")
        self.stop_at = None if timeout is None else time.monotonic() + float(timeout)
        self.timeout = timeout
        self.stopper = stopper
        self.lines = _Lines()
        self.tail = _Tail(_TAIL_BYTES)
        self.report_tail = _Tail(_REPORT_BYTES)
        self.hit: tuple[str, str] | None = None  # (keyword, line) of the first line not yet reported
        self.hit_at = 0.0
        self.last_output = 0.0
        self.last_report = -_REPORT_EVERY

    def output(self, fd: int, data: bytes, now: float) -> None:
        self.tail.feed(data)
        self.last_output = now
        if not self.keywords:
            return
        self.report_tail.feed(data)
        if self.hit is None:
            for line in self.lines.feed(data):
                low = line.lower()
                found = next((k for k in self.keywords if k in low), None)
                if found is not None:
                    self.hit = (found, line.strip())
                    self.hit_at = now
                    break
        else:
            self.lines.feed(data)

    def _report_at(self) -> float | None:
        if self.hit is None:
            return None
        ready = min(self.last_output + _REPORT_QUIET, self.hit_at + _REPORT_MAX_WAIT)
        return max(ready, self.last_report + _REPORT_EVERY)

    def deadline(self) -> float | None:
        limits = [t for t in (self._report_at(), self.stop_at if self.stopper.why is None else None) if t]
        return min(limits) if limits else None

    def tick(self, now: float) -> None:
        if self.stop_at is not None and now >= self.stop_at and self.stopper.why is None:
            self.stopper.stop(f"; it reached its timeout_seconds ({self.timeout:g} s) and was stopped", now)
        report_at = self._report_at()
        if report_at is not None and now >= report_at and self.hit is not None:
            keyword, line = self.hit
            self.hit = None
            self.last_report = now
            short = self.records.short_command(self.command)
            shown = self.records.short_command(line, 200)
            text = (
                f"Background process {self.process_id} (`{short}`) printed {keyword!r} and is still running: "
                f'"{shown}". Read its output with bash({{action: "read", process_id: "{self.process_id}"}}).'
            )
            self.records.add_note(
                self.conn, self.process_id, "report", text,
                {"keyword": keyword, "line": line, "output": self.report_tail.text()},
            )  # fmt: skip


class _WatchHooks(_Hooks):
    """A Monitor watcher: complete stdout lines become events (coalesced, rate limited);
    stderr only goes to the log; its limits end it."""

    def __init__(
        self, records: Any, conn: Any, spec: dict[str, Any], stdout_fd: int, stopper: _Stopper
    ) -> None:
        self.records = records
        self.conn = conn
        self.process_id = spec["process_id"]
        options = spec["watch"]
        self.options = options
        now = time.monotonic()
        self.name = records.watcher_name(self.process_id, json.dumps(options))
        self.stdout_fd = stdout_fd
        self.stopper = stopper
        self.lines = _Lines()
        self.coalesce = options["coalesce_ms"] / 1000
        self.stop_at = now + options["timeout_seconds"]
        self.idle = options.get("idle_timeout_seconds")
        self.max_events = options.get("max_events")
        self.per_minute = options["max_events_per_minute"]
        self.last_line = now
        self.batch: list[str] = []
        self.batch_at: float | None = None
        self.last_emit = -self.coalesce
        self.sent: list[float] = []  # when recent events went out (the rate limit's window)
        self.events = 0
        self.suppressed = 0
        self.suppressed_total = 0
        self.after_limit = 0

    def output(self, fd: int, data: bytes, now: float) -> None:
        if fd != self.stdout_fd:
            return  # stderr: the log only
        lines = self.lines.feed(data)
        if lines:
            self.last_line = now
            self._add(lines, now)

    def _add(self, lines: list[str], now: float) -> None:
        for line in lines:
            self.batch.append(line if len(line) <= _EVENT_LINE_CHARS else line[:_EVENT_LINE_CHARS] + "…")
            if self.batch_at is None:
                # A line after a quiet window goes out at once (with the rest of its read);
                # lines within the window after an event wait for its end and go together.
                self.batch_at = max(now, self.last_emit + self.coalesce)
            if len(self.batch) >= _EVENT_MAX_LINES:
                self._emit(now)

    def _emit(self, now: float) -> None:
        lines, self.batch, self.batch_at = self.batch, [], None
        if not lines:
            return
        if self.max_events is not None and self.events >= self.max_events:
            self.after_limit += len(lines)
            return
        self.sent = [t for t in self.sent if t > now - 60]
        if len(self.sent) >= self.per_minute:
            self.suppressed += len(lines)
            self.suppressed_total += len(lines)
            return
        self.sent.append(now)
        self.last_emit = now
        shown = " | ".join(lines)
        if len(shown) > 1000:
            shown = shown[:1000] + f"… ({len(lines)} lines: read them all with monitor_events)"
        what = self.name + (f", {len(lines)} lines" if len(lines) > 1 else "")
        note = ""
        if self.suppressed:
            note = f" ({self.suppressed} earlier lines were suppressed by the rate limit of {self.per_minute} events a minute)"
        data = {"lines": lines, "suppressed": self.suppressed}
        self.suppressed = 0
        self.records.add_note(self.conn, self.process_id, "event", f"{what}: {shown}{note}", data)
        self.events += 1
        if self.max_events is not None and self.events >= self.max_events:
            self.stopper.stop(f"; it reached max_events ({self.max_events}) and was stopped", now)

    def deadline(self) -> float | None:
        limits = [self.batch_at]
        if self.stopper.why is None:
            limits.append(self.stop_at)
            if self.idle is not None:
                limits.append(self.last_line + self.idle)
        found = [t for t in limits if t is not None]
        return min(found) if found else None

    def tick(self, now: float) -> None:
        if self.batch_at is not None and now >= self.batch_at:
            self._emit(now)
        if self.stopper.why is None:
            if now >= self.stop_at:
                self.stopper.stop(
                    f"; it reached its timeout_seconds ({self.options['timeout_seconds']:g} s) and was stopped",
                    now,
                )
            elif self.idle is not None and now >= self.last_line + self.idle:
                self.stopper.stop(
                    f"; it printed no line for idle_timeout_seconds ({self.idle:g} s) and was stopped", now
                )

    def closed(self, now: float) -> None:
        self._add(self.lines.rest(), now)
        self._emit(now)

    def end_note(self) -> str:
        note = self.stopper.why or ""
        if self.suppressed_total:
            note += f"; the rate limit suppressed {self.suppressed_total} lines in all"
        if self.after_limit:
            note += f"; {self.after_limit} lines printed after max_events made no event"
        return note


def supervise(spec: dict[str, Any]) -> int:
    """Run one background process to its end (in the forked supervisor).

    ``spec["mode"]`` is ``pty`` (a background run: its terminal, input, keyword reports and
    lifetime), ``watch`` (a Monitor watcher: stdout lines are events, stderr goes to the log)
    or ``adopt`` (a promoted run: the host hands over the pipes of a command it started).
    """
    records = _load_records()
    conn = records.connect(spec["db_path"])
    process_id = spec["process_id"]
    mode = spec.get("mode", "pty")
    me = psutil.Process()
    records.update(conn, process_id, supervisor_pid=me.pid, supervisor_started=float(me.create_time()))
    if mode == "adopt":
        return _adopt(spec, records, conn)
    spawn = _load(_SPAWN_PATH, "_codemode_sandbox_spawn")
    layers = spec["layers"]
    fifo_fd: int | None = None
    server: socket.socket | None = None
    input_write: int | None = None
    master: int | None = None
    try:
        log = _Copier.open_log(spec["db_path"], spec["log_path"])
        if mode == "watch":
            out_read, out_write = os.pipe2(os.O_CLOEXEC)
            err_read, err_write = os.pipe2(os.O_CLOEXEC)
            null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            try:
                proc = spawn.spawn_helper(
                    program="/bin/bash",
                    argv=["/bin/bash", "-c", spec["command"]],
                    env=spec["env"],
                    cwd=spec["cwd"],
                    stdio=(null, out_write, err_write),
                    cgroup=spec.get("cgroup"),
                    **layers,
                )
            finally:
                for fd in (null, out_write, err_write):
                    os.close(fd)
            outputs = [out_read, err_read]
        else:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            server.bind("\0" + spec["input_name"])
            server.listen(8)
            input_read, input_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            os.set_blocking(input_write, True)
            fifo_fd = input_read
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
            outputs = [master]
    except Exception as exc:
        message = f"could not start the command: {exc}"
        records.update(conn, process_id, state="failed", error=message, ended_at=time.time())
        _answer({"ok": False, "error": message})
        return 1
    for fd in layers.values():
        if fd is not None:
            os.close(fd)
    if server is not None and input_write is not None:
        threading.Thread(
            target=_serve_input, args=(server, spec["input_token"].encode(), input_write), daemon=True
        ).start()
    started = float(psutil.Process(proc.pid).create_time())
    records.update(conn, process_id, state="running", pid=proc.pid, pid_started=started)
    _answer({"ok": True, "pid": proc.pid, "pid_started": started})

    stopper = _Stopper(proc.pid, spec.get("cgroup"))
    hooks: _RunHooks | _WatchHooks
    if mode == "watch":
        hooks = _WatchHooks(records, conn, spec, outputs[0], stopper)
    else:
        hooks = _RunHooks(records, conn, spec, stopper)
    try:
        _Copier(proc.pid, outputs, log, fifo_fd, hooks, stopper).run()
    finally:
        log.close()
        if fifo_fd is not None:
            os.close(fifo_fd)
    exit_code, exit_signal = _exit_status(proc.pid)
    if master is not None:
        with contextlib.suppress(OSError):
            os.close(master)
    if server is not None:
        server.close()
    _finish(spec, records, conn, exit_code, exit_signal, hooks, stopper)
    return 0


def _finish(
    spec: dict[str, Any],
    records: Any,
    conn: Any,
    exit_code: int | None,
    exit_signal: str | None,
    hooks: _RunHooks | _WatchHooks,
    stopper: _Stopper,
) -> None:
    """End what is left of the command and record its end (and completion or last event)."""
    # Whatever the command left running ends with it (its cgroup holds every descendant).
    cgroup = spec.get("cgroup")
    if cgroup:
        _end_cgroup(cgroup)
    if isinstance(hooks, _WatchHooks):
        note, data = hooks.end_note(), None
    else:
        note, data = stopper.why or "", {"output_tail": hooks.tail.text()}
    records.record_end(
        conn,
        spec["process_id"],
        exit_code=exit_code,
        exit_signal=exit_signal,
        state="stopped" if stopper.why else None,
        note=note,
        data=data,
    )
    conn.close()


def _adopt(spec: dict[str, Any], records: Any, conn: Any) -> int:
    """Take over a promoted run: its pipes (passed as fds), its exit status (traced)."""
    pid = spec["pid"]
    tracer = _Tracer(pid)
    try:
        tracer.start()
        if abs(float(psutil.Process(pid).create_time()) - spec["pid_started"]) > 0.01:
            raise OSError("the command is no longer running")
        log = _Copier.open_log(spec["db_path"], spec["log_path"])
    except Exception as exc:
        _answer({"ok": False, "error": str(exc)})
        return 1
    _answer({"ok": True, "pid": pid, "pid_started": spec["pid_started"]})
    stopper = _Stopper(pid, spec.get("cgroup"))
    hooks = _RunHooks(records, conn, {**spec, "report_on": None, "timeout_seconds": None}, stopper)
    try:
        _Copier(pid, list(spec["pipes"]), log, None, hooks, stopper).run()
    finally:
        log.close()
    exit_code, exit_signal = _exit_code(tracer.exit_status(10))
    _finish(spec, records, conn, exit_code, exit_signal, hooks, stopper)
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
