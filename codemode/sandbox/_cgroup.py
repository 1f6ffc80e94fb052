"""A cgroup (v2) per command, so that stopping it ends every descendant, escaped ones included.

A process that calls ``setsid``, double-forks and clears its environment leaves its process
group and loses the marker variable, but it cannot leave its cgroup: the cgroup's ``cgroup.kill``
ends all of it at once. Commands join their cgroup in the exec helper, before they run.

Layout, under the cgroup v2 hierarchy of this host process (``<mount><own cgroup>``)::

    codemode/<owner>/<name>     one per command; <owner> groups them (a host, a session)

Where cgroup v2 is not mounted or not writable (not root, no delegation), :func:`cgroup_root`
returns None with a reason and the process manager falls back to process groups and the marker
variable (``codemode doctor`` says which is in use). One controller is used: ``pids``, so a
fork bomb stops at ``pids.max`` (:data:`PIDS_MAX_ENV`, default :data:`DEFAULT_PIDS_MAX`) rather
than at the run's wall time. Where ``pids`` is bound to a cgroup v1 hierarchy (a hybrid host), the
limit lives in a v1 twin at the same relative path (:func:`._spawn.pids_twin`), which the launcher
joins too.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import signal
import time
from dataclasses import dataclass

from codemode.sandbox._spawn import pids_twin

__all__ = [
    "DEFAULT_PIDS_MAX",
    "CgroupRoot",
    "cgroup_empty",
    "cgroup_join",
    "cgroup_kill",
    "cgroup_members",
    "cgroup_remove",
    "cgroup_root",
    "pids_limit_path",
    "pids_refused",
    "pids_refused_note",
]

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
#: Set to ``1`` to behave as if cgroups were unavailable (tests, users).
DISABLE_ENV = "CODEMODE_NO_CGROUPS"
#: How many tasks (processes and threads) one command may hold at once; "max" for no limit.
PIDS_MAX_ENV = "CODEMODE_PIDS_MAX"
DEFAULT_PIDS_MAX = 512


def _pids_max() -> str:
    value = os.environ.get(PIDS_MAX_ENV, "").strip() or str(DEFAULT_PIDS_MAX)
    return value if value == "max" or (value.isdigit() and int(value) > 0) else str(DEFAULT_PIDS_MAX)


def pids_limit_path(path: str) -> str | None:
    """The ``pids.max`` file that limits the command cgroup ``path``, or None without one."""
    own = os.path.join(path, "pids.max")
    if os.path.exists(own):
        return own
    twin = pids_twin(path)
    if twin is not None and os.path.exists(os.path.join(twin, "pids.max")):
        return os.path.join(twin, "pids.max")
    return None


def pids_refused(path: str | None) -> tuple[int, str] | None:
    """How often the kernel refused a fork in the command cgroup ``path`` because of its pids
    limit (``max N`` of ``pids.events``, counted since the cgroup was made) and that limit;
    None without a pids controller (or without a cgroup)."""
    limit_file = None if path is None else pids_limit_path(path)
    if limit_file is None:
        return None
    try:
        with open(limit_file) as f:
            limit = f.read().strip()
        with open(os.path.join(os.path.dirname(limit_file), "pids.events")) as f:
            events = dict(line.split(None, 1) for line in f.read().splitlines() if " " in line)
        return int(events.get("max", "0")), limit
    except (OSError, ValueError):
        return None


def pids_refused_note(path: str | None, before: int) -> str | None:
    """One line for the result when a command's forks were refused at its pids limit (more
    refusals in cgroup ``path`` than ``before``, the count when it started); else None."""
    now = pids_refused(path)
    if now is None or now[0] <= before:
        return None
    count, limit = now[0] - before, now[1]
    return (
        f"fork failed {count} time{'s' if count != 1 else ''}: the command hit its limit of {limit} "
        "processes (and threads) at once; run fewer at a time"
    )


def _limit_pids(path: str, pids_max: int | None = None) -> None:
    """Give the new cgroup ``path`` its pids limit (in its v1 twin on a hybrid host): ``pids_max``,
    else a command's (`PIDS_MAX_ENV`).

    Raises:
        OSError: A pids controller is there but the limit cannot be set.
    """
    limit = (str(pids_max) if pids_max is not None else _pids_max()).encode()
    own = os.path.join(path, "pids.max")
    if not os.path.exists(own):
        twin = pids_twin(path)
        if twin is None:
            return  # no pids controller on this host: the limit is the run's wall time
        os.makedirs(twin, exist_ok=True)
        own = os.path.join(twin, "pids.max")
    with open(own, "wb") as f:
        f.write(limit)


def _enable_pids(directory: str) -> None:
    """Let the children of ``directory`` (cgroup v2) have ``pids.max`` when the controller is
    available there; nothing otherwise (a hybrid host uses the v1 twin)."""
    try:
        with open(os.path.join(directory, "cgroup.controllers")) as f:
            if "pids" not in f.read().split():
                return
        with open(os.path.join(directory, "cgroup.subtree_control"), "w") as f:
            f.write("+pids")
    except OSError:
        return


@dataclass(frozen=True)
class CgroupRoot:
    """Where this host's command cgroups live.

    Attributes:
        path: The ``codemode`` directory (exists), or None when unavailable.
        reason: Why cgroups are unavailable (None when available).
    """

    path: str | None
    reason: str | None = None

    def make(self, owner: str, name: str, *, pids_max: int | None = None) -> str:
        """Create (or reuse, when it exists and is empty) the cgroup ``owner/name``, holding at
        most ``pids_max`` tasks (default: a command's limit, `PIDS_MAX_ENV`).

        Raises:
            OSError: It cannot be created.
        """
        assert self.path is not None
        parent = os.path.join(self.path, _SAFE.sub("_", owner))
        path = os.path.join(parent, _SAFE.sub("_", name))
        for attempt in range(3):
            try:
                os.mkdir(parent)
            except FileExistsError:
                pass
            else:
                _enable_pids(parent)
            try:
                os.mkdir(path)
            except FileExistsError:
                pass
            except FileNotFoundError:  # the owner directory was just removed as empty: again
                if attempt == 2:
                    raise
                continue
            _limit_pids(path, pids_max)
            return path
        return path

    def owners(self) -> list[str]:
        """The owner directories that exist now."""
        if self.path is None:
            return []
        with contextlib.suppress(OSError):
            return sorted(e.name for e in os.scandir(self.path) if e.is_dir())
        return []

    def children(self, owner: str) -> list[str]:
        """The command cgroups of ``owner``."""
        if self.path is None:
            return []
        parent = os.path.join(self.path, _SAFE.sub("_", owner))
        with contextlib.suppress(OSError):
            return sorted(e.path for e in os.scandir(parent) if e.is_dir())
        return []


def _cgroup2_mount() -> str | None:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                return left.split(" ")[4]
    return None


def _own_cgroup() -> str | None:
    with open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


@functools.cache
def _probe(pid: int) -> CgroupRoot:
    if os.environ.get(DISABLE_ENV) == "1":
        return CgroupRoot(None, f"turned off ({DISABLE_ENV}=1)")
    try:
        mount, own = _cgroup2_mount(), _own_cgroup()
    except OSError as exc:
        return CgroupRoot(None, f"cannot read this process's cgroups ({exc.strerror})")
    if mount is None or own is None:
        return CgroupRoot(None, "no cgroup v2 hierarchy is mounted")
    base = os.path.join(mount, own.lstrip("/"), "codemode")
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(base)
        probe = os.path.join(base, f"probe-{pid}")
        with contextlib.suppress(FileExistsError):
            os.mkdir(probe)
        has_kill = os.path.exists(os.path.join(probe, "cgroup.kill"))
        os.rmdir(probe)
        _enable_pids(base)
    except OSError as exc:
        return CgroupRoot(None, f"cannot create cgroups under {os.path.dirname(base)} ({exc.strerror})")
    if not has_kill:
        return CgroupRoot(None, "this kernel's cgroups have no cgroup.kill (Linux 5.14 or later)")
    return CgroupRoot(base)


def cgroup_root() -> CgroupRoot:
    """This host's command cgroup root, probed once per process."""
    return _probe(os.getpid())


def cgroup_join(path: str, pid: int) -> None:
    """Move the process ``pid`` (all its threads) into the cgroup ``path``, and into its pids
    twin where the host has one (the launcher does the same for a command as it starts).

    Raises:
        OSError: It cannot be moved.
    """
    for directory in (path, pids_twin(path)):
        if directory is not None and os.path.isdir(directory):
            with open(os.path.join(directory, "cgroup.procs"), "w") as f:
                f.write(str(pid))


def cgroup_members(path: str) -> list[int]:
    """Pids of the processes in the cgroup (empty when it is gone)."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def cgroup_empty(path: str) -> bool:
    """Whether no process is in the cgroup (one read of ``cgroup.procs``; the hot path of
    every foreground command, so plain fds rather than a text file object)."""
    try:
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        return os.read(fd, 1) == b""
    except OSError:
        return True
    finally:
        os.close(fd)


def _populated(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.events")) as f:
            return "populated 1" in f.read()
    except OSError:
        return False


def cgroup_kill(path: str, *, grace_seconds: float = 0.0, wait_seconds: float = 5.0) -> int:
    """End every process in the cgroup: SIGTERM, ``grace_seconds``, then ``cgroup.kill``.

    Args:
        path: The cgroup directory.
        grace_seconds: How long the processes get to exit after SIGTERM (0: kill at once).
        wait_seconds: How long to wait for the kernel to report the cgroup empty.

    Returns:
        How many processes were still there for ``cgroup.kill``.
    """
    if grace_seconds > 0:
        members = cgroup_members(path)
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        delay = 0.005
        while members and _populated(path) and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    left = len(cgroup_members(path))
    if left:
        with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
        deadline = time.monotonic() + wait_seconds
        while _populated(path) and time.monotonic() < deadline:
            time.sleep(0.002)
    return left


def cgroup_remove(path: str) -> bool:
    """Remove an empty cgroup (and its owner directory when that is empty too).

    Returns:
        False when it still holds processes (EBUSY) and was kept.
    """
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return False
        raise
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))
    twin = pids_twin(path)
    if twin is not None:  # its processes are gone with the v2 cgroup's
        with contextlib.suppress(OSError):
            os.rmdir(twin)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(twin))
    return True
