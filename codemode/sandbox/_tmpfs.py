"""Each session's temp dir (its commands' ``$TMPDIR``, and so its private ``/dev/shm``, which
lies in ``$TMPDIR/.codemode-shm``) inside a bounded disk quota.

Two forms, chosen when the temp dir is made:

- **tmpfs** (the host can mount: root or ``CAP_SYS_ADMIN``): the dir is a tmpfs of a fixed size,
  ``nosuid,nodev,mode=0700``, owned by the host's user. A write past the size fails with
  ``ENOSPC`` in the command; nothing on the host is touched. Its use is read with one
  ``statvfs`` (the state dir's quota counts it). The mount's *source* names the host that made
  it (``codemode-tmp:<pid>:<start time>``), so a host starting on a state dir unmounts only the
  stale mounts of that state dir (under ``STATE/tmp/``, found in ``/proc/self/mountinfo``)
  whose host is gone, never those of a host still running there.
- **counted** (no mount possible): the dir is a plain directory of the state dir, and
  :func:`counted_use` measures it before each command with a bounded walk (no link followed,
  ``lstat`` only, at most :data:`MAX_COUNTED_ENTRIES` entries, run off the event loop by the
  caller). A session over its share is refused new commands until it cleans up ``$TMPDIR``.

Commands run in a mount namespace of their own that is a slave of the host's, so a tmpfs is
mounted before the session's first command starts and unmounted only when no command of the
session runs any more (session closed, host closed without background processes).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import logging
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from codemode.errors import ErrorCode, ToolError
from codemode.sandbox._procstat import is_running, process_start
from codemode.sandbox._safeopen import (
    UnsafePath,
    anchor,
    open_anchor,
    open_dir_at,
    remove_tree_at,
    write_fresh_at,
)

__all__ = [
    "CLEANUP_COMMANDS",
    "DISABLE_ENV",
    "MAX_COUNTED_ENTRIES",
    "MOUNT_SOURCE_PREFIX",
    "TmpUse",
    "check_share",
    "counted_use",
    "is_cleanup",
    "is_mounted",
    "make_session_tmp",
    "quota_report",
    "remove_session_tmp",
    "session_inbox",
    "sweep_stale_tmp",
    "tmp_form",
    "tmp_full_note",
    "tmp_mounts",
    "tmpfs_use",
]

log = logging.getLogger("codemode.sandbox.tmpfs")

MOUNT_SOURCE_PREFIX: Final = "codemode-tmp"
"""The source field of a session tmpfs: ``codemode-tmp:<host pid>:<host start time>``."""
MAX_COUNTED_ENTRIES: Final = 100_000
"""Most entries the counting walk looks at; a dir with more counts as over its share."""
SESSION_PREFIX: Final = "s-"
INBOX_SUFFIX: Final = ".trash"
"""A session's ``rm`` inbox is ``STATE/tmp/s-<id>.trash``, beside its temp dir (`session_inbox`)."""
OWNER_SUFFIX: Final = ".workspace"
"""``STATE/tmp/s-<id>.workspace``: the workspace of the host that made the session (host-written,
beyond its commands' reach); its inbox is filed into that workspace's trash only (`session_owner`)."""
DISABLE_ENV: Final = "CODEMODE_NO_TMPFS"
"""Set to ``1`` to count session temp dirs instead of mounting them (tests, users)."""

CLEANUP_COMMANDS: Final = frozenset({"rm", "rmdir", "du", "ls"})
"""Commands a session over its share may still run, alone (no ``; & | < > ` $(``): to see
what fills ``$TMPDIR`` and to remove it."""
_SHELL_OPERATORS: Final = (";", "&", "|", "<", ">", "`", "$(", "\n")

_MS_NOSUID: Final = 0x2
_MS_NODEV: Final = 0x4
_UMOUNT_NOFOLLOW: Final = 0x8


@dataclass(frozen=True)
class TmpUse:
    """What a session temp dir uses, and how that was found.

    Attributes:
        used: Bytes in use (blocks, not apparent sizes).
        form: ``"tmpfs"`` (its own file system, read with statvfs) or ``"counted"`` (walked).
        complete: False when the walk stopped at its entry cap (``used`` is then a floor).
    """

    used: int
    form: str
    complete: bool = True


@functools.cache
def _libc() -> ctypes.CDLL:
    # One handle: each `CDLL` makes a class of its own, in a reference cycle that only a
    # collection frees (one per session's mount and unmount, left to a front's collector).
    return ctypes.CDLL(None, use_errno=True)


def _host_identity() -> str:
    """``<pid>:<start time>`` of this process (start time in clock ticks since boot)."""
    return f"{os.getpid()}:{process_start(os.getpid())}"


def _owner_alive(source: str) -> bool:
    """Whether the host named by a mount's source still runs (same pid, same start time)."""
    parts = source.split(":")
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    return parts[2].isdigit() and is_running(int(parts[1]), int(parts[2]))


def _unescape(field: str) -> str:
    r"""A mountinfo path field with its octal escapes (``\040`` for a space) decoded."""
    if "\\" not in field:
        return field
    out = bytearray()
    raw = field.encode()
    i = 0
    while i < len(raw):
        if raw[i] == 0x5C and i + 3 < len(raw) and raw[i + 1 : i + 4].isdigit():
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return out.decode(errors="surrogateescape")


def tmp_mounts(parent: str | os.PathLike[str]) -> dict[str, str]:
    """Session tmpfs mounts directly under ``parent`` (``STATE/tmp``): mount point -> source."""
    base = os.path.realpath(os.fspath(parent))
    found: dict[str, str] = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 2 or rest[0] != "tmpfs":
            continue
        point = _unescape(fields[4])
        if os.path.dirname(point) == base and rest[1].startswith(MOUNT_SOURCE_PREFIX + ":"):
            found[point] = rest[1]
    return found


def _mount(path: str, size_bytes: int) -> bool:
    """Mount a tmpfs of ``size_bytes`` on ``path``; False when this host cannot mount."""
    if os.environ.get(DISABLE_ENV) == "1":
        return False
    options = f"size={size_bytes},mode=0700,uid={os.getuid()},gid={os.getgid()}"
    source = f"{MOUNT_SOURCE_PREFIX}:{_host_identity()}"
    libc = _libc()
    if libc.mount(source.encode(), path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode()) == 0:
        return True
    code = ctypes.get_errno()
    if code not in (errno.EPERM, errno.EACCES):
        log.warning("cannot mount a tmpfs on %s: %s; its use is counted instead", path, os.strerror(code))
    return False


def _unmount(path: str, busy_seconds: float = 0.0) -> bool:
    """Unmount the tmpfs on ``path`` (not lazily: a mount still in use stays; tried again for
    ``busy_seconds`` while it is). True if gone."""
    deadline = time.monotonic() + busy_seconds
    pause = 0.01
    while _libc().umount2(path.encode(), _UMOUNT_NOFOLLOW) != 0:
        code = ctypes.get_errno()
        if code == errno.EINVAL:  # nothing mounted there any more
            return True
        if code != errno.EBUSY or time.monotonic() + pause > deadline:
            log.warning("cannot unmount the session temp dir %s: %s", path, os.strerror(code))
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
    return True


def session_inbox(temp: Path) -> Path:
    """The ``rm`` inbox of the session whose temp dir is ``temp``: its sibling
    ``STATE/tmp/s-<id>.trash``, a plain directory on the state dir's disk (never in the tmpfs),
    so that the shim's move of a workspace path there is a rename wherever the workspace and
    the state dir share a file system, and a big ``rm -rf`` is never a copy into the quota."""
    return temp.with_name(temp.name + INBOX_SUFFIX)


def session_owner(temp: Path) -> Path:
    """The file naming the workspace of the session whose temp dir is ``temp`` (`OWNER_SUFFIX`)."""
    return temp.with_name(temp.name + OWNER_SUFFIX)


def make_session_tmp(parent: Path, size_bytes: int, workspace: Path | None = None) -> Path:
    """A fresh session temp dir under ``parent`` (``STATE/tmp``, made 0700 when missing): a
    tmpfs of ``size_bytes`` where this host can mount, else a plain (counted) directory; and
    beside it, on disk, its ``rm`` inbox (`session_inbox`) and, given ``workspace``, the file
    recording it (`session_owner`), written before any command runs."""
    parent.mkdir(mode=0o700, exist_ok=True)
    while True:
        temp = tempfile.mkdtemp(prefix=SESSION_PREFIX, dir=parent)
        try:
            os.mkdir(session_inbox(Path(temp)), 0o700)
            break
        except FileExistsError:  # a killed host's inbox, not filed yet: leave it, take another name
            os.rmdir(temp)
    if workspace is not None:  # a fresh file (O_EXCL, no link followed) in the host's STATE/tmp
        with anchor(parent) as parent_fd:
            write_fresh_at(
                parent_fd,
                session_owner(Path(temp)).name,
                os.path.realpath(workspace).encode("utf-8", "surrogateescape"),
            )
    _mount(temp, size_bytes)
    return Path(temp)


def remove_session_tmp(path: Path, busy_seconds: float = 0.0) -> None:
    """Unmount (when a tmpfs) and remove a session temp dir and its inbox (file the inbox
    first). A mount still in use (a command of the session still runs) is left in place, and
    so are both dirs. ``busy_seconds``: how long a mount in use is tried again (blocking) when
    no command of the session runs any more (a process of an ended command, a supervisor, may
    still be leaving it)."""
    name = os.path.realpath(path)
    # (`is_mounted`, not `tmp_mounts`: that reads every mount of the process, ~1-2 ms with
    # 1,000 sessions, at every session's end)
    if is_mounted(Path(name)) and not _unmount(name, busy_seconds):
        return
    # Both are command-writable: removed by a loop over directory fds (no link followed, no
    # recursion however deep the tree); blocking, so callers on the event loop run this in a
    # worker thread.
    with anchor(os.path.dirname(name)) as parent_fd:
        for entry in (os.path.basename(name), session_inbox(Path(name)).name, session_owner(Path(name)).name):
            try:
                remove_tree_at(parent_fd, entry)
            except OSError as exc:
                log.warning("could not remove all of the session dir %s: %s", entry, exc)


def sweep_stale_tmp(parent: Path) -> list[str]:
    """Unmount the session tmpfs mounts under ``parent`` whose host no longer runs (a host
    that was killed), and remove their (then empty) dirs. Mounts of live hosts and mounts
    still in use stay. Returns the mount points released."""
    released: list[str] = []
    for point, source in tmp_mounts(parent).items():
        if _owner_alive(source) or not _unmount(point):
            continue
        released.append(point)
        with contextlib.suppress(OSError):
            os.rmdir(point)
        with contextlib.suppress(OSError):
            os.rmdir(session_inbox(Path(point)))  # filed before (Trash.file_all): empty unless a link
            os.unlink(session_owner(Path(point)))
    return released


def tmp_form(path: Path) -> str:
    """``"tmpfs"`` when the session temp dir is a mounted tmpfs, else ``"counted"``."""
    return "tmpfs" if is_mounted(Path(os.path.realpath(path))) else "counted"


def tmpfs_use(path: Path) -> TmpUse:
    """Bytes in use on a session tmpfs (one statvfs)."""
    st = os.statvfs(path)
    return TmpUse(used=(st.f_blocks - st.f_bfree) * st.f_frsize, form="tmpfs")


def counted_use(path: Path, max_entries: int = MAX_COUNTED_ENTRIES) -> TmpUse:
    """Bytes a plain session temp dir uses, by a bounded walk: directory fds opened without
    following a link, ``lstat`` of each entry (a link counts as itself, a FIFO or a device as
    nothing), at most ``max_entries`` entries. Blocking: call it off the event loop.

    Raises:
        UnsafePath: ``path`` itself is missing or not a directory.
    """
    root = open_anchor(path)
    used, seen, stack = 0, 0, [root]
    try:
        while stack:
            dir_fd = stack.pop()
            try:
                names = os.listdir(dir_fd)
                for name in names:
                    seen += 1
                    if seen > max_entries:
                        return TmpUse(used=used, form="counted", complete=False)
                    try:
                        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError:
                        continue  # gone meanwhile
                    used += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        with contextlib.suppress(UnsafePath):
                            stack.append(open_dir_at(dir_fd, name))
            except OSError:
                pass  # removed or unreadable meanwhile: what was seen counts
            finally:
                if dir_fd != root:
                    os.close(dir_fd)
        return TmpUse(used=used, form="counted")
    finally:
        os.close(root)
        for fd in stack:
            os.close(fd)


def is_mounted(path: Path) -> bool:
    """Whether the session temp dir ``path`` is a mount of its own (its tmpfs): two stats of
    paths that are the host's own (commands write only inside the dir; only the host mounts
    there), nothing followed, fine on the loop."""
    try:
        return os.lstat(path).st_dev != os.lstat(path.parent).st_dev
    except OSError:
        return False


def is_cleanup(command: str) -> bool:
    """Whether ``command`` is one of `CLEANUP_COMMANDS`, alone."""
    words = command.split()
    return bool(words) and words[0] in CLEANUP_COMMANDS and not any(op in command for op in _SHELL_OPERATORS)


def check_share(path: Path, share_bytes: int, command: str = "") -> TmpUse:
    """Let a command of the session start, or refuse it when its counted temp dir holds more
    than ``share_bytes`` (or more entries than the walk looks at) and the command is not a
    clean-up (`is_cleanup`). A tmpfs needs no check: the kernel bounds it. Blocking (a walk):
    call it off the event loop.

    Raises:
        ToolError: ``temp_dir_full``, saying what to clean up.
    """
    try:
        if is_mounted(path):
            return tmpfs_use(path)
        use = counted_use(path)
    except (OSError, UnsafePath):
        return TmpUse(used=0, form="counted")  # gone or replaced: the command's own start says so
    if (use.used <= share_bytes and use.complete) or is_cleanup(command):
        return use
    held = f"{use.used / (1024 * 1024):.1f} MiB" if use.complete else f"over {MAX_COUNTED_ENTRIES:,} entries"
    raise ToolError(
        f"$TMPDIR of this session holds {held}, over its share of {share_bytes // (1024 * 1024)} MiB of the "
        "disk quota, so no other command starts until it fits: remove what you no longer need with "
        'a command of rm, rmdir, du or ls alone (e.g. du -sh "$TMPDIR"/*, then rm -rf "$TMPDIR"/<dir>)',
        {"used_bytes": use.used, "share_bytes": share_bytes},
        code=ErrorCode.TEMP_DIR_FULL,
    )


def tmp_full_note(path: Path | None) -> str | None:
    """One line for a command's result when its session tmpfs is full (under 1% free); None
    otherwise, and for a counted (plain) temp dir. A stat of the dir and of its parent (both
    the host's own: commands can write only inside the dir) and one statvfs."""
    if path is None:
        return None
    try:
        if not is_mounted(path):
            return None
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_blocks == 0 or st.f_bavail * 100 >= st.f_blocks:
        return None
    size_mib = st.f_blocks * st.f_frsize // (1024 * 1024)
    return (
        f"$TMPDIR is full (its quota is {size_mib} MiB, with /dev/shm in it): writes there fail with "
        "'No space left on device'; remove what you no longer need from $TMPDIR"
    )


def quota_report(parent: Path, share_bytes: int) -> dict[str, object]:
    """For ``codemode doctor``: which form bounds the session temp dirs here, found by making
    (and removing) one probe temp dir under ``parent`` (``STATE/tmp``) when it can be made."""
    try:
        probe = make_session_tmp(parent, 1024 * 1024)
    except OSError as exc:
        return {"form": "unknown", "quota_mb": share_bytes // (1024 * 1024), "detail": f"cannot probe: {exc}"}
    try:
        form = "tmpfs" if is_mounted(probe) else "counted"
    finally:
        remove_session_tmp(probe)
    detail = (
        "each session's $TMPDIR is a tmpfs of this size: a write past it fails with ENOSPC"
        if form == "tmpfs"
        else "cannot mount here: each session's $TMPDIR is counted before its commands; over its share, "
        "only rm, rmdir, du and ls run"
    )
    return {"form": form, "quota_mb": share_bytes // (1024 * 1024), "detail": detail}
