"""Finding and ending every process a command started, including ones that left its group.

A command's processes are found four ways: its cgroup (where the kernel allows one per command:
nothing escapes it, and ``cgroup.kill`` ends it all), its process group, the descendants of its
root process, and the marker variable (``CODEMODE_PROCESS_ID``) every process we start carries in
its environment. Without a cgroup, a process that scrubbed its environment and left the group
can escape.

Stopping freezes what it finds (SIGSTOP) before killing it, so a fork storm cannot outrun it.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Iterable

from codemode.sandbox import cgroup_kill, cgroup_members, is_running, proc_stat, process_start

MARKER_VAR = "CODEMODE_PROCESS_ID"

# Processes are named by pid and start (clock ticks since boot, `process_start`): the wall
# clock's boot time, which psutil's create_time() adds, moves when the clock is stepped.


def own_start() -> float | None:
    """This process's start, read once per process (a forked child reads its own)."""
    return _start_of(os.getpid())


@functools.cache
def _start_of(pid: int) -> float | None:
    started = process_start(pid)
    return None if started is None else float(started)


def is_same_process(pid: int, started: float) -> bool:
    """True when ``pid`` is alive (not a zombie) and started at ``started`` (`process_start`)."""
    return is_running(pid, round(started))


def _is_zombie(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is None or stat.state in ("Z", "X")


def find_members(marker: str, pgid: int | None = None, root_pid: int | None = None) -> set[int]:
    """Pids of live (non-zombie) processes that belong to one command.

    Args:
        marker: The value of ``CODEMODE_PROCESS_ID`` given to the command.
        pgid: The command's process group, when it is known to still be ours.
        root_pid: The command's root process, when it is known to still be ours.
    """
    needle = f"{MARKER_VAR}={marker}\0".encode()
    me = os.getpid()
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        try:
            if pgid is not None and os.getpgid(pid) == pgid:
                found.add(pid)
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read():
                    found.add(pid)
        except OSError:
            continue
    if root_pid is not None:
        import psutil

        try:
            root = psutil.Process(root_pid)
            found.add(root_pid)
            found.update(child.pid for child in root.children(recursive=True))
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            pass
    return {pid for pid in found if pid != me and not _is_zombie(pid)}


def markers_with_prefix(prefix: str) -> set[str]:
    """Values of ``CODEMODE_PROCESS_ID`` starting with ``prefix`` among live processes."""
    needle = f"{MARKER_VAR}={prefix}".encode()
    found: set[str] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                data = f.read()
        except OSError:
            continue
        start = data.find(needle)
        if start < 0 or (start > 0 and data[start - 1] != 0):
            continue
        end = data.find(b"\0", start)
        value = data[start + len(MARKER_VAR) + 1 : end if end >= 0 else len(data)]
        found.add(value.decode(errors="replace"))
    return found


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def terminate_tree(
    marker: str,
    *,
    pgid: int | None = None,
    root_pid: int | None = None,
    grace_seconds: float = 2.0,
    cgroup: str | None = None,
) -> int:
    """Ask a command's processes to exit, then kill whatever is left, descendants included.

    SIGTERM goes to the process group and to every member found; after ``grace_seconds``
    the survivors are frozen with SIGSTOP (repeatedly, until no new process appears) and
    then killed with SIGKILL. With a ``cgroup``, its members are asked too and ``cgroup.kill``
    ends whatever is left in it. The caller must make sure ``pgid`` and ``root_pid`` still name
    its own processes (identity checked, or the root not yet reaped).

    Returns:
        How many processes were still alive after the grace period (and got SIGKILL).
    """
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except OSError:
            pass
    members = find_members(marker, pgid, root_pid) | set(cgroup_members(cgroup) if cgroup else ())
    _signal_all(members, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    delay = 0.005
    while members and time.monotonic() < deadline:
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
        members = find_members(marker, pgid, root_pid) | set(cgroup_members(cgroup) if cgroup else ())
    killed = len(members)
    if cgroup:
        cgroup_kill(cgroup)
    for _ in range(200):
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        frozen: set[int] = set()
        while True:
            members = find_members(marker, pgid, root_pid) - frozen
            if not members:
                break
            _signal_all(members, signal.SIGSTOP)
            frozen |= members
        if not frozen:
            break
        _signal_all(frozen, signal.SIGKILL)
        # Let the kernel tear them down before looking again.
        wait_deadline = time.monotonic() + 1.0
        while time.monotonic() < wait_deadline and any(not _is_zombie(pid) for pid in frozen):
            time.sleep(0.002)
    return killed
