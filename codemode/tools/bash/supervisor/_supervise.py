"""One supervisor's life: start the command (or adopt a promoted one), copy its output to the end,
record its exit and completion."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from codemode.sandbox import _spawn as spawn
from codemode.sandbox._procstat import process_start
from codemode.state import _processes as records
from codemode.tools.bash.supervisor._copier import Copier, Stopper
from codemode.tools.bash.supervisor._hooks import RunHooks, WatchHooks
from codemode.tools.bash.supervisor._pty import open_pty, serve_input
from codemode.tools.bash.supervisor._spec import Spec
from codemode.tools.bash.supervisor._trace import Tracer, traced_exit


def _answer(message: Mapping[str, object]) -> None:
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


def supervise(spec: Spec) -> int:
    """Run one background process to its end (in the forked supervisor).

    ``spec["mode"]`` is ``pty`` (a background run: its terminal, input, keyword reports and
    lifetime), ``watch`` (a Monitor watcher: stdout lines are events, stderr goes to the log)
    or ``adopt`` (a promoted run: the host hands over the pipes of a command it started).
    """
    conn = records.connect(spec["db_path"])
    process_id = spec["process_id"]
    mode = spec.get("mode", "pty")
    me = os.getpid()
    records.update(conn, process_id, supervisor_pid=me, supervisor_started=process_start(me))
    if mode == "adopt":
        return _adopt(spec, records, conn)
    layers = spec["layers"]
    fifo_fd: int | None = None
    server: socket.socket | None = None
    input_write: int | None = None
    master: int | None = None
    try:
        log = Copier.open_log(spec["db_path"], spec["log_path"])
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
            master, terminal = open_pty(*spec["pty_size"])
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
    for layer_fd in layers.values():
        if isinstance(layer_fd, int):  # an fd, or None for a layer not prepared
            os.close(layer_fd)
    if server is not None and input_write is not None:
        threading.Thread(
            target=serve_input, args=(server, spec["input_token"].encode(), input_write, master), daemon=True
        ).start()
    started = process_start(proc.pid)
    records.update(conn, process_id, state="running", pid=proc.pid, pid_started=started)
    _answer({"ok": True, "pid": proc.pid, "pid_started": started})

    stopper = Stopper(proc.pid, spec.get("cgroup"))
    hooks: RunHooks | WatchHooks
    if mode == "watch":
        hooks = WatchHooks(records, conn, spec, outputs[0], stopper)
    else:
        hooks = RunHooks(records, conn, spec, stopper)
    try:
        Copier(proc.pid, outputs, log, fifo_fd, hooks, stopper).run()
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
    spec: Spec,
    records: Any,
    conn: Any,
    exit_code: int | None,
    exit_signal: str | None,
    hooks: RunHooks | WatchHooks,
    stopper: Stopper,
) -> None:
    """End what is left of the command and record its end (and completion or last event)."""
    # Whatever the command left running ends with it (its cgroup holds every descendant).
    cgroup = spec.get("cgroup")
    if cgroup:
        _end_cgroup(cgroup)
    if isinstance(hooks, WatchHooks):
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


def _adopt(spec: Spec, records: Any, conn: Any) -> int:
    """Take over a promoted run: its pipes (passed as fds), its exit status (traced)."""
    pid = spec["pid"]
    tracer = Tracer(pid)
    try:
        tracer.start()
        if process_start(pid) != round(spec["pid_started"]):
            raise OSError("the command is no longer running")
        log = Copier.open_log(spec["db_path"], spec["log_path"])
    except Exception as exc:
        _answer({"ok": False, "error": str(exc)})
        return 1
    _answer({"ok": True, "pid": pid, "pid_started": spec["pid_started"]})
    stopper = Stopper(pid, spec.get("cgroup"))
    hooks = RunHooks(records, conn, {**spec, "report_on": None, "timeout_seconds": None}, stopper)
    try:
        Copier(pid, list(spec["pipes"]), log, None, hooks, stopper).run()
    finally:
        log.close()
    exit_code, exit_signal = traced_exit(tracer.exit_status(10))
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
    spec: Spec = json.loads(sys.stdin.buffer.read())
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
            conn = records.connect(spec["db_path"])
            records.record_end(
                conn, spec["process_id"], exit_code=None, exit_signal=None, state="lost", error=str(exc)
            )
        finally:
            _answer({"ok": False, "error": f"supervisor failed: {exc}"})
        return 1
