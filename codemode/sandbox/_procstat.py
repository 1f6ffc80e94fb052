"""A process's identity: its pid and its start time in clock ticks since boot.

A pid alone names another process once its owner has exited and the number came round again;
with the start time it does not. The start time is the ``starttime`` field of
``/proc/<pid>/stat``, counted from boot, fixed for the life of the process. psutil's
``create_time()`` adds the boot time to it, which the kernel derives from the wall clock
(``btime``, whole seconds): when the clock is stepped (NTP, a virtual machine resumed) it moves,
and a live process's ``create_time()`` no longer equals the one recorded at its start, so it
would be taken for dead and its work for orphaned. The tick count never moves.

A pid means something only in its pid namespace during one boot: an identity written where
other machines or containers read it (a shared database) carries its place too
(``<pid>t<start>@<place>``, `placed_identity`), and only a process of the same place judges it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import NamedTuple


class ProcStat(NamedTuple):
    """What `proc_stat` reads: the one-letter state (``R``, ``S``, ``Z``...) and the start."""

    state: str
    started: int  # clock ticks since boot


def proc_stat(pid: int) -> ProcStat | None:
    """State and start of ``pid``, or None when no such process exists (or it is unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces and parentheses: the fields
    # that matter follow the last ")".
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return ProcStat(fields[0].decode(errors="replace"), int(fields[19]))


def process_start(pid: int) -> int | None:
    """Start of ``pid`` in clock ticks since boot, or None when no such process exists."""
    stat = proc_stat(pid)
    return None if stat is None else stat.started


def is_running(pid: int, started: int) -> bool:
    """Whether ``pid`` is alive (not a zombie) and is the process that started at ``started``."""
    stat = proc_stat(pid)
    return stat is not None and stat.started == started and stat.state not in ("Z", "X")


def process_identity(pid: int | None = None) -> str:
    """``<pid>t<start>`` of ``pid`` (this process by default): names a process for as long as
    it runs and never another; see `identity_is_gone`. Empty when the process is gone."""
    pid = os.getpid() if pid is None else pid
    started = process_start(pid)
    return "" if started is None else f"{pid}t{started}"


@functools.cache
def process_place() -> str:
    """Where this process's pids mean what they say: its kernel's boot and its pid namespace
    (12 hex digits of their SHA-256). Another machine, another boot or another container's pid
    namespace has another place."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return "unknown"
    return hashlib.sha256(boot + b":%d" % namespace).hexdigest()[:12]


def placed_identity(pid: int | None = None) -> str:
    """``<pid>t<start>@<place>`` (`process_identity`, `process_place`): names a process to
    every machine that reads it. Empty when the process is gone."""
    identity = process_identity(pid)
    return f"{identity}@{process_place()}" if identity else ""


def identity_is_gone(identity: str) -> bool:
    """Whether the process named by a `process_identity` (or a `placed_identity` of this place)
    no longer runs. A string of another form (from an older version) or of another place
    (machine, boot or pid namespace) is never judged gone here: what it owns is left alone."""
    identity, at, place = identity.partition("@")
    if at and place != process_place():
        return False
    pid, sep, started = identity.partition("t")
    if not (sep and pid.isdigit() and started.isdigit()):
        return False
    return not is_running(int(pid), int(started))
