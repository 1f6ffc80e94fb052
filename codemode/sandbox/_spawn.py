"""Starting the exec helper with ``posix_spawn``: the one way a command process is created.

Standard library only: the background supervisor (a ``python -I -S`` process that does not
import the ``codemode`` package) loads this file by path and starts its command through the same
function as the host does. What the helper applies is decided by the fds it is given (see
``exec_helper_x86_64.S``): the host prepares them (:func:`codemode.sandbox.launch`), this module
only places them in the child.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import TypedDict

__all__ = ["NONE", "Layers", "Process", "spawn_helper"]

#: The helper's word for "no such fd" (that layer is not applied).
NONE = "-"
_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)


class Layers(TypedDict):
    """The prepared layers, as fds (see ``Confinement.fds``)."""

    helper_fd: int
    ruleset_fd: int | None
    seccomp_fd: int | None


class Process:
    """A started command: the part of ``subprocess.Popen`` callers use, plus its cgroup.

    Attributes:
        pid: The process id (the command itself: the helper executes it in place).
        args: The command's argv.
        returncode: None while it runs; its exit status, or ``-signal`` when a signal ended it.
        cgroup: The cgroup directory the command was started in, or None.
    """

    def __init__(self, pid: int, args: list[str], cgroup: str | None = None) -> None:
        self.pid = pid
        self.args = args
        self.cgroup = cgroup
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
    cgroup: str | None = None,
) -> Process:
    """Start ``argv`` (``program`` is its resolved path) through the exec helper, in a new session.

    The helper joins the cgroup, changes directory, applies the confinement when both
    ``ruleset_fd`` and ``seccomp_fd`` are given, closes every fd from 3 up and executes the
    command. SIGPIPE, SIGXFSZ, SIGHUP, SIGINT and SIGQUIT start with their default action.

    Args:
        helper_fd: The sealed memfd holding the helper.
        program: The command's executable (a path).
        argv: The command's argv.
        env: Its whole environment.
        cwd: Its working directory (the helper changes to it; empty keeps the caller's).
        stdio: fds for the command's 0, 1 and 2 (each at least 3), or None with ``terminal``.
        terminal: A terminal device path to open as fds 0-2 and controlling terminal.
        cgroup_procs_fd: An open ``cgroup.procs`` of the cgroup the command joins.
        ruleset_fd: The Landlock ruleset.
        seccomp_fd: The seccomp program (a memfd).
        cgroup: The cgroup directory, kept on the returned Process.

    Returns:
        The started process.

    Raises:
        OSError: ``posix_spawn`` failed (the helper reports its own failures on fd 2, exit 126).
        ValueError: Neither or both of ``stdio`` and ``terminal`` were given, or an fd is below 3.
    """
    layers = (cgroup_procs_fd, ruleset_fd, seccomp_fd)
    passed = [fd for fd in (helper_fd, *layers) if fd is not None]
    if (stdio is None) == (terminal is None):
        raise ValueError("give either stdio fds or a terminal path")
    if min(passed + list(stdio or ())) < 3:
        raise ValueError("spawn_helper needs every fd it passes to be 3 or above")
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
    if terminal is not None:
        # After setsid (which posix_spawn does first), opening a terminal without O_NOCTTY makes
        # it the controlling terminal.
        actions.append((os.POSIX_SPAWN_OPEN, 0, terminal, os.O_RDWR, 0))
        actions += [(os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2)]
    else:
        assert stdio is not None
        actions += [(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(stdio)]
    # dup2 of an fd onto itself clears close-on-exec: the helper sees the layers' fds as given.
    actions += [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in layers if fd is not None]
    helper = f"/proc/self/fd/{helper_fd}"
    words = [NONE if fd is None else str(fd) for fd in layers]
    pid = os.posix_spawn(
        helper,
        [helper, *words, cwd, program, *argv],
        env,
        file_actions=actions,
        setsid=True,
        setsigdef=_RESET_SIGNALS,
    )
    return Process(pid, list(argv), cgroup)
