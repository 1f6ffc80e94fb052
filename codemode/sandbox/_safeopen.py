"""The one way the host touches a path that a command can write.

Everything a confined command can write is hostile input to the (unconfined) host: the
workspace and its ``.git``, the session's ``$TMPDIR``, the trash inbox. Any of it may be a FIFO,
a device, a symlink, a huge file, or change between a check and a use. So the host opens such a
path only here, always relative to a directory fd it trusts (an *anchor*: the workspace root, a
session temp dir, a git dir it found), and:

- follows no symlink on the way: ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
  RESOLVE_NO_MAGICLINKS)`` where the kernel has it (Linux 5.6), else a walk one component at a
  time with ``O_NOFOLLOW`` (``..`` and absolute paths refused);
- opens a file first as ``O_PATH`` (no open side effect, nothing blocks: a FIFO or a device is
  never really opened), takes regular files only (``fstat``), then reads it ``O_NONBLOCK``;
- reads at most ``cap + 1`` bytes: a file over its cap is refused, never read whole;
- writes only fresh files (``O_CREAT | O_EXCL | O_NOFOLLOW`` in a directory fd) and renames or
  removes names inside directory fds, never through a link.

What it refuses raises `UnsafePath` (a `ToolError` with a code) and is logged; nothing waits.
The ``a*`` functions run the same off the event loop (``anyio.to_thread.run_sync``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import secrets
import stat
from collections.abc import Iterator
from typing import Final

import anyio.to_thread

from codemode.errors import ErrorCode, ToolError

__all__ = [
    "UnsafePath",
    "anchor",
    "aread_text",
    "copy_tree_at",
    "is_dir_at",
    "listdir_at",
    "make_dir_at",
    "open_anchor",
    "open_dir_at",
    "read_bytes_at",
    "read_file_beneath",
    "read_text",
    "read_text_at",
    "remove_at",
    "remove_tree_at",
    "rename_at",
    "write_fresh_at",
]

log = logging.getLogger("codemode.sandbox.safeopen")

#: The cap when a caller names none: 1 MiB.
DEFAULT_CAP: Final = 1 << 20

_SYS_OPENAT2: Final = 437  # the same number on every Linux architecture codemode runs on
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_NO_SYMLINKS: Final = 0x04
_RESOLVE_BENEATH: Final = 0x08
_ALWAYS: Final = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY
# Errors meaning "a symlink was in the way" or "the path leads out of its anchor".
# (ENOTDIR: a directory was wanted and a link or a file is there.)
_LINK_ERRNOS: Final = frozenset({errno.ELOOP, errno.EXDEV, errno.ENOTDIR})
_MISSING_ERRNOS: Final = frozenset({errno.ENOENT})


class UnsafePath(ToolError):
    """The host refused a path a command can write, or could not open it.

    ``code`` says why: ``not_found`` (it does not exist), ``denied_by_sandbox`` (a symlink on the
    way, or it leads out of its directory), ``not_a_file`` (a FIFO, device, socket or directory
    where a regular file was wanted), ``too_large`` (over its cap), ``tool_failed`` (another
    error of the file system).
    """

    def __init__(self, message: str, path: str, code: ErrorCode) -> None:
        super().__init__(message, {"path": path}, code=code)
        self.path = path


def _refuse(message: str, path: str, code: ErrorCode) -> UnsafePath:
    if code is not ErrorCode.NOT_FOUND:
        log.warning("safe-open refused %s: %s", path, message)
    return UnsafePath(message, path, code)


def _from_os_error(exc: OSError, path: str) -> UnsafePath:
    if exc.errno in _MISSING_ERRNOS:
        return _refuse(f"{path} does not exist", path, ErrorCode.NOT_FOUND)
    if exc.errno in _LINK_ERRNOS:
        return _refuse(
            f"{path} is a symbolic link, is reached through one or leads out of its directory (or is no "
            "directory where one was wanted); the host follows no link a command could have planted",
            path,
            ErrorCode.DENIED_BY_SANDBOX,
        )
    return _refuse(f"{path} could not be opened: {exc.strerror or exc}", path, ErrorCode.TOOL_FAILED)


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class _Openat2:
    """``openat2`` through ``syscall(2)``, or None once the kernel says it has none."""

    def __init__(self) -> None:
        self.libc: ctypes.CDLL | None
        try:
            self.libc = ctypes.CDLL(None, use_errno=True)
            self.libc.syscall.restype = ctypes.c_long
        except (OSError, AttributeError):
            self.libc = None

    def open(self, dir_fd: int, rel: str, flags: int, mode: int) -> int | None:
        """The fd, or None when openat2 is unavailable (the caller walks instead).

        Raises:
            OSError: The kernel refused the open.
        """
        if self.libc is None:
            return None
        how = _OpenHow(
            flags,
            mode if flags & os.O_CREAT else 0,
            _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
        )
        fd = int(
            self.libc.syscall(
                ctypes.c_long(_SYS_OPENAT2),
                ctypes.c_int(dir_fd),
                ctypes.c_char_p(os.fsencode(rel)),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM):  # no openat2 here (or a seccomp filter hides it)
            self.libc = None
            return None
        raise OSError(err, os.strerror(err), rel)


_OPENAT2 = _Openat2()


def _parts(rel: str) -> list[str]:
    """The components of a relative path; ``.`` and empty ones dropped.

    Raises:
        OSError: EXDEV for an absolute path or a ``..`` component (it would leave the anchor).
    """
    if rel.startswith("/"):
        raise OSError(errno.EXDEV, "absolute path", rel)
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OSError(errno.EXDEV, "'..' component", rel)
    return parts


def _open_beneath(dir_fd: int, rel: str, flags: int, mode: int = 0o600) -> int:
    """Open ``rel`` beneath ``dir_fd``, following no symlink.

    Raises:
        OSError: The open failed (ELOOP/EXDEV for a link or a way out).
    """
    # openat2 takes only O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC beside O_PATH.
    flags |= _ALWAYS & ~os.O_NOCTTY if flags & os.O_PATH else _ALWAYS
    parts = _parts(rel)
    if not parts:
        return os.open(".", flags, mode, dir_fd=dir_fd)
    fd = _OPENAT2.open(dir_fd, "/".join(parts), flags, mode)
    if fd is not None:
        return fd
    current = dir_fd
    try:
        for part in parts[:-1]:
            step = _step(current, part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, 0, rel)
            if current != dir_fd:
                os.close(current)
            current = step
        return _step(current, parts[-1], flags, mode, rel)
    finally:
        if current != dir_fd:
            os.close(current)


def _step(dir_fd: int, part: str, flags: int, mode: int, rel: str) -> int:
    """One component of the walk without openat2: ELOOP when it is a symlink.

    Raises:
        OSError: The open failed.
    """
    try:
        return os.open(part, flags, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, "symbolic link", rel) from exc
        raise


def open_anchor(path: str | os.PathLike[str]) -> int:
    """A directory fd for a path the host trusts up to its last component (the workspace root,
    the state dir, a session temp dir); the last component must be a directory, not a link.

    Raises:
        UnsafePath: It is missing, a symlink or not a directory.
    """
    name = os.fspath(path)
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | _ALWAYS)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise _refuse(
                f"{name} is not a directory (or is a symbolic link)", name, ErrorCode.DENIED_BY_SANDBOX
            ) from exc
        raise _from_os_error(exc, name) from exc


@contextlib.contextmanager
def anchor(path: str | os.PathLike[str]) -> Iterator[int]:
    """`open_anchor` as a context: the fd is closed after."""
    fd = open_anchor(path)
    try:
        yield fd
    finally:
        os.close(fd)


def open_dir_at(dir_fd: int, rel: str) -> int:
    """A directory fd for ``rel`` beneath ``dir_fd`` (no symlink on the way, nor at the end).

    Raises:
        UnsafePath: It is missing, not a directory, or reached through a link.
    """
    try:
        return _open_beneath(dir_fd, rel, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise _from_os_error(exc, rel) from exc


def _open_regular(dir_fd: int, rel: str) -> int:
    """A read fd of the regular file ``rel`` beneath ``dir_fd`` (never blocks).

    Raises:
        UnsafePath: Missing, a link, or not a regular file.
    """
    try:
        handle = _open_beneath(dir_fd, rel, os.O_PATH)
    except OSError as exc:
        raise _from_os_error(exc, rel) from exc
    try:
        before = os.fstat(handle)
        if stat.S_ISLNK(before.st_mode):
            raise OSError(errno.ELOOP, "symbolic link", rel)
        if not stat.S_ISREG(before.st_mode):
            kind = "a directory" if stat.S_ISDIR(before.st_mode) else "a FIFO, device or socket"
            raise _refuse(
                f"{rel} is {kind}, not a regular file; the host reads regular files only",
                rel,
                ErrorCode.NOT_A_FILE,
            )
        try:  # the very inode checked above, opened for reading through /proc
            fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except FileNotFoundError:  # no /proc: open by name again, checked again below
            fd = _open_beneath(dir_fd, rel, os.O_RDONLY | os.O_NONBLOCK)
        after = os.fstat(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(after.st_mode):
            os.close(fd)
            raise _refuse(f"{rel} changed while it was opened", rel, ErrorCode.NOT_A_FILE)
        return fd
    except OSError as exc:
        raise _from_os_error(exc, rel) from exc
    finally:
        os.close(handle)


def read_bytes_at(dir_fd: int, rel: str, *, cap: int = DEFAULT_CAP) -> bytes:
    """The bytes of the regular file ``rel`` beneath ``dir_fd``, at most ``cap``.

    Raises:
        UnsafePath: Missing, a link on the way, not a regular file, or over ``cap`` bytes.
    """
    fd = _open_regular(dir_fd, rel)
    try:
        chunks: list[bytes] = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise _from_os_error(exc, rel) from exc
    finally:
        os.close(fd)
    if left <= 0:
        raise _refuse(
            f"{rel} is larger than {cap} bytes, the most the host reads of it", rel, ErrorCode.TOO_LARGE
        )
    return b"".join(chunks)


def read_text_at(dir_fd: int, rel: str, *, cap: int = DEFAULT_CAP) -> str:
    """`read_bytes_at` decoded as UTF-8 (undecodable bytes replaced).

    Raises:
        UnsafePath: As `read_bytes_at`.
    """
    return read_bytes_at(dir_fd, rel, cap=cap).decode("utf-8", "replace")


def read_text(path: str | os.PathLike[str], rel: str, *, cap: int = DEFAULT_CAP) -> str:
    """`read_text_at` beneath the anchor directory ``path`` (see `open_anchor`).

    Raises:
        UnsafePath: As `open_anchor` and `read_bytes_at`.
    """
    with anchor(path) as fd:
        return read_text_at(fd, rel, cap=cap)


def read_file_beneath(
    root: str | os.PathLike[str], rel: str | os.PathLike[str], *, cap: int = DEFAULT_CAP
) -> bytes:
    """The bytes of the regular file ``rel`` beneath the anchor directory ``root``.

    Raises:
        UnsafePath: As `open_anchor` and `read_bytes_at`.
    """
    with anchor(root) as fd:
        return read_bytes_at(fd, os.fspath(rel), cap=cap)


async def aread_text(path: str | os.PathLike[str], rel: str, *, cap: int = DEFAULT_CAP) -> str:
    """`read_text`, off the event loop.

    Raises:
        UnsafePath: As `read_text`.
    """
    return await anyio.to_thread.run_sync(lambda: read_text(path, rel, cap=cap))


def listdir_at(dir_fd: int, rel: str = ".") -> list[str]:
    """The names in the directory ``rel`` beneath ``dir_fd`` (no link followed).

    Raises:
        UnsafePath: Missing, a link on the way, or not a directory.
    """
    fd = open_dir_at(dir_fd, rel)
    try:
        return os.listdir(fd)
    except OSError as exc:
        raise _from_os_error(exc, rel) from exc
    finally:
        os.close(fd)


def _name(name: str) -> str:
    if not name or "/" in name or name in (".", ".."):
        raise _refuse(f"{name!r} is not a single file name", name, ErrorCode.DENIED_BY_SANDBOX)
    return name


def make_dir_at(dir_fd: int, name: str, mode: int = 0o700) -> int:
    """The directory ``name`` in ``dir_fd`` (made when missing), opened: never a link to one.

    Raises:
        UnsafePath: ``name`` exists as something else (a symlink, a file).
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(_name(name), mode, dir_fd=dir_fd)
    return open_dir_at(dir_fd, name)


def write_fresh_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """Write a new file ``name`` in ``dir_fd`` (``O_CREAT | O_EXCL | O_NOFOLLOW``).

    Raises:
        UnsafePath: ``name`` exists already (also as a link), or the write failed.
    """
    try:
        fd = os.open(_name(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _ALWAYS, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise _refuse(
                f"{name} exists already; the host writes fresh files only", name, ErrorCode.ALREADY_EXISTS
            ) from exc
        raise _from_os_error(exc, name) from exc
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
    except OSError as exc:
        raise _from_os_error(exc, name) from exc
    finally:
        os.close(fd)


def rename_at(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """Rename the entry ``src`` of one directory fd to ``dst`` in another (a link is moved as
    a link, never followed).

    Raises:
        OSError: The rename failed (EXDEV across file systems: the caller decides).
    """
    os.rename(_name(src), _name(dst), src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def remove_at(dir_fd: int, name: str) -> None:
    """Remove the entry ``name`` of ``dir_fd``: a directory with all it holds (links removed,
    not followed), anything else unlinked. Missing is fine.

    Raises:
        OSError: It could not be removed.
    """
    try:
        st = os.stat(_name(name), dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        remove_tree_at(dir_fd, name)
    else:
        os.unlink(name, dir_fd=dir_fd)


#: How many directory fds `remove_tree_at` holds at once; a subtree deeper than this is moved
#: up to the top of the tree (a rename inside it) and removed from there.
_REMOVE_FDS: Final = 32


def remove_tree_at(dir_fd: int, name: str) -> None:
    """Remove the directory ``name`` of ``dir_fd`` and all it holds, however wide or deep: a
    loop, never a recursion (a tree thousands of levels deep is no `RecursionError`), over
    directory fds opened ``O_NOFOLLOW`` (a link inside is unlinked, never followed), names
    removed by ``unlinkat`` in their directory's fd. At most ``_REMOVE_FDS`` fds are open: a
    directory below that depth is first renamed to the top of the tree. Missing is fine.
    Blocking (a big tree takes seconds): call it off the event loop.

    Raises:
        OSError: Something could not be removed (what could be is gone).
    """
    name = _name(name)
    try:
        top = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _ALWAYS, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in _LINK_ERRNOS:
            raise
        os.unlink(name, dir_fd=dir_fd)  # not a directory (a link or a file): the name itself
        return
    # Each level: its fd, its name in the level above, the names it still holds.
    stack: list[tuple[int, str, list[str]]] = [(top, name, os.listdir(top))]
    try:
        while stack:
            fd, own, names = stack[-1]
            if not names:
                stack.pop()
                os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(own, dir_fd=stack[-1][0] if stack else dir_fd)
                continue
            entry = names.pop()
            try:
                inner = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | _ALWAYS, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno not in _LINK_ERRNOS:
                    raise
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry, dir_fd=fd)
                continue
            if len(stack) < _REMOVE_FDS:
                stack.append((inner, entry, os.listdir(inner)))
                continue
            os.close(inner)
            lifted = f".rm-{secrets.token_hex(8)}"
            os.rename(entry, lifted, src_dir_fd=fd, dst_dir_fd=top)
            stack[0][2].append(lifted)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


class _CopyBudget:
    """What one `copy_tree_at` may still copy."""

    def __init__(self, entries: int, total: int) -> None:
        self.entries = entries
        self.bytes = total

    def take(self, path: str, size: int = 0) -> None:
        self.entries -= 1
        self.bytes -= size
        if self.entries < 0 or self.bytes < 0:
            raise _refuse(
                f"{path}: more than the copy may hold (entries or bytes)", path, ErrorCode.TOO_LARGE
            )


def copy_tree_at(
    src_dir_fd: int,
    src: str,
    dst_dir_fd: int,
    dst: str,
    *,
    max_entries: int = 100_000,
    max_bytes: int = 8 << 30,
    max_depth: int = 128,
) -> list[str]:
    """Copy the entry ``src`` of one directory fd to the new name ``dst`` of another (across
    file systems, where a rename cannot go): directories by fd, regular files read through
    `read`-only safe opens and written fresh (``O_EXCL``), symlinks copied as links (never
    followed); FIFOs, devices and sockets are skipped. Modes and times are kept.

    Returns:
        The paths (relative to ``src``) skipped as not regular files, directories or links.

    Raises:
        UnsafePath: ``dst`` exists, ``src`` is missing, or the tree is over a bound.
        OSError: A copy failed (the partial copy is left for the caller to remove).
    """
    skipped: list[str] = []
    try:
        _copy_entry(
            src_dir_fd,
            _name(src),
            dst_dir_fd,
            _name(dst),
            src,
            _CopyBudget(max_entries, max_bytes),
            max_depth,
            skipped,
        )
    except FileExistsError as exc:
        raise _refuse(
            f"{dst} (or a name in it) exists already; the copy writes fresh names only",
            dst,
            ErrorCode.ALREADY_EXISTS,
        ) from exc
    return skipped


def _copy_entry(
    src_fd: int,
    src: str,
    dst_fd: int,
    dst: str,
    shown: str,
    budget: _CopyBudget,
    depth: int,
    skipped: list[str],
) -> None:
    try:
        st = os.stat(src, dir_fd=src_fd, follow_symlinks=False)
    except OSError as exc:
        raise _from_os_error(exc, shown) from exc
    budget.take(shown, st.st_size if stat.S_ISREG(st.st_mode) else 0)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src, dir_fd=src_fd), dst, dir_fd=dst_fd)
    elif stat.S_ISDIR(st.st_mode):
        if depth <= 0:
            raise _refuse(f"{shown} is nested deeper than the copy goes", shown, ErrorCode.TOO_LARGE)
        os.mkdir(dst, 0o700, dir_fd=dst_fd)
        inner_src = open_dir_at(src_fd, src)
        try:
            inner_dst = open_dir_at(dst_fd, dst)
            try:
                for name in sorted(os.listdir(inner_src)):
                    _copy_entry(
                        inner_src, name, inner_dst, name, f"{shown}/{name}", budget, depth - 1, skipped
                    )
                os.fchmod(inner_dst, stat.S_IMODE(st.st_mode))
                os.utime(inner_dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(inner_dst)
        finally:
            os.close(inner_src)
    elif stat.S_ISREG(st.st_mode):
        reader = _open_regular(src_fd, src)
        try:
            writer = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _ALWAYS, 0o600, dir_fd=dst_fd)
            try:
                left = st.st_size + 1  # a file growing while copied stops at its size checked above
                while left > 0:
                    chunk = os.read(reader, min(left, 1 << 20))
                    if not chunk:
                        break
                    left -= len(chunk)
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(writer, view) :]
                os.fchmod(writer, stat.S_IMODE(st.st_mode))
                os.utime(writer, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(writer)
        finally:
            os.close(reader)
    else:
        log.warning("safe-open copy skipped %s: not a regular file, directory or link", shown)
        skipped.append(shown)


def is_dir_at(dir_fd: int, name: str) -> bool:
    """Whether ``name`` in ``dir_fd`` is a directory itself (a link to one is not)."""
    try:
        return stat.S_ISDIR(os.stat(_name(name), dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except (OSError, UnsafePath):
        return False
