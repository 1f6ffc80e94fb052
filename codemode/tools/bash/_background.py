"""Starting a background process under its own supervisor, and finishing its archive log."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from codemode.errors import ErrorCode, ToolError
from codemode.sandbox import cgroup_kill, cgroup_remove
from codemode.state import Archive
from codemode.state import process_records as _records
from codemode.tools._terminal import TerminalView
from codemode.tools.bash._answers import SupervisorAnswer
from codemode.tools.bash._env import command_env
from codemode.tools.bash._foreground import RunSpec, command_cgroup, confine

SUPERVISOR = Path(__file__).with_name("supervisor")
# Where the supervisor (started without site processing) finds the redactor's engines
# (hyperscan, re2): the site directory of codemode's dependencies, located through psutil's
# spec, not imported (psutil costs ~7 ms of a cold start that starts nothing in the background).
_PSUTIL = find_spec("psutil")
_SUPERVISOR_PATHS = [str(Path(_PSUTIL.origin).parent.parent)] if _PSUTIL and _PSUTIL.origin else []
_HANDSHAKE_SECONDS = 30.0
PTY_TERM = "xterm-256color"
#: The PTY's window (the supervisor sets it); ``read`` renders the log for the same terminal.
PTY_VIEW = TerminalView(columns=200, lines=50, newline_returns=False)


def runtime_dir(archive: Archive) -> Path:
    """Where supervisor error files live (inside the private state dir)."""
    path = archive.state_dir / "bash"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _read_line(stream: Any, timeout: float) -> bytes:
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    data = b""
    poller = select.poll()  # not select(): it fails once the host holds more than 1,023 fds
    poller.register(fd, select.POLLIN)
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if not poller.poll(max(1, int(remaining * 1000))):
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data


def _start_supervisor(err: Any, pass_fds: tuple[int, ...]) -> subprocess.Popen[bytes]:
    """Start a supervisor process (its own session, only ``pass_fds`` inherited, stderr to
    ``err``); it reads its spec on stdin (`_handshake`).

    Raises:
        OSError: It could not be started.
    """
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(SUPERVISOR), *_SUPERVISOR_PATHS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        cwd="/",
        start_new_session=True,
        pass_fds=pass_fds,
        close_fds=True,
    )


def _handshake(proc: subprocess.Popen[bytes], payload: Mapping[str, object]) -> SupervisorAnswer | None:
    """Hand a starting supervisor its spec on stdin and read its one-line JSON answer (None
    when it gave none in time); its stdout is closed after, and it has detached by then."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(payload).encode())
        proc.stdin.close()
        line = _read_line(proc.stdout, _HANDSHAKE_SECONDS)
    finally:
        proc.stdout.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_HANDSHAKE_SECONDS)
    try:
        answer: SupervisorAnswer = json.loads(line)
    except ValueError:
        return None
    return answer


def _stderr_tail(err_path: Path) -> str:
    """The end of what a supervisor wrote on stderr before it answered (or failed to)."""
    return err_path.read_text(errors="replace").strip()[-2000:] if err_path.exists() else ""


def _failed(
    db: Callable[[], AbstractContextManager[sqlite3.Connection]],
    process_id: str,
    cgroup: str | None,
    error: str,
) -> None:
    """A start that failed: the record says so (no completion is queued: the caller has the
    error), and the command's cgroup goes, with anything that got into it."""
    with db() as conn:
        record = _records.get(conn, process_id)
        if record is not None and record.live:
            _records.update(conn, process_id, state="failed", error=error, ended_at=time.time())
    if cgroup is not None:
        cgroup_kill(cgroup)
        cgroup_remove(cgroup)


def start_background(
    spec: RunSpec,
    *,
    process_id: str,
    archive: Archive,
    db: Callable[[], AbstractContextManager[sqlite3.Connection]],
    kind: str = "background",
    settings: Mapping[str, object] | None = None,
) -> SupervisorAnswer:
    """Record, then start, one background process under a new supervisor (blocking).

    Args:
        spec: The request.
        process_id: Its id.
        archive: Where its log goes.
        db: The process records.
        kind: ``background`` (a PTY; ``settings`` may hold ``report_on`` and
            ``timeout_seconds``) or ``watcher`` (piped; ``settings`` are the watcher's options).
        settings: Kept in the record (``options``) and passed to the supervisor.

    Returns:
        The supervisor's answer (``pid``, ``pid_started``) and the log's ``log_ref``.

    Raises:
        ToolError: The sandbox cannot be enforced, or the supervisor or the command could not
            be started (the record is marked ``failed``).
    """
    conf = confine(spec.policy)
    run_dir = runtime_dir(archive)
    log = archive.open_log(kind="log", session_id=spec.session_id, redact=False)
    log_path = str(log.path)
    # The supervisor appends to the file from now on; the entry stays open (readable while it
    # grows) until Archive.finish_log records its size and sha256.
    log.detach()
    # The input channel: an abstract unix socket and the token a writer must present.
    watcher = kind == "watcher"
    input_name = f"codemode-in-{secrets.token_hex(12)}"
    input_token = secrets.token_hex(32)
    cgroup = command_cgroup(f"s_{spec.session_id}", process_id)
    with db() as conn:
        _records.insert(
            conn,
            process_id=process_id,
            kind=kind,
            marker=process_id,
            state="starting",
            log_path=log_path,
            log_ref=log.ref,
            input_path=None if watcher else f"@{input_name}",
            input_token=None if watcher else input_token,
            cgroup=cgroup,
            started_at=time.time(),
            options=json.dumps(settings) if settings else None,
            **spec.record_fields(),
        )
    procs_fd = None
    try:
        with conf:
            if cgroup is not None:
                procs_fd = os.open(os.path.join(cgroup, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
            fds = conf.fds()
            layers: dict[str, int | None] = {
                "helper_fd": fds["helper_fd"],
                "ruleset_fd": fds["ruleset_fd"],
                "seccomp_fd": fds["seccomp_fd"],
                "shm_fd": fds.get("shm_fd"),  # the session's /dev/shm (launcher.c)
                "net_fd": fds.get("net_fd"),  # with an allowlist: the channel to the host's proxy
                "cgroup_procs_fd": procs_fd,
            }
            payload = {
                "mode": "watch" if watcher else "pty",
                "watch": settings if watcher else None,
                **({} if watcher else (settings or {})),
                "process_id": process_id,
                "command": spec.command,
                "cwd": str(spec.cwd),
                "env": {
                    **command_env(spec.environ, process_id, term="dumb" if watcher else PTY_TERM),
                    **conf.env,
                },
                "db_path": str(archive.db_path),
                "log_path": log_path,
                "input_name": input_name,
                "input_token": input_token,
                "pty_size": [PTY_VIEW.lines, PTY_VIEW.columns],
                "layers": layers,
                "cgroup": cgroup,
            }
            err_path = run_dir / f"{process_id}.err"
            with open(err_path, "wb") as err:
                try:
                    proc = _start_supervisor(err, tuple(fd for fd in layers.values() if fd is not None))
                except OSError as exc:
                    _failed(db, process_id, cgroup, str(exc))
                    raise ToolError(
                        f"could not start the background supervisor: {exc}", code=ErrorCode.TOOL_FAILED
                    ) from exc
    finally:
        if procs_fd is not None:
            os.close(procs_fd)
    answer = _handshake(proc, payload)
    if answer is None:
        detail = _stderr_tail(err_path)
        # The caller gets this error; a process that never ran queues no completion.
        _failed(db, process_id, cgroup, detail or "no answer")
        raise ToolError(
            "the background supervisor did not start" + (f": {detail}" if detail else ""),
            code=ErrorCode.SUPERVISOR_FAILED,
        ) from None
    if not answer.get("ok"):
        _failed(db, process_id, cgroup, str(answer.get("error")))
        raise ToolError(
            f"the background command could not start: {answer.get('error')}", code=ErrorCode.SPAWN_FAILED
        )
    with contextlib.suppress(OSError):
        if err_path.stat().st_size == 0:
            err_path.unlink()
    return {**answer, "log_ref": log.ref, "network_refusals": conf.network_refusals}


def adopt(
    *,
    process_id: str,
    pid: int,
    pid_started: float,
    pipes: tuple[int, ...],
    log_path: str,
    cgroup: str | None,
    command: str,
    archive: Archive,
) -> SupervisorAnswer:
    """Hand a running foreground command's pipes to a new supervisor (blocking).

    The supervisor traces the command (it is not its child) to learn its exit status, copies
    its output to its log and records its end, with or without this host. The caller keeps its
    own copies of the pipes until the answer is ``ok``; only then may it close them (and never
    read them again).

    Returns:
        The supervisor's answer: ``ok`` and, when not, ``error``.
    """
    payload = {
        "mode": "adopt",
        "process_id": process_id,
        "command": command,
        "pid": pid,
        "pid_started": pid_started,
        "pipes": list(pipes),
        "db_path": str(archive.db_path),
        "log_path": log_path,
        "cgroup": cgroup,
    }
    err_path = runtime_dir(archive) / f"{process_id}.err"
    with open(err_path, "wb") as err:
        try:
            proc = _start_supervisor(err, tuple(pipes))
        except OSError as exc:
            return {"ok": False, "error": f"could not start a supervisor: {exc}"}
    answer = _handshake(proc, payload)
    if answer is None:
        answer = {"ok": False, "error": _stderr_tail(err_path) or "the supervisor did not answer"}
    with contextlib.suppress(OSError):
        if err_path.stat().st_size == 0:
            err_path.unlink()
    return answer
