"""The host's side of the zygote: the process that forks engine workers (engine mode ``process``).

One zygote per host process, started on first use (or early: `start_zygote_soon`); it forks
each worker, kills only workers it forked, and reports their ends. Each worker gets a cgroup of
its own (a bound on its tasks), removed when it ends, and swept when a host that was killed
left some. `crashed` and `describe_status` say how a worker ended, for its program's error.
"""

from __future__ import annotations

import array
import contextlib
import json
import logging
import os
import queue
import signal
import socket
import threading

from codemode import _zygote_start
from codemode.engine import _wire
from codemode.engine._guest import GuestError
from codemode.sandbox import cgroup_join, cgroup_remove, cgroup_root

log = logging.getLogger("codemode.engine")

START_SECONDS = 30.0  # a zygote or a worker that has not said it is ready by then is broken
# Tasks a worker's cgroup may hold: its four threads (the program's, the relay, the watchdog,
# the keeper that makes and frees contexts at idle priority) and room to spare; its seccomp
# allowlist has no clone of a process, so this is the second wall.
_WORKER_PIDS = 16


class EngineUnavailable(Exception):
    """Process mode cannot run here (the zygote failed to start or to confine itself)."""


class Zygote:
    """The process that forks workers: one per host process, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one fork request at a time
        try:  # one `codemode run` started early (it booted while the host imported), or a new one
            self.process, self._sock = _zygote_start.take()
        except OSError as exc:
            raise EngineUnavailable(f"the engine's zygote did not start: {exc}") from None
        self._replies: queue.SimpleQueue[_wire.ZygoteReport] = queue.SimpleQueue()
        self._died: dict[int, int] = {}
        self._died_cond = threading.Condition()
        self._sock.settimeout(START_SECONDS)
        try:
            hello = json.loads(self._sock.recv(65536) or b"null")
        except (OSError, ValueError) as exc:
            self.process.kill()
            raise EngineUnavailable(f"the engine's zygote did not start: {exc}") from None
        finally:
            self._sock.settimeout(None)
        if not isinstance(hello, dict) or "hello" not in hello:
            self.process.kill()
            raise EngineUnavailable("the engine's zygote did not start")
        self.problem: str | None = hello.get("problem")
        self.landlock: str | None = hello.get("landlock")  # why Landlock is missing, or None
        if self.landlock is not None:
            log.warning("engine workers run without Landlock (seccomp still seals them): %s", self.landlock)
        threading.Thread(target=self._read, name="codemode-zygote", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._replies.put({"gone": True})
                with self._died_cond:
                    self._died_cond.notify_all()
                return
            message: _wire.ZygoteReport = json.loads(data)
            if "died" in message:
                pid = int(message["died"])
                _drop_cgroup(pid)
                with self._died_cond:
                    self._died[pid] = int(message["status"])
                    self._died_cond.notify_all()
            else:
                self._replies.put(message)

    def fork(
        self, ctl: socket.socket, sync: socket.socket, results: socket.socket, limits: _wire.WorkerLimits
    ) -> int:
        """Fork a worker holding these three sockets; its pid (blocking: call in a worker thread).

        Raises:
            EngineUnavailable: The zygote is gone.
        """
        fds = array.array("i", [ctl.fileno(), sync.fileno(), results.fileno()])
        with self._lock:
            try:
                self._sock.sendmsg(
                    [json.dumps(_wire.ZygoteOrder(fork=limits)).encode()],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)],
                )
            except OSError as exc:
                raise EngineUnavailable(f"the engine's zygote is gone: {exc}") from None
            reply = self._replies.get()
        if "forked" not in reply:
            raise EngineUnavailable("the engine's zygote is gone")
        return int(reply["forked"])

    def kill(self, pid: int) -> None:
        """Kill one of the zygote's live workers (it refuses any other pid)."""
        try:
            self._sock.send(json.dumps(_wire.ZygoteOrder(kill=pid)).encode())
        except OSError:
            pass

    def wait_status(self, pid: int, timeout: float) -> int | None:
        """The wait status of a worker that ended, once the zygote reported it (blocking)."""
        with self._died_cond:
            self._died_cond.wait_for(lambda: pid in self._died or not self.alive, timeout)
            return self._died.pop(pid, None)


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def zygote() -> Zygote:
    """The host process's zygote, started (or restarted, if it died) now.

    Raises:
        EngineUnavailable: It cannot start, or cannot confine itself.
    """
    global _zygote
    with _zygote_lock:
        if _zygote is None or not _zygote.alive:
            _zygote = Zygote()
        if _zygote.problem is not None:
            raise EngineUnavailable(
                f"engine workers cannot be confined here ({_zygote.problem}); "
                "run programs in threads instead (engine='thread', --engine thread)"
            )
        return _zygote


_cgroups: dict[int, str] = {}  # live worker pid -> its cgroup
_cgroups_lock = threading.Lock()
_swept = False


def give_cgroup(pid: int) -> None:
    """Move the new worker ``pid`` into a cgroup of its own, ``codemode/engine-<host pid>/w<pid>``
    (at most `_WORKER_PIDS` tasks; ``cgroup.kill`` ends it whole), before it runs a program
    (blocking). Where cgroups are unavailable (`cgroup_root` says why, and ``codemode doctor``)
    it runs without one.

    Raises:
        EngineUnavailable: cgroups are available but this one cannot be made or joined (the
            worker is killed: nothing of a program ran in it).
    """
    global _swept
    root = cgroup_root()
    if root.path is None:
        return
    if not _swept:
        _swept = True
        sweep_cgroups()
    try:
        path = root.make(f"engine-{os.getpid()}", f"w{pid}", pids_max=_WORKER_PIDS)
        cgroup_join(path, pid)
    except OSError as exc:
        zygote().kill(pid)
        raise EngineUnavailable(f"an engine worker's cgroup could not be made or joined ({exc})") from None
    with _cgroups_lock:
        _cgroups[pid] = path


def _drop_cgroup(pid: int) -> None:
    """The worker ``pid`` ended (the zygote reaped it): remove its cgroup (on the zygote's
    reader thread)."""
    with _cgroups_lock:
        path = _cgroups.pop(pid, None)
    if path is not None:
        try:
            cgroup_remove(path)
        except OSError as exc:
            log.warning("could not remove the cgroup %s of engine worker %d: %s", path, pid, exc)


def sweep_cgroups() -> None:
    """Remove the worker cgroups that hosts which no longer run left (killed: no one removed
    them); those still holding a process stay. Once per host process, at its first worker."""
    root = cgroup_root()
    for owner in root.owners():
        host = owner.removeprefix("engine-")
        if owner == host or not host.isdigit() or int(host) == os.getpid() or _alive(int(host)):
            continue
        for path in root.children(owner):
            with contextlib.suppress(OSError):
                cgroup_remove(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def worker_cgroup(pid: int) -> str | None:
    """The cgroup of a live worker (tests, doctor), or None."""
    with _cgroups_lock:
        return _cgroups.get(pid)


def kill_worker(pid: int) -> None:
    """Have the zygote kill its worker ``pid`` (it refuses any other pid); from any thread,
    without starting a zygote (a worker of one that ended is gone with its sockets)."""
    held = _zygote
    if held is not None and held.alive:
        held.kill(pid)


def worker_report() -> dict[str, object]:
    """How engine workers are held on this machine (``codemode doctor``): starts the zygote."""
    from codemode.sandbox import WORKER_ALLOWED

    try:
        held = zygote()
    except EngineUnavailable as exc:
        return {"available": False, "problem": str(exc)}
    root = cgroup_root()
    return {
        "cgroup": f"one per worker, at most {_WORKER_PIDS} tasks"
        if root.path is not None
        else f"none ({root.reason})",
        "available": True,
        "identity": "uid nobody, no capabilities, no_new_privs" if os.geteuid() == 0 else "no_new_privs",
        "landlock": "no file, TCP, signal or abstract socket" if held.landlock is None else held.landlock,
        "seccomp": f"allowlist of {len(set(WORKER_ALLOWED.values()))} syscalls (no open, socket, exec, clone)",
    }


def start_zygote_soon() -> None:
    """Start the host process's zygote now, on a thread of its own, unless it runs: a host
    opening in process mode has it ready when its first program asks for a worker. A failure
    is left for that program's own `zygote` call (which tries again and says why)."""
    if _zygote is None or not _zygote.alive:
        threading.Thread(target=_start_quietly, name="codemode-zygote-start", daemon=True).start()


def _start_quietly() -> None:
    with contextlib.suppress(EngineUnavailable):
        zygote()


def describe_status(status: int | None) -> str:
    """How a worker ended, in words: "killed by SIGSEGV", "exited with status 70"."""
    if status is None:
        return "ended"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"was killed by {name}"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return "ended"


def crashed(how: str) -> GuestError:
    """The program's error when its worker died under it."""
    return GuestError(
        "engine_crashed",
        "EngineCrashed",
        f"the engine's worker process {how} while running the program; nothing of the program's "
        "state is left (its variables, its calls in flight); the host goes on. Run the program "
        "again, or change what made the engine fail",
    )
