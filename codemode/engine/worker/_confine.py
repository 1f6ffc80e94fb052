"""How an engine worker holds itself before it runs any program: the steps, in the order they apply.

A worker runs JavaScript a model wrote in QuickJS, which is C: the design assumes an exploit of
the engine is possible and makes it hold nothing. The zygote, before it forks any worker:

1. drops root (every capability in the bounding set, then uid and gid ``nobody``) and sets
   no_new_privs;
2. restricts itself with a Landlock ruleset that handles every filesystem right, TCP bind and
   connect, and the abstract-socket and signal scopes, with no rule: nothing of the filesystem,
   no TCP, no signal or abstract socket outside itself.

Each worker, once forked, then sets its rlimits (address space, CPU, no files, no core), makes
its threads, and seals itself with a seccomp allowlist (`codemode.sandbox._seccomp.WORKER_ALLOWED`:
its sockets, memory, futexes, clocks, exit; no open, no socket, no exec, no clone), applied to
all its threads at once (TSYNC). Its only file descriptors are its three sockets to the host (and the eventfds and epoll it made).

The zygote says in its first message what it could not apply. Without the identity steps the
host refuses process mode (programs fail with a message that says so); without Landlock (an
older kernel) workers still run, sealed by seccomp, which alone refuses every open, socket and
exec, and the host logs the missing layer once (`codemode doctor` shows it).
"""

from __future__ import annotations

import ctypes
import os
import resource

from codemode.sandbox import _landlock, _seccomp

_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_SYS_SECCOMP = 317
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_NOBODY = 65534


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _prctl(option: int, arg: int) -> int:
    ctypes.set_errno(0)
    result = int(_landlock.prctl_fn()(option, arg, 0, 0, 0))
    return 0 if result == 0 else ctypes.get_errno()


def drop_identity() -> None:
    """No capability left, uid/gid ``nobody`` when started as root, and no_new_privs.

    Raises:
        OSError: A step failed (the zygote then refuses to fork workers).
    """
    if os.geteuid() == 0:
        for cap in range(64):
            if _prctl(_PR_CAPBSET_DROP, cap) != 0:
                break  # EINVAL: past the last capability this kernel knows
        os.setgroups([])
        os.setresgid(_NOBODY, _NOBODY, _NOBODY)
        os.setresuid(_NOBODY, _NOBODY, _NOBODY)  # clears the permitted and effective sets
    err = _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if err:
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")


def landlock_nothing() -> str | None:
    """Restrict this process (one thread) with a Landlock ruleset that grants nothing.

    Returns:
        None when applied, else why it could not be.
    """
    status = _landlock.landlock_status()
    abi = status.abi
    if abi == 0:
        return f"Landlock is unavailable: {status.reason}"
    attr = _landlock.RulesetAttr(
        _landlock.mask_for(_landlock.FS_RIGHTS, abi),
        _landlock.mask_for(_landlock.NET_RIGHTS, abi),
        _landlock.mask_for(_landlock.SCOPES, abi),
    )
    try:
        fd = _landlock.create_ruleset(attr, _landlock.ruleset_attr_size(abi), 0)
    except OSError as exc:
        return str(exc)
    try:
        ctypes.set_errno(0)
        if _landlock.syscall_fn()(ctypes.c_long(_landlock.SYS_RESTRICT_SELF), ctypes.c_long(fd), 0) != 0:
            err = ctypes.get_errno()
            return f"landlock_restrict_self: {os.strerror(err)}"
    finally:
        os.close(fd)
    return None


def set_limits(address_space_bytes: int, cpu_seconds: int) -> None:
    """The worker's rlimits: address space, CPU in all (a backstop: the watchdog keeps each
    program's own limit), no file it could create or grow, no core dump, few descriptors."""
    resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))


def seal() -> None:
    """Install the seccomp allowlist on every thread of this process.

    Raises:
        OSError: The kernel refused it.
    """
    program = _seccomp.build_allowlist(_seccomp.WORKER_ALLOWED)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    ctypes.set_errno(0)
    result = _landlock.syscall_fn()(
        ctypes.c_long(_SYS_SECCOMP),
        ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(fprog),
    )
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp(SET_MODE_FILTER, TSYNC): {os.strerror(err) if err else result}")
