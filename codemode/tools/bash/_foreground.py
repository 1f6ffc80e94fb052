"""A foreground command: spawn, read, time out or hand off, and stop its whole tree.

The light path: ``bash -c`` with stdin closed and both streams piped, in a new session (so
the whole tree can be signalled), confined before bash runs (``Confinement.spawn``). A quick
command is read and shaped on the event loop itself (:class:`Pump` steps when
its epoll fd is readable) with no thread hop; past 256 KiB of output, or for slow shaping (a
``git status`` for the dirty marker), the work moves to a worker thread so the loop stays free.
Timeouts stop the whole tree; a run still going at the hand-off time is promoted (see
``_manager``); cancelling the caller stops the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import anyio
import anyio.to_thread

from codemode._trace import current
from codemode.errors import ErrorCode, SandboxUnavailable, ToolError
from codemode.sandbox import (
    Process,
    SandboxPolicy,
    cgroup_empty,
    cgroup_remove,
    cgroup_root,
    identity_is_gone,
    pids_refused,
    pids_refused_note,
    process_identity,
    tmp_full_note,
)
from codemode.state import Archive, ArchiveRef, LogWriter, Redactor
from codemode.tools._capture import StreamCapture
from codemode.tools._terminal import terminal_view
from codemode.tools.bash._env import (
    WorkTree,
    command_env,
    current_work_tree,
    find_work_tree,
    git_changed_since,
    workspace_revision,
)
from codemode.tools.bash._proctree import markers_with_prefix, terminate_tree
from codemode.tools.bash._pump import Pump, PumpStatus

if TYPE_CHECKING:
    from codemode.sandbox import Confinement
    from codemode.tools._model import ProgramScope
    from codemode.tools._verification import Classification, StreamScan

# Verification (recognising test and build commands, reading their summaries), result
# shaping and the sandbox's launch path load at the first command, not with the package:
# ~25 ms of every cold start that runs none (bench/bench_cold.py, bench/bench_start.py).


def _network_refusal_note(refusals: list[str] | None, policy: SandboxPolicy) -> str | None:
    from codemode.sandbox import network_refusal_note

    return network_refusal_note(refusals, policy)


@functools.lru_cache(maxsize=512)
def _classify(command: str) -> Classification | None:
    """``classify_command``, remembered: agents repeat the same test and build commands."""
    from codemode.tools._verification import classify_command

    return classify_command(command)


# A dirty check (``git status``) costs a few ms; a quick command gets one only when it changed
# the repository (see `_ending`).
_DIRTY_CHECK_AFTER_MS = 100
# How long a stopped tree gets between SIGTERM and SIGKILL.
TERM_GRACE_SECONDS = 2.0
# Output up to this size is kept in memory and archived in one piece at the end.
_LOG_IN_MEMORY_BYTES = 64 * 1024
# Output read on the event loop before the pump moves to a worker thread.
_LOOP_BYTES = 256 * 1024


class LazyLog:
    """A foreground command's log: in memory while small, streamed into the archive past that.

    Most commands print little; archiving their output in one ``put`` at the end (or not at all
    when there is none) keeps the light path light. A small log is redacted before it is
    stored. A streamed log is stored raw in the private state directory, like a background
    run's, and the archive redacts every page it returns: redacting each byte as it is written
    would cap a command's output at the redactor's speed (~300 MB/s), while a log is usually read
    a few pages at most.

    Args:
        archive: Where the log goes.
        session_id: The owning session.
        redactor: Redacts the in-memory case (the archive redacts the streamed case on read).
    """

    def __init__(self, archive: Archive, session_id: str, redactor: Redactor) -> None:
        self._archive = archive
        self._session_id = session_id
        self._redactor = redactor
        self._buffer = bytearray()
        self._writer: LogWriter | None = None
        self._result: ArchiveRef | None = None

    def write(self, data: bytes) -> None:
        """Append output."""
        if self._writer is not None:
            self._writer.write(data)
            return
        self._buffer += data
        if len(self._buffer) > _LOG_IN_MEMORY_BYTES:
            self.stream()

    @property
    def in_memory(self) -> bool:
        """Whether the log is still only in memory (small)."""
        return self._writer is None

    def stream(self) -> LogWriter:
        """Switch to streaming into an archive log (readable while it grows) and return it."""
        if self._writer is None:
            self._writer = self._archive.open_log(kind="log", session_id=self._session_id, redact=False)
            if self._buffer:
                self._writer.write(bytes(self._buffer))
                self._buffer = bytearray()
        return self._writer

    def close(self) -> ArchiveRef | None:
        """Finish the log; None when the command printed nothing."""
        if self._result is None:
            if self._writer is not None:
                self._result = self._writer.close()
            elif self._buffer:
                data = self._redactor.redact_bytes(bytes(self._buffer))
                self._result = self._archive.put(data, kind="log", session_id=self._session_id)
        return self._result


class RecordFields(TypedDict):
    """The fields of a process record that come from its request (`RunSpec.record_fields`)."""

    session_id: str
    command: str
    cwd: str
    lifecycle: str
    completion_mode: str
    purpose: str | None
    scope: str | None


@dataclass
class RunSpec:
    """One foreground ``run`` request, validated."""

    command: str
    cwd: Path
    timeout_seconds: int
    session_id: str
    policy: SandboxPolicy
    purpose: str | None = None
    scope: str | None = None
    lifecycle: str = "session"
    completion_mode: str = "resume"
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    call_id: str | None = None  # the surrounding run_code or direct call (progress reports)
    direct: tuple[str, ...] | None = None  # exec this argv without a shell
    shell_fallback: bool = False  # direct came from a command string: bash runs it if not found
    writes: bool = True  # may change things: waits for the session's writers (ToolContext.writers)

    def record_fields(self) -> RecordFields:
        """The fields of a process record that come from this request."""
        return {
            "session_id": self.session_id,
            "command": self.command,
            "cwd": str(self.cwd),
            "lifecycle": self.lifecycle,
            "completion_mode": self.completion_mode,
            "purpose": self.purpose,
            "scope": self.scope,
        }


@dataclass(eq=False)
class Running:
    """A foreground command that is still running (handed over at promotion)."""

    spec: RunSpec
    marker: str
    proc: Process
    pump: Pump
    stdout: StreamCapture
    stderr: StreamCapture
    log: LazyLog
    started: float  # time.monotonic()
    started_wall: float  # time.time()
    work_tree: WorkTree | None = None  # looked up while the command starts
    scan: StreamScan | None = None  # what a verification command's whole output showed
    forks_refused: int = 0  # pids.events "max" of its (reused) cgroup when it started
    # The host's cgroup owner on its state dir (``h_<tag>_<host>``): the git probe's goes there.
    cgroup_owner: str = "h_unknown"

    def terminate(self) -> None:
        """Stop the whole tree (blocking; the root is not reaped yet, so its pgid is ours)."""
        root = self.proc.pid if self.proc.returncode is None else None
        terminate_tree(
            self.marker, pgid=root, root_pid=root, grace_seconds=TERM_GRACE_SECONDS, cgroup=self.proc.cgroup
        )

    def release_cgroup(self) -> bool:
        """Give the command's cgroup back if nothing is left in it; False when processes the
        command left behind still run there (the session's to end, see the manager)."""
        return self.proc.cgroup is None or CGROUPS.give(self.proc.cgroup)

    def reap(self) -> tuple[int | None, str | None]:
        """Wait for the root (already exited) and return ``(exit_code, signal name)``."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None, None
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return 128 - code, name
        return code, None


def host_identity() -> str:
    """``<pid>t<start>`` of this host (`process_identity`), read once per process: names it in
    its commands' markers and cgroups and in the sessions it holds."""
    return _identity_of(os.getpid())


@functools.cache
def _identity_of(pid: int) -> str:
    return process_identity(pid)


@functools.cache
def _state_tag_of(db_path: str) -> str:
    return hashlib.sha256(os.path.realpath(db_path).encode()).hexdigest()[:12]


def state_tag(archive: Archive) -> str:
    """12 hex digits naming the state directory of ``archive`` (a hash of its database's real
    path). Foreground markers and cgroups carry it, so a host sweeps only what hosts of its own
    state directory left: a promoted run is recorded in the state directory of the host that
    started it, and only a host reading that directory can tell it from an orphan."""
    return _state_tag_of(str(archive.db_path))


def host_cgroup_owner(tag: str) -> str:
    """The cgroup owner of this host's foreground commands on state directory ``tag``
    (see `command_cgroup`): ``h_<tag>_<host>`` (`host_identity`)."""
    return f"h_{tag}_{host_identity()}"


class _CgroupPool:
    """Empty cgroups of this host's foreground commands, kept for the next command, per owner
    (one owner per state directory this process serves).

    A new cgroup costs the command ~0.25 ms in the kernel (the mkdir, then moving the first
    process into it), a quarter of a foreground ``true``; moving into one that exists costs
    ~20 µs (bench/bench_sandbox.py). A cgroup goes back to the pool only when empty; one that
    still holds what a command left running is the session's (see the manager).
    """

    def __init__(self) -> None:
        self._free: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._names = itertools.count()

    def take(self, owner: str) -> str | None:
        """An empty cgroup of ``owner`` for a command, or None where cgroups are unavailable.

        Raises:
            ToolError: cgroups are available but a new one cannot be created.
        """
        with self._lock:
            free = self._free.get(owner)
            if free:
                return free.pop()
        return command_cgroup(owner, f"f{next(self._names)}")

    def give(self, path: str) -> bool:
        """Keep ``path`` for reuse if it is empty; False when processes still run in it."""
        if not cgroup_empty(path):
            return False
        with self._lock:
            self._free.setdefault(os.path.basename(os.path.dirname(path)), []).append(path)
        return True

    def keeps_any(self) -> bool:
        """Whether it keeps a cgroup of any owner (none before a host's first command)."""
        with self._lock:
            return any(self._free.values())

    def clear(self, owner: str) -> None:
        """Remove the kept cgroups of ``owner`` (its host's shutdown)."""
        with self._lock:
            free = self._free.pop(owner, [])
        for path in free:
            with contextlib.suppress(OSError):
                cgroup_remove(path)


CGROUPS = _CgroupPool()


def command_cgroup(owner: str, name: str) -> str | None:
    """A new cgroup for one command, or None where cgroups are unavailable (see `cgroup_root`).

    Raises:
        ToolError: cgroups are available but this one cannot be created.
    """
    root = cgroup_root()
    if root.path is None:
        return None
    try:
        return root.make(owner, name)
    except OSError as exc:
        raise ToolError(
            f"could not create the command's cgroup ({exc.strerror or exc}); the command was not run",
            code=ErrorCode.SANDBOX_UNAVAILABLE,
        ) from exc


def foreground_marker(tag: str) -> str:
    """Marker of a foreground command, ``f_<tag>_<host>_<random>``: names the state
    directory (`state_tag`) and this host (`host_identity`), so that after a crash the next
    host on that state directory can find and end what this one left running."""
    return f"f_{tag}_{host_identity()}_{secrets.token_hex(6)}"


def orphaned_foreground_markers(tag: str) -> list[str]:
    """Markers of foreground commands of state directory ``tag`` whose host process is gone
    (never another state directory's: its promoted runs are recorded only there)."""
    orphans = []
    for marker in markers_with_prefix(f"f_{tag}_"):
        parts = marker.split("_")
        if len(parts) == 4 and identity_is_gone(parts[2]):
            orphans.append(marker)
    return orphans


def orphaned_foreground_cgroups(tag: str) -> list[str]:
    """Cgroups of foreground commands of state directory ``tag`` (and what they left running)
    whose host is gone."""
    root = cgroup_root()
    prefix = f"h_{tag}_"
    return [
        path
        for owner in root.owners()
        if owner.startswith(prefix) and identity_is_gone(owner[len(prefix) :])
        for path in root.children(owner)
    ]


def confine(policy: SandboxPolicy) -> Confinement:
    """`prepare_confinement`, its refusal as the error the model sees.

    Raises:
        ToolError: The sandbox cannot be enforced (fail closed).
    """
    from codemode.sandbox import prepare_confinement  # the launch path loads with the first command

    try:
        return prepare_confinement(policy)
    except SandboxUnavailable as exc:
        raise ToolError(str(exc), code=ErrorCode.SANDBOX_UNAVAILABLE) from exc


def _launch(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    policy: SandboxPolicy,
    stdio: tuple[int, int, int],
    cgroup: str | None,
) -> Process:
    """`launch` of that `LaunchSpec`, its refusal as the error the model sees.

    Raises:
        ToolError: The sandbox cannot be enforced (fail closed).
        OSError: The command could not be started.
    """
    from codemode.sandbox import LaunchSpec, launch  # the launch path loads with the first command

    try:
        return launch(LaunchSpec(argv, cwd, env, policy, stdio=stdio, cgroup=cgroup))
    except SandboxUnavailable as exc:
        raise ToolError(str(exc), code=ErrorCode.SANDBOX_UNAVAILABLE) from exc


@functools.cache
def _devnull() -> int:
    """One read-only ``/dev/null`` fd (close-on-exec), every command's stdin."""
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def spawn(spec: RunSpec, archive: Archive, marker: str, redactor: Redactor) -> Running:
    """Start ``spec.command`` confined, with its (lazy) log.

    The child confines itself before it executes the shell (the sandbox's `launch`: its exec
    helper, started with ``posix_spawn``, applies every layer); the host stays unconfined.

    Raises:
        ToolError: The sandbox cannot be enforced (fail closed) or the shell cannot start.
    """
    if not os.path.isdir(spec.cwd):  # the helper would refuse too, with exit 126: say it plainly
        raise ToolError(
            f"could not start /bin/bash in {str(spec.cwd)!r}: No such file or directory (it was "
            "removed?); pass an existing cwd",
            code=ErrorCode.SPAWN_FAILED,
        )
    # The pipes are made here rather than by Popen, which would wrap each in a file object
    # the pump does not use; the read ends stay in this process, the write ends go to the child.
    out_read, out_write = os.pipe2(os.O_CLOEXEC)
    err_read, err_write = os.pipe2(os.O_CLOEXEC)
    argv = list(spec.direct) if spec.direct is not None else ["/bin/bash", "-c", spec.command]
    try:
        env = command_env(spec.environ, marker, term="dumb")
        if spec.direct is not None:
            env["PWD"] = str(spec.cwd)  # what bash would have set
        started = time.monotonic()
        owner = host_cgroup_owner(state_tag(archive))
        cgroup = CGROUPS.take(owner)
        refused = pids_refused(cgroup)
        stdio = (_devnull(), out_write, err_write)
        try:
            proc = _launch(argv, str(spec.cwd), env, spec.policy, stdio, cgroup)
        except FileNotFoundError:
            if not spec.shell_fallback:
                raise
            # Not on PATH: bash says so as it would have ("command not found", exit 127).
            argv = ["/bin/bash", "-c", spec.command]
            proc = _launch(argv, str(spec.cwd), env, spec.policy, stdio, cgroup)
    except BaseException as exc:
        os.close(out_read)
        os.close(err_read)
        if isinstance(exc, OSError):
            program = argv[0] if spec.direct is not None else "/bin/bash"
            hint = " (not found on PATH)" if isinstance(exc, FileNotFoundError) else ""
            raise ToolError(
                f"could not start {program} in {str(spec.cwd)!r}: {exc.strerror or exc}{hint}",
                code=ErrorCode.SPAWN_FAILED,
            ) from exc
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    from codemode.tools._verification import ScannedCapture, scan_for

    view = terminal_view(spec.environ)  # pipes: rendered for COLUMNS x LINES, or 80 x 24
    # A verification command's output also passes a scan: failing tests and counts a cut would hide.
    scan = scan_for(_classify(spec.command))
    stdout, stderr = (
        (ScannedCapture(scan, 0, view=view), ScannedCapture(scan, 1, view=view))
        if scan is not None
        else (StreamCapture(view=view), StreamCapture(view=view))
    )
    log = LazyLog(archive, spec.session_id, redactor)
    try:
        pump = Pump(proc, (out_read, err_read), stdout, stderr, log)
    except BaseException:
        # Nothing would ever read, stop or reap this command: end it here.
        with contextlib.suppress(Exception):
            os.close(out_read)
            os.close(err_read)
            terminate_tree(marker, pgid=proc.pid, root_pid=proc.pid, grace_seconds=0, cgroup=proc.cgroup)
            proc.wait(timeout=5)
        raise
    # The work tree is looked up now, while the command starts on another core, rather than
    # after it has ended; workspace_revision re-checks what the command could have changed.
    work_tree = find_work_tree(spec.cwd, spec.policy.writable_roots)
    forks_refused = 0 if refused is None else refused[0]
    running = Running(
        spec, marker, proc, pump, stdout, stderr, log, started, time.time(), work_tree, scan, forks_refused
    )
    running.cgroup_owner = owner
    return running


@dataclass
class Outcome:
    """How a foreground run ended, ready for the model.

    Attributes:
        blocks: The text in blocks (stdout, stderr, status lines); a budget cut keeps the head
            and tail of each, so pass them on as separate content blocks.
        structured: The envelope.
        is_error: Whether the run failed (non-zero exit, timeout, cancelled).
    """

    blocks: list[str]
    structured: dict[str, object]
    is_error: bool

    @property
    def text(self) -> str:
        """The blocks joined, as one text."""
        return "\n".join(self.blocks)


@dataclass(frozen=True)
class _Ending:
    """What is settled the moment a run is shaped: its duration, work tree and dirty check."""

    duration_ms: int
    tree: WorkTree | None
    skip_dirty: str | None  # why the dirty check is skipped; None runs it (when there is a tree)


def _ending(running: Running, *, promoted: bool) -> _Ending:
    """Settle how long ``running`` took and whether its dirty check runs.

    The check costs a few ms, noise next to a command of 100 ms or more and always worth it for
    a verification command (tests passed on which tree?). A quicker command gets it when it
    changed HEAD or the index (commit, checkout, add, ...); otherwise the envelope says why not.
    """
    duration_ms = int((time.monotonic() - running.started) * 1000)
    tree = current_work_tree(running.spec.cwd, running.work_tree)
    skip: str | None = None
    if tree is not None and promoted:
        skip = "not checked: the command is still running in the background"
    elif (
        tree is not None
        and duration_ms < _DIRTY_CHECK_AFTER_MS
        and _classify(running.spec.command) is None
        and not git_changed_since(tree, running.started_wall)
    ):
        skip = (
            f"not checked: the command took under {_DIRTY_CHECK_AFTER_MS} ms and changed neither HEAD "
            "nor the index, and the check (git status) would cost more than the command"
        )
    return _Ending(duration_ms, tree, skip)


def finish(
    running: Running,
    *,
    redactor: Redactor,
    timed_out: bool = False,
    cancelled: bool = False,
    promoted_process_id: str | None = None,
) -> Outcome:
    """Reap (unless promoted), close the log and shape the result (blocking, and it reads what
    the command could write: call it in a worker thread).

    Args:
        running: The command.
        redactor: Redacts the text and the envelope.
        timed_out: It was stopped at its timeout.
        cancelled: It was stopped because the caller went away.
        promoted_process_id: It was moved to the background as this process.
    """
    spec = running.spec
    ending = _ending(running, promoted=promoted_process_id is not None)
    exit_code: int | None = None
    signal_name: str | None = None
    log_ref: ArchiveRef | None = None
    next_offset: int | None = None
    log_name: str | None = None
    if promoted_process_id is None:
        exit_code, signal_name = running.reap()
        running.pump.close()
        log_ref = running.log.close()
        log_name = log_ref.ref if log_ref is not None else None
    else:
        writer = running.log.stream()
        # Offsets are into the log as stored (raw); reads of it are redacted page by page.
        next_offset = writer.bytes_written
        log_name = writer.ref
    from codemode.tools.bash._shape import build_result

    revision = workspace_revision(
        ending.tree, policy=spec.policy, cgroup_owner=running.cgroup_owner, skip_dirty=ending.skip_dirty
    )
    notes = (
        pids_refused_note(running.proc.cgroup, running.forks_refused),
        tmp_full_note(spec.policy.temp_dir),
        _network_refusal_note(running.proc.network_refusals, spec.policy),
    )
    blocks, structured = build_result(
        command=spec.command,
        cwd=spec.cwd,
        policy=spec.policy,
        redactor=redactor,
        stdout=running.stdout.excerpt(),
        stderr=running.stderr.excerpt(),
        exit_code=exit_code,
        signal_name=signal_name,
        timed_out=timed_out,
        timeout_seconds=spec.timeout_seconds,
        duration_ms=ending.duration_ms,
        log=log_ref,
        log_ref=log_name,
        classification=_classify(spec.command),
        scan=running.scan,
        revision=revision,
        purpose=spec.purpose,
        scope=spec.scope,
        promoted_process_id=promoted_process_id,
        next_offset=next_offset,
        cancelled=cancelled,
        limit_notes=tuple(note for note in notes if note),
    )
    is_error = timed_out or cancelled or (promoted_process_id is None and exit_code != 0)
    return Outcome(blocks, structured, is_error)


async def run_foreground(
    spec: RunSpec,
    *,
    archive: Archive,
    redactor: Redactor,
    handoff_seconds: float | None,
    promote: Callable[[Running], str | None],
    track: Callable[[Running, bool], None] | None = None,
    program: ProgramScope | None = None,
) -> Outcome:
    """Run one foreground command to its end, its timeout, or its hand-off.

    Traced (`codemode._trace.current`), in a span of its own (``codemode.bash``): the command
    redacted and cut (``process.command_line``), its pid, exit code, and the background
    process it became when it was handed off.

    Args:
        spec: The request.
        archive: Where the log goes.
        redactor: Redacts the text before it is returned.
        handoff_seconds: Hand off to the background after ``min(handoff_seconds,
            timeout)``; None waits to the timeout and then stops the tree.
        promote: Called (in a worker thread) with the still-running command at hand-off;
            registers it as a background process and returns its id (from then on the
            caller of ``promote`` owns the pump), or None to keep waiting to the timeout.
        track: Told when the command starts (True) and ends or is promoted (False), so the
            manager can stop foreground runs at shutdown.
        program: The program making the call, if any: then there is no hand-off (the program
            waits for the answer); a call cancelled at or after the program's deadline is
            promoted instead of stopped, its process id added to ``program.promoted``.

    Raises:
        ToolError: The command could not be started.
    """
    trace = current()
    if trace is None:
        return await _run_foreground(spec, archive, redactor, handoff_seconds, promote, track, program)
    with trace.span("codemode.bash", process_attributes(spec, redactor)) as span:

        def tracked(running: Running, started: bool) -> None:
            if started:
                span.set_attribute("process.pid", running.proc.pid)
            if track is not None:
                track(running, started)

        outcome = await _run_foreground(spec, archive, redactor, handoff_seconds, promote, tracked, program)
        ended = outcome.structured
        promoted = ended.get("promoted_process_id")
        if isinstance(promoted, str):
            span.set_attribute("codemode.process.id", promoted)
        elif isinstance(code := ended.get("exit_code"), int):
            span.set_attribute("process.exit.code", code)
        span.set_attribute("codemode.process.timed_out", ended.get("timed_out") is True)
    return outcome


def process_attributes(spec: RunSpec, redactor: Redactor) -> dict[str, str]:
    """A command's span attributes before it runs: its command line redacted and cut to 256
    characters, the sandbox mode it runs in."""
    return {
        "process.command_line": redactor.one_line(spec.command, 256),
        "codemode.sandbox.mode": spec.policy.mode.value,
    }


async def _run_foreground(
    spec: RunSpec,
    archive: Archive,
    redactor: Redactor,
    handoff_seconds: float | None,
    promote: Callable[[Running], str | None],
    track: Callable[[Running, bool], None] | None,
    program: ProgramScope | None,
) -> Outcome:
    """`run_foreground`'s work, untraced."""
    # Spawning is quick (vfork) and happens on the loop, as asyncio's own subprocesses do.
    running = spawn(spec, archive, foreground_marker(state_tag(archive)), redactor)
    if track is not None:
        track(running, True)
    timeout_at = running.started + spec.timeout_seconds
    wait_until = timeout_at
    if handoff_seconds is not None:
        wait_until = min(timeout_at, running.started + handoff_seconds)
    try:
        status = await _wait(running.pump, wait_until)
        if status == "finished":
            return await _finish(running, redactor)
        if status == "deadline" and handoff_seconds is not None:
            process_id = await anyio.to_thread.run_sync(promote, running)
            if process_id is not None:
                return await anyio.to_thread.run_sync(
                    lambda: finish(running, redactor=redactor, promoted_process_id=process_id)
                )
            # Not promoted (cap reached or shutting down): wait to the timeout instead.
            status = await _wait(running.pump, timeout_at)
            if status == "finished":
                return await _finish(running, redactor)
        # Timed out (or woken at shutdown): stop the tree, then collect what it wrote.
        timed_out = status == "deadline"
        with anyio.CancelScope(shield=True):
            stopped = await anyio.to_thread.run_sync(
                lambda: _stop_and_finish(running, redactor, timed_out=timed_out, cancelled=not timed_out)
            )
        return stopped
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            running.pump.wake()  # a pump reading in a worker thread lets go
            if program is not None and time.monotonic() >= program.deadline:
                # The program ran out of time while it waited: the command goes on in the
                # background (the program's error names it) rather than being cut short.
                await anyio.to_thread.run_sync(running.pump.step, time.monotonic())  # (after the reader)
                process_id = await anyio.to_thread.run_sync(promote, running)
                if process_id is not None:
                    program.promoted.append(process_id)
                    raise
            await anyio.to_thread.run_sync(lambda: _stop_and_finish(running, redactor, cancelled=True))
        raise
    finally:
        if track is not None:
            track(running, False)


async def _wait(pump: Pump, deadline: float) -> PumpStatus:
    """Read on the event loop while output is small, then in a worker thread.

    Returns:
        How the pump stopped: finished, deadline reached, or woken.
    """
    # The wait ends at the deadline through a loop timer that ticks the pump (its fd turns
    # readable) rather than an anyio cancel scope, which costs ~20 µs a wait: a third of the
    # host's own work for a short command. The loop's clock is time.monotonic(), as deadlines.
    loop = asyncio.get_running_loop()
    while pump.bytes_read < _LOOP_BYTES:
        status = pump.step(deadline)
        if status is not None:
            return status
        limit = pump.wake_time(deadline)
        timer = loop.call_at(limit, pump.tick) if limit is not None else None
        try:
            await anyio.wait_readable(pump.fileno())
        finally:
            if timer is not None:
                timer.cancel()
    # Much output: keep the loop free.
    return await anyio.to_thread.run_sync(pump.run, deadline, abandon_on_cancel=True)


async def _finish(running: Running, redactor: Redactor) -> Outcome:
    """Shape a finished run in a worker thread: settling it stats the work tree's ``.git`` and
    the revision reads HEAD and refs, all of which the command could write (a FIFO, a link), so
    none of it runs on the event loop (one hop for all of it)."""
    return await anyio.to_thread.run_sync(lambda: finish(running, redactor=redactor))


def _stop_and_finish(
    running: Running, redactor: Redactor, *, timed_out: bool = False, cancelled: bool = False
) -> Outcome:
    running.terminate()
    # Waits for a cancelled call's abandoned pump thread (woken) to let go first.
    if running.pump.run(time.monotonic() + 5) != "finished":
        running.pump.force_finish()
    return finish(running, redactor=redactor, timed_out=timed_out, cancelled=cancelled)
