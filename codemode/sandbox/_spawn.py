"""Starting the launcher with ``posix_spawn``: the one way a command process is created.

Standard library only: the background supervisor (a ``python -I -S`` process that does not
import the rest of the ``codemode`` package) imports this module and starts its command through the same
function as the host does. What the launcher applies is decided by the fds and words it is given
(see ``launcher.c``): the host prepares them (:func:`codemode.sandbox.launch`), this module
only places them in the child.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import NotRequired, TypedDict

__all__ = ["Layers", "Process", "pids_twin", "spawn_helper"]
_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)


class Layers(TypedDict):
    """The prepared layers, as fds (see ``Confinement.fds``); ``helper_fd`` is the launcher's."""

    helper_fd: int
    ruleset_fd: int | None
    seccomp_fd: int | None
    shm_fd: NotRequired[int | None]
    net_fd: NotRequired[int | None]


class Process:
    """A started command: the part of ``subprocess.Popen`` callers use, plus its cgroup.

    Attributes:
        pid: The process id (the command itself: the helper executes it in place).
        args: The command's argv.
        returncode: None while it runs; its exit status, or ``-signal`` when a signal ended it.
        cgroup: The cgroup directory the command was started in, or None.
        network_refusals: With a network allowlist, the connections the host's proxy refused
            (``host:port (reason)``, appended while it runs); None otherwise.
    """

    def __init__(self, pid: int, args: list[str], cgroup: str | None = None) -> None:
        self.pid = pid
        self.args = args
        self.cgroup = cgroup
        self.network_refusals: list[str] | None = None
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """Reap the process if it has exited; return ``returncode``."""
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere, as subprocess assumes success
                    self.returncode = 0
                else:
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to exit and return ``returncode``.

        Raises:
            subprocess.TimeoutExpired: It is still running after ``timeout`` seconds.
        """
        if self.poll() is not None:
            assert self.returncode is not None
            return self.returncode
        if timeout is not None:
            try:
                pidfd = os.pidfd_open(self.pid)
            except ProcessLookupError:
                pidfd = None
            if pidfd is not None:
                try:
                    poller = select.poll()
                    poller.register(pidfd, select.POLLIN)
                    ready = poller.poll(max(timeout, 0.0) * 1000)
                finally:
                    os.close(pidfd)
                if not ready:
                    raise subprocess.TimeoutExpired(self.args, timeout)
        with self._lock:
            if self.returncode is None:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    self.returncode = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    self.returncode = 0
            return self.returncode


def _mounts() -> tuple[str | None, str | None]:
    """The cgroup v2 mount point and the cgroup v1 ``pids`` mount point (None when absent)."""
    unified = pids = None
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.readlines()
    except OSError:
        return None, None
    for line in lines:
        left, _, right = line.rstrip("\n").partition(" - ")
        fields = right.split(" ")
        if not fields or len(left.split(" ")) < 5:
            continue
        point = left.split(" ")[4]
        if fields[0] == "cgroup2" and unified is None:
            unified = point
        elif fields[0] == "cgroup" and len(fields) > 2 and "pids" in fields[2].split(","):
            pids = pids or point
    return unified, pids


_mount_cache: dict[int, tuple[str | None, str | None]] = {}


def pids_twin(cgroup: str) -> str | None:
    """Where a command's cgroup v2 directory has its ``pids`` twin on a hybrid host.

    On a host whose ``pids`` controller is bound to a cgroup v1 hierarchy, the pids limit of a
    command lives in a v1 cgroup at the same path relative to that hierarchy's mount as the
    command's v2 cgroup (``_cgroup.CgroupRoot.make`` creates it). None without such a hierarchy.
    """
    mounts = _mount_cache.get(os.getpid())
    if mounts is None:
        mounts = _mount_cache[os.getpid()] = _mounts()
    unified, pids = mounts
    if unified is None or pids is None:
        return None
    relative = os.path.relpath(cgroup, unified)
    if relative.startswith(".."):
        return None
    return os.path.join(pids, relative)


def _open_twin(cgroup: str | None) -> int | None:
    """An O_WRONLY fd of the pids twin's ``cgroup.procs`` when the twin exists, else None."""
    twin = pids_twin(cgroup) if cgroup is not None else None
    if twin is None:
        return None
    try:
        return os.open(os.path.join(twin, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:  # no twin: the v2 cgroup holds the limit, or there is none
        return None


def spawn_helper(
    helper_fd: int,
    program: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    stdio: tuple[int, int, int] | None = None,
    terminal: str | None = None,
    cgroup_procs_fd: int | None = None,
    ruleset_fd: int | None = None,
    seccomp_fd: int | None = None,
    shm_fd: int | None = None,
    net_fd: int | None = None,
    cgroup: str | None = None,
) -> Process:
    """Start ``argv`` (``program`` is its resolved path) through the launcher, in a new session.

    The launcher joins the cgroup (and its pids twin, see :func:`pids_twin`), gives the
    command the session's own ``/dev/shm`` (``shm_fd``), changes directory, applies the confinement when both
    ``ruleset_fd`` and ``seccomp_fd`` are given, closes every fd from 3 up and executes the
    command. SIGPIPE, SIGXFSZ, SIGHUP, SIGINT and SIGQUIT start with their default action.

    Args:
        helper_fd: The sealed memfd holding the launcher.
        program: The command's executable (a path).
        argv: The command's argv.
        env: Its whole environment.
        cwd: Its working directory (the launcher changes to it; empty keeps the caller's).
        stdio: fds for the command's 0, 1 and 2 (each at least 3), or None with ``terminal``.
        terminal: A terminal device path to open as fds 0-2 and controlling terminal.
        cgroup_procs_fd: An open ``cgroup.procs`` of the cgroup the command joins.
        ruleset_fd: The Landlock ruleset.
        seccomp_fd: The seccomp program (a memfd).
        shm_fd: An O_PATH fd of the session's ``/dev/shm`` directory, bind-mounted on
            ``/dev/shm`` in a mount namespace of the command's own (None: the host's).
        net_fd: The command's end of the socketpair to the host's proxy: the command gets a
            network namespace of its own with only the proxy in it (None: the host's network).
        cgroup: The cgroup directory, kept on the returned Process.

    Returns:
        The started process.

    Raises:
        OSError: ``posix_spawn`` failed (the launcher reports its own failures on fd 2, exit 126).
        ValueError: Neither or both of ``stdio`` and ``terminal`` were given, or an fd is below 3.
    """
    if (stdio is None) == (terminal is None):
        raise ValueError("give either stdio fds or a terminal path")
    twin_fd = _open_twin(cgroup) if cgroup_procs_fd is not None else None
    try:
        cgroups = [fd for fd in (cgroup_procs_fd, twin_fd) if fd is not None]
        layers = [*cgroups, *(fd for fd in (ruleset_fd, seccomp_fd, shm_fd, net_fd) if fd is not None)]
        if min([helper_fd, *layers, *(stdio or ())]) < 3:
            raise ValueError("spawn_helper needs every fd it passes to be 3 or above")
        actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
        if terminal is not None:
            # After setsid (which posix_spawn does first), opening a terminal without O_NOCTTY
            # makes it the controlling terminal.
            actions.append((os.POSIX_SPAWN_OPEN, 0, terminal, os.O_RDWR, 0))
            actions += [(os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2)]
        else:
            assert stdio is not None
            actions += [(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(stdio)]
        # dup2 of an fd onto itself clears close-on-exec: the launcher sees the fds as given.
        actions += [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in layers]
        words = [f"cgroup={fd}" for fd in cgroups]
        if shm_fd is not None:
            words.append(f"shm={shm_fd}")
        if net_fd is not None:
            words.append(f"net={net_fd}")
        if ruleset_fd is not None and seccomp_fd is not None:
            words += [f"ruleset={ruleset_fd}", f"seccomp={seccomp_fd}"]
        elif ruleset_fd is not None or seccomp_fd is not None:
            raise ValueError("give both ruleset_fd and seccomp_fd (confined) or neither (full-access)")
        if cwd:
            words.append(f"cwd={cwd}")
        launcher = f"/proc/self/fd/{helper_fd}"
        pid = os.posix_spawn(
            launcher,
            [launcher, *words, "--", program, *argv],
            env,
            file_actions=actions,
            setsid=True,
            setsigdef=_RESET_SIGNALS,
        )
    finally:
        if twin_fd is not None:
            os.close(twin_fd)
    return Process(pid, list(argv), cgroup)
