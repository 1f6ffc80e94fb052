"""Thin ctypes layer over the Linux Landlock syscalls, and what the running kernel offers.

The ``landlock`` PyPI package covers only filesystem rules and decides errors from a stale
``errno``; this module talks to the kernel directly so it can also handle network rules
(ABI 4), scoping (ABI 6) and report exactly which rights the running ABI enforces.

The syscall numbers 444-446 are the same on every architecture that has Landlock
(x86_64, aarch64, ...), because they were allocated after the syscall tables were unified.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KNOWN_ABI",
    "SIMULATE_ABI_ENV",
    "SIMULATE_ENV",
    "LandlockStatus",
    "landlock_status",
]

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
PR_SET_NO_NEW_PRIVS = 38
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2

#: The newest Landlock ABI whose rights this module knows. A newer kernel still works, but
#: rights added after this ABI are not handled (``LandlockStatus.reason`` says so).
KNOWN_ABI = 7

#: Set to ``1`` to make :func:`landlock_status` report Landlock as unavailable (tests, users).
SIMULATE_ENV = "CODEMODE_SIMULATE_NO_LANDLOCK"
#: Set to a number to use at most that Landlock ABI, as on an older kernel (tests, users).
SIMULATE_ABI_ENV = "CODEMODE_SIMULATE_LANDLOCK_ABI"

# Filesystem access rights: (name, bit, ABI that introduced it).
FS_RIGHTS: tuple[tuple[str, int, int], ...] = (
    ("execute", 1 << 0, 1),
    ("write_file", 1 << 1, 1),
    ("read_file", 1 << 2, 1),
    ("read_dir", 1 << 3, 1),
    ("remove_dir", 1 << 4, 1),
    ("remove_file", 1 << 5, 1),
    ("make_char", 1 << 6, 1),
    ("make_dir", 1 << 7, 1),
    ("make_reg", 1 << 8, 1),
    ("make_sock", 1 << 9, 1),
    ("make_fifo", 1 << 10, 1),
    ("make_block", 1 << 11, 1),
    ("make_sym", 1 << 12, 1),
    ("refer", 1 << 13, 2),
    ("truncate", 1 << 14, 3),
    ("ioctl_dev", 1 << 15, 5),
)
NET_RIGHTS: tuple[tuple[str, int, int], ...] = (
    ("bind_tcp", 1 << 0, 4),
    ("connect_tcp", 1 << 1, 4),
)
SCOPES: tuple[tuple[str, int, int], ...] = (
    ("abstract_unix_socket", 1 << 0, 6),
    ("signal", 1 << 1, 6),
)

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_TRUNCATE = 1 << 14
FS_IOCTL_DEV = 1 << 15
# Rights that may be granted on a non-directory (a file or device); the rest are directory-only.
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV


def mask_for(table: tuple[tuple[str, int, int], ...], abi: int) -> int:
    """Bitmask of every right in ``table`` that ABI ``abi`` knows."""
    mask = 0
    for _name, bit, since in table:
        if abi >= since:
            mask |= bit
    return mask


def names_for(table: tuple[tuple[str, int, int], ...], abi: int) -> tuple[str, ...]:
    """Names of every right in ``table`` that ABI ``abi`` knows."""
    return tuple(name for name, _bit, since in table if abi >= since)


class RulesetAttr(ctypes.Structure):
    """``struct landlock_ruleset_attr`` (the size passed to the kernel depends on the ABI)."""

    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class PathBeneathAttr(ctypes.Structure):
    """``struct landlock_path_beneath_attr`` (packed in the kernel UAPI)."""

    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class NetPortAttr(ctypes.Structure):
    """``struct landlock_net_port_attr``."""

    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def ruleset_attr_size(abi: int) -> int:
    """How many bytes of :class:`RulesetAttr` this ABI understands (more makes it fail E2BIG)."""
    if abi >= 6:
        return 24
    if abi >= 4:
        return 16
    return 8


@functools.lru_cache(1)
def libc() -> ctypes.CDLL:
    """A private libc handle (own function objects, errno saved per call)."""
    return ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(1)
def syscall_fn() -> Any:
    fn = libc()["syscall"]
    fn.restype = ctypes.c_long
    return fn


@functools.lru_cache(1)
def prctl_fn() -> Any:
    fn = libc()["prctl"]
    fn.restype = ctypes.c_int
    fn.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    return fn


def create_ruleset(attr: RulesetAttr | None, size: int, flags: int) -> int:
    """``landlock_create_ruleset``; returns the fd (O_CLOEXEC) or the ABI with the VERSION flag.

    Raises:
        OSError: The kernel refused (errno set).
    """
    pointer = ctypes.byref(attr) if attr is not None else None
    ctypes.set_errno(0)
    result = syscall_fn()(
        ctypes.c_long(SYS_CREATE_RULESET), pointer, ctypes.c_size_t(size), ctypes.c_uint32(flags)
    )
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    return int(result)


def add_path_rule(ruleset_fd: int, path: str, allowed: int, *, follow: bool = True) -> None:
    """Allow ``allowed`` beneath ``path`` (opened O_PATH; a final symlink followed if ``follow``).

    Raises:
        OSError: The path cannot be opened or the kernel refused the rule.
    """
    path_fd = os.open(path, os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    try:
        if not os.path.isdir(f"/proc/self/fd/{path_fd}"):
            allowed &= FS_FILE_RIGHTS
        attr = PathBeneathAttr(allowed, path_fd)
        ctypes.set_errno(0)
        result = syscall_fn()(
            ctypes.c_long(SYS_ADD_RULE),
            ctypes.c_long(ruleset_fd),
            ctypes.c_long(RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
        if result < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path!r}): {os.strerror(err)}")
    finally:
        os.close(path_fd)


def add_port_rule(ruleset_fd: int, port: int, allowed: int) -> None:
    """Allow ``allowed`` (TCP bind/connect rights) on ``port`` (ABI 4 and later).

    Raises:
        OSError: The kernel refused the rule.
    """
    attr = NetPortAttr(allowed, port)
    ctypes.set_errno(0)
    result = syscall_fn()(
        ctypes.c_long(SYS_ADD_RULE),
        ctypes.c_long(ruleset_fd),
        ctypes.c_long(RULE_NET_PORT),
        ctypes.byref(attr),
        ctypes.c_uint32(0),
    )
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_add_rule(port {port}): {os.strerror(err)}")


@dataclass(frozen=True)
class LandlockStatus:
    """What Landlock offers on this machine (for ``codemode doctor`` and fail-closed checks).

    Attributes:
        abi: The Landlock ABI version of the running kernel; 0 when Landlock is unavailable.
        fs_rights: Filesystem access rights this ABI enforces (all of them are handled in
            confined modes), e.g. ``write_file``, ``truncate``, ``ioctl_dev``.
        network_rules: Whether TCP bind/connect can be denied (ABI 4 and later), which
            ``network: false`` needs.
        reason: Why Landlock is unavailable (or simulated unavailable), or a note about a
            kernel newer than this codemode knows; ``None`` when all is well.
        net_rights: Network rights this ABI enforces (TCP only; UDP and other protocols are
            not covered by Landlock).
        scopes: IPC scopes this ABI restricts (ABI 6: signals to and abstract unix sockets of
            processes outside the command's own sandbox).
    """

    abi: int
    fs_rights: tuple[str, ...]
    network_rules: bool
    reason: str | None = None
    net_rights: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()

    @property
    def confined_modes_available(self) -> bool:
        """True when ``read-only`` and ``workspace-write`` can be enforced (ABI >= 3)."""
        return self.abi >= 3

    def describe(self) -> list[str]:
        """Human-readable lines for ``codemode doctor``."""
        if self.abi == 0:
            return [
                "Landlock: unavailable",
                f"  reason: {self.reason}",
                "  confined sandbox modes (read-only, workspace-write): refused; only full-access runs",
            ]
        lines = [
            f"Landlock: ABI {self.abi}",
            f"  filesystem rights enforced: {', '.join(self.fs_rights)}",
            "  network rules (network: false): "
            + (
                f"available ({', '.join(self.net_rights)})"
                if self.network_rules
                else "unavailable (needs ABI 4)"
            ),
            "  scoping (signals, abstract unix sockets): "
            + (", ".join(self.scopes) if self.scopes else "unavailable (needs ABI 6)"),
            "  confined sandbox modes (read-only, workspace-write): "
            + ("available" if self.confined_modes_available else "refused (need ABI 3)"),
        ]
        if self.reason:
            lines.append(f"  note: {self.reason}")
        return lines


def _unavailable(reason: str) -> LandlockStatus:
    return LandlockStatus(abi=0, fs_rights=(), network_rules=False, reason=reason)


def _probe_reason(err: int) -> str:
    if platform.system() != "Linux":
        return f"Landlock exists only on Linux; this is {platform.system()}"
    if err == errno.ENOSYS:
        return (
            f"the kernel ({platform.release()}) has no Landlock syscalls "
            "(needs Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK=y)"
        )
    if err == errno.EOPNOTSUPP:
        return (
            "Landlock is built into the kernel but disabled at boot "
            "(add 'landlock' to the lsm= kernel parameter)"
        )
    return f"probing Landlock failed: {os.strerror(err)} (errno {err})"


@functools.lru_cache(1)
def landlock_status() -> LandlockStatus:
    """Probe the running kernel's Landlock ABI once (cached; ``landlock_status.cache_clear()``).

    ``CODEMODE_SIMULATE_NO_LANDLOCK=1`` in the environment makes it report Landlock as
    unavailable, so the fail-closed paths can be exercised on any machine;
    ``CODEMODE_SIMULATE_LANDLOCK_ABI=N`` uses at most ABI ``N``, as an older kernel would (the
    rulesets built then really are the older ABI's).
    """
    if os.environ.get(SIMULATE_ENV, "") not in ("", "0"):
        return _unavailable(
            f"Landlock unavailability is simulated ({SIMULATE_ENV}={os.environ[SIMULATE_ENV]})"
        )
    try:
        abi = create_ruleset(None, 0, CREATE_RULESET_VERSION)
    except (OSError, AttributeError) as exc:
        err = exc.errno if isinstance(exc, OSError) and exc.errno is not None else errno.ENOSYS
        return _unavailable(_probe_reason(err))
    reason = None
    cap = os.environ.get(SIMULATE_ABI_ENV, "")
    if cap.isdigit() and int(cap) < abi:
        reason = f"Landlock ABI {abi} is capped to {int(cap)} ({SIMULATE_ABI_ENV}={cap})"
        abi = int(cap)
        if abi == 0:
            return _unavailable(reason)
    known = min(abi, KNOWN_ABI)
    if abi > KNOWN_ABI:
        reason = (
            f"the kernel's Landlock ABI {abi} is newer than this codemode knows ({KNOWN_ABI}); "
            f"rights added after ABI {KNOWN_ABI} are not handled"
        )
    return LandlockStatus(
        abi=abi,
        fs_rights=names_for(FS_RIGHTS, known),
        network_rules=known >= 4,
        reason=reason,
        net_rights=names_for(NET_RIGHTS, known),
        scopes=names_for(SCOPES, known),
    )
