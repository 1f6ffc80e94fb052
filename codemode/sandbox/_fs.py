"""Race-free path resolution for the host's file tools: every component opened by fd, none followed.

The file tools run in the unconfined host process, so they cannot rely on Landlock; a path is
resolved here one component at a time, each opened ``O_PATH`` relative to the directory before it
and never followed by the kernel (``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS`` where the kernel has it, ``openat`` with ``O_NOFOLLOW`` otherwise). A
symlink is read with ``readlinkat`` and its target resolved the same way, so the walk knows the real
path of every directory it holds. The result keeps descriptors: the caller checks the real path
against the sandbox roots and then reads, creates (``mkdirat``) and renames (``renameat2``) through
those descriptors, so a component swapped for a symlink after the check cannot redirect anything.

Only ``O_PATH`` descriptors are taken while walking: they never run a driver's ``open`` (a FIFO,
a tape, ``/proc/kmsg``), so a caller can ``fstat`` and ``fstatfs`` the target and refuse special
and pseudo files before anything is opened for reading.

Set ``CODEMODE_FS_OPENAT2=0`` (or `USE_OPENAT2` to False) to force the ``openat`` walk.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import struct
from dataclasses import dataclass, field

__all__ = [
    "MAX_SYMLINKS",
    "USE_OPENAT2",
    "Changed",
    "EnteredProtected",
    "SymlinkLoop",
    "Walk",
    "open_at",
    "openat2_available",
    "pseudo_fs",
    "rename_into",
    "reopen",
    "walk",
]

#: Symlinks followed for one path at most (the kernel's own limit), so a loop ends.
MAX_SYMLINKS = 40
#: Directory levels one path may go down (descriptors are held for each).
MAX_DEPTH = 256

#: False forces the ``openat``/``O_NOFOLLOW`` walk even where ``openat2`` exists.
USE_OPENAT2 = os.environ.get("CODEMODE_FS_OPENAT2", "1") != "0"

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_STEP_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
_NR_OPENAT2 = 547 if platform.machine().startswith("alpha") else 437
_RENAME_NOREPLACE = 1
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_OpenHow), ctypes.c_size_t]
_fstatfs = _libc.fstatfs
_fstatfs.restype = ctypes.c_int
_fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
_renameat2 = getattr(_libc, "renameat2", None)
if _renameat2 is not None:
    _renameat2.restype = ctypes.c_int
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]

_openat2_works: bool | None = None  # None: not probed yet


class _NoOpenat2(Exception):
    """openat2 is missing (ENOSYS) or filtered (EPERM on the probe): use openat."""


def _openat2(dirfd: int, name: str, flags: int, mode: int, resolve: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, resolve)
    encoded = os.fsencode(name)
    for _ in range(8):
        fd = int(_syscall(_NR_OPENAT2, dirfd, encoded, ctypes.byref(how), ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            raise _NoOpenat2
        if err not in (errno.EINTR, errno.EAGAIN):  # EAGAIN: the kernel saw a rename race; retry
            raise OSError(err, os.strerror(err), name)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), name)


def openat2_available() -> bool:
    """Whether this process resolves components with ``openat2`` (probed once)."""
    global _openat2_works
    if not USE_OPENAT2:
        return False
    if _openat2_works is None:
        try:
            os.close(_openat2(-100, "/", os.O_PATH | os.O_CLOEXEC, 0, 0))  # AT_FDCWD
            _openat2_works = True
        except (_NoOpenat2, OSError):  # ENOSYS, or EPERM from a container's seccomp profile
            _openat2_works = False
    return _openat2_works


def open_at(dirfd: int, name: str, flags: int, mode: int = 0o644) -> int:
    """Open one path component ``name`` in directory ``dirfd`` without following a symlink.

    ``O_NOFOLLOW`` and ``O_CLOEXEC`` are always added. With ``O_PATH`` a symlink opens as itself;
    otherwise a symlink fails with ``ELOOP``.

    Raises:
        ValueError: ``name`` is not a single component.
        OSError: The open failed.
    """
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not a single path component: {name!r}")
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if openat2_available():
        try:
            return _openat2(dirfd, name, flags, mode, _STEP_RESOLVE)
        except _NoOpenat2:
            global _openat2_works
            _openat2_works = False
    return os.open(name, flags, mode, dir_fd=dirfd)


# ---------------------------------------------------------------------------- pseudo files

#: Kernel file systems whose files are made up on read (and may block or have side effects).
_PSEUDO_FS = {
    0x9FA0: "procfs",
    0x62656572: "sysfs",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0x0027E0EB: "cgroupfs",
    0x63677270: "cgroup2fs",
    0xCAFE4A11: "bpffs",
    0x62656570: "configfs",
    0xDE5E81E4: "efivarfs",
    0x6165676C: "pstorefs",
    0x65735543: "fusectl",
    0xF97CFF8C: "selinuxfs",
    0x43415D53: "smackfs",
    0x42494E4D: "binfmt_misc",
    0x6E736673: "nsfs",
}
_F_TYPE = "I" if platform.machine().startswith("s390") else "l"  # statfs.f_type is first


def pseudo_fs(fd: int) -> str | None:
    """The name of the kernel pseudo file system ``fd`` lies on (procfs, sysfs, ...), else None."""
    buf = ctypes.create_string_buffer(512)
    if _fstatfs(fd, buf) != 0:
        return None
    magic = int(struct.unpack_from(_F_TYPE, buf.raw)[0]) & 0xFFFFFFFF
    return _PSEUDO_FS.get(magic)


# ---------------------------------------------------------------------------- the walk


class SymlinkLoop(Exception):
    """More than `MAX_SYMLINKS` symlinks on one path."""

    def __init__(self, at: str) -> None:
        super().__init__(at)
        self.at = at


class EnteredProtected(Exception):
    """The walk reached a directory listed as protected (by identity: device and inode)."""

    def __init__(self, root: str, at: str) -> None:
        super().__init__(root, at)
        self.root = root
        self.at = at  # the real path walked so far, the rest of the path appended (lexically)


class Changed(Exception):
    """The located target is not the object at its name any more."""


@dataclass
class Walk:
    """Where a path leads, with descriptors that pin it.

    Attributes:
        path: The real absolute path of the target (symlinks and ``..`` resolved).
        parent_fd: ``O_PATH`` descriptor of the deepest existing directory on the way: the
            target's directory, or where `missing_dirs` start. -1 for ``/`` itself.
        parent_path: The real path of ``parent_fd``.
        name: The target's last component ("" for ``/``).
        missing_dirs: Directories that do not exist yet between ``parent_fd`` and ``name``.
        fd: ``O_PATH`` descriptor of the target when it exists (never a symlink), else None.
        st: ``fstat`` of ``fd``.
    """

    path: str
    parent_fd: int
    parent_path: str
    name: str
    missing_dirs: tuple[str, ...] = ()
    fd: int | None = None
    st: os.stat_result | None = None
    _closed: bool = field(default=False, repr=False)

    def close(self) -> None:
        """Close the descriptors (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for fd in (self.fd, self.parent_fd):
            if fd is not None and fd >= 0:
                os.close(fd)

    def __enter__(self) -> Walk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _join(names: list[str]) -> str:
    return "/" + "/".join(names)


def walk(path: str, protected: dict[tuple[int, int], str] | None = None) -> Walk:
    """Resolve the absolute ``path`` component by component, by descriptor, like ``realpath``.

    Components that do not exist are appended as given (a later ``..`` drops one). A symlink
    is never followed by the kernel: its text is read and resolved from the directory holding
    it (or from ``/``), so the real path of each descriptor is known.

    Args:
        path: An absolute path.
        protected: Directories (``(st_dev, st_ino)`` -> their path) the walk must not enter.

    Returns:
        The `Walk`; the caller closes it.

    Raises:
        SymlinkLoop: Too many symlinks.
        EnteredProtected: The path reaches into a protected directory.
        NotADirectoryError: A component before the last is an existing non-directory.
        OSError: A component could not be opened (permission, name too long, ...).
    """
    if not path.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    deny = protected or {}
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    stack: list[int] = [root]  # descriptors of the directories from / down to the current one
    names: list[str] = []  # their names below /
    pending = [part for part in reversed(path.split("/")) if part]  # a stack: next part last
    missing: list[str] = []
    leaf: tuple[int, os.stat_result, str] | None = None  # an existing non-directory
    hops = 0
    try:
        while pending:
            part = pending.pop()
            if leaf is not None:  # a component after a file
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), _join([*names, leaf[2]]))
            if part == ".":
                continue
            if part == "..":
                if missing:
                    missing.pop()
                elif len(stack) > 1:
                    os.close(stack.pop())
                    names.pop()
                continue
            if missing:
                missing.append(part)
                continue
            try:
                fd = open_at(stack[-1], part, _PATH_FLAGS)
            except FileNotFoundError:
                missing.append(part)
                continue
            try:
                st = os.fstat(fd)
                if stat.S_ISLNK(st.st_mode):
                    hops += 1
                    if hops > MAX_SYMLINKS:
                        raise SymlinkLoop(_join([*names, part]))
                    target = os.readlink("", dir_fd=fd)  # the very link this fd holds
                    if target.startswith("/"):
                        while len(stack) > 1:
                            os.close(stack.pop())
                        names.clear()
                    pending.extend(reversed([p for p in target.split("/") if p]))
                    continue
                if stat.S_ISDIR(st.st_mode):
                    hit = deny.get((st.st_dev, st.st_ino))
                    if hit is not None:
                        raise EnteredProtected(
                            hit, os.path.normpath(_join([*names, part, *reversed(pending)]))
                        )
                    if len(stack) > MAX_DEPTH:
                        raise OSError(errno.ENAMETOOLONG, "too many directory levels", _join(names))
                    stack.append(fd)
                    names.append(part)
                    fd = -1
                    continue
                leaf = (fd, st, part)
                fd = -1
            finally:
                if fd >= 0:
                    os.close(fd)
        if leaf is not None and path.endswith("/"):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), _join([*names, leaf[2]]))
        return _result(stack, names, missing, leaf)
    except BaseException:
        if leaf is not None:
            os.close(leaf[0])
        for fd in stack:
            os.close(fd)
        raise


def _result(
    stack: list[int], names: list[str], missing: list[str], leaf: tuple[int, os.stat_result, str] | None
) -> Walk:
    """Keep the parent's and the target's descriptors; close the rest."""
    if leaf is not None:
        keep_parent, target_fd, st, name = stack.pop(), leaf[0], leaf[1], leaf[2]
        parent_names = names
    elif missing:
        keep_parent, target_fd, st, name = stack.pop(), None, None, missing[-1]
        parent_names = names
    elif len(stack) > 1:  # the target is an existing directory
        target_fd = stack.pop()
        st = os.fstat(target_fd)
        keep_parent, name = stack.pop(), names[-1]
        parent_names = names[:-1]
    else:  # "/"
        target_fd = stack.pop()
        st = os.fstat(target_fd)
        keep_parent, name, parent_names = -1, "", []
    for fd in stack:
        os.close(fd)
    parent_path = _join(parent_names)
    below = [*missing] if missing else [name] if name else []
    full = _join([*parent_names, *below])
    return Walk(
        path=full,
        parent_fd=keep_parent,
        parent_path=parent_path,
        name=name,
        missing_dirs=tuple(missing[:-1]),
        fd=target_fd,
        st=st,
    )


# ---------------------------------------------------------------------------- using a walk


def reopen(located: Walk, flags: int) -> int:
    """Open the located existing target for I/O: by name under its parent, never following a
    symlink, non-blocking, and only if it is still the inode that was located.

    Raises:
        Changed: The name now holds something else (another file, a symlink, ...).
        OSError: The open failed.
    """
    assert located.st is not None and located.parent_fd >= 0
    try:
        fd = open_at(located.parent_fd, located.name, flags | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO, errno.EISDIR, errno.ENOTDIR):
            raise Changed from exc
        raise
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (located.st.st_dev, located.st.st_ino):
        os.close(fd)
        raise Changed
    return fd


def rename_into(dirfd: int, src: str, dst: str, *, replace: bool) -> None:
    """``renameat`` within ``dirfd``; with ``replace=False`` an existing ``dst`` fails (EEXIST).

    Raises:
        FileExistsError: ``replace`` is False and ``dst`` exists.
        OSError: The rename failed.
    """
    if replace:
        os.replace(src, dst, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        return
    if _renameat2 is not None:
        if _renameat2(dirfd, os.fsencode(src), dirfd, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), dst)
    # No RENAME_NOREPLACE here: a hard link fails on an existing name just the same.
    try:
        os.link(src, dst, src_dir_fd=dirfd, dst_dir_fd=dirfd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        try:
            os.stat(dst, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            os.replace(src, dst, src_dir_fd=dirfd, dst_dir_fd=dirfd)
            return
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst) from None
    os.unlink(src, dir_fd=dirfd)
