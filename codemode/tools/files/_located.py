"""The located file: which kinds are refused, and how it is opened, read and atomically replaced.

Everything goes through the descriptors of the walk the sandbox check was made on (see the
package docstring). ``_open_located`` and ``_atomic_write`` keep their underscore names because
the race tests (tests/tools/files/test_files_safety.py) call them by those names.
"""

from __future__ import annotations

import difflib
import errno
import io
import os
import secrets
import shlex
import stat
from pathlib import Path

from codemode.errors import ErrorCode, ToolError
from codemode.sandbox import Changed, Walk, open_at, pseudo_fs, rename_into, reopen
from codemode.tools.files._messages import fmt_bytes, os_error


def _close_names(found: Walk) -> list[str]:
    """Names like the missing one in its directory, listed through the walk's descriptor."""
    try:
        dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=found.parent_fd)
    except OSError:
        return []
    try:
        names = os.listdir(dfd)
    except OSError:
        return []
    finally:
        os.close(dfd)
    return difflib.get_close_matches(found.name, names, n=5, cutoff=0.5)


def _missing(found: Walk, shown: str, *, hint: str) -> ToolError:
    real = Path(found.path)
    if found.missing_dirs:
        return ToolError(
            f"{shown} does not exist: directory {real.parent} does not exist "
            f"(deepest existing directory: {found.parent_path}). {hint}",
            {"path": str(real), "missing_dir": str(real.parent), "existing_ancestor": found.parent_path},
            code=ErrorCode.NOT_FOUND,
        )
    close = _close_names(found)
    suggestion = f" Did you mean: {', '.join(close)}?" if close else ""
    return ToolError(
        f"{shown} does not exist.{suggestion} {hint}",
        {"path": str(real), "similar": [str(real.parent / name) for name in close]},
        code=ErrorCode.NOT_FOUND,
    )


_SPECIAL_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def refuse_unreadable_kind(found: Walk, st: os.stat_result, shown: str) -> None:
    """Refuse devices, FIFOs, sockets and kernel pseudo-files, before anything opens them.

    ``st`` and ``found.fd`` come from an ``O_PATH`` descriptor, which runs no driver's open, so
    a FIFO cannot block here and ``/proc/kmsg`` loses nothing.
    """
    quoted = shlex.quote(shown)
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _SPECIAL_KINDS if test(st.st_mode)), "not a file")
        raise ToolError(
            f"{shown} is not a regular file ({kind}); the file tools only handle regular files and never "
            f"open other kinds (reading one can block or consume data). Use bash for it, e.g. "
            f"`head -c 4096 {quoted} | xxd`.",
            {"path": found.path, "kind": "special", "file_type": kind},
            code=ErrorCode.NOT_A_FILE,
        )
    assert found.fd is not None
    pseudo = pseudo_fs(found.fd)
    if pseudo is not None:
        raise ToolError(
            f"{shown} is a file of {pseudo}, a kernel pseudo file system: the kernel makes up its content "
            "on each read, and reading can block forever or consume what it shows (as /proc/kmsg does), "
            f"so the file tools do not open such files. Use bash for it, e.g. `head -c 65536 {quoted}`; "
            "commands run confined and can be stopped.",
            {"path": found.path, "kind": "pseudo", "file_system": pseudo},
            code=ErrorCode.NOT_A_FILE,
        )


def regular_file(found: Walk, shown: str, *, hint: str) -> os.stat_result:
    """The stat of the located target, which must be an existing regular file on a real file system."""
    st = found.st
    if found.fd is None or st is None:
        raise _missing(found, shown, hint=hint)
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(
            f"{shown} is a directory, not a file. List it with bash (ls {shlex.quote(shown)}).",
            {"path": found.path, "kind": "directory"},
            code=ErrorCode.NOT_A_FILE,
        )
    refuse_unreadable_kind(found, st, shown)
    return st


def _open_located(found: Walk, shown: str, action: str) -> io.BufferedReader:
    """Open the located regular file for reading: non-blocking, no symlink, the same inode."""
    try:
        fd = reopen(found, os.O_RDONLY)
    except Changed:
        raise ToolError(
            f"{shown} changed while it was being opened (it was replaced, removed or turned into a "
            f"symlink); nothing was {'read' if action == 'read' else 'changed'}. Try again.",
            {"path": found.path, "reason": "changed"},
            code=ErrorCode.CHANGED_MEANWHILE,
        ) from None
    except OSError as exc:
        raise os_error(exc, action, shown) from exc
    return os.fdopen(fd, "rb")


def read_all(found: Walk, shown: str, limit: int) -> bytes:
    """The whole located regular file, at most ``limit`` bytes (a larger one is refused)."""
    with _open_located(found, shown, "read") as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise os_error(exc, "read", shown) from exc
    if len(data) > limit:
        raise ToolError(
            f"{shown} grew past {fmt_bytes(limit)} while it was being read; nothing was changed. "
            "Edit it with bash (e.g. sed -i).",
            {"path": found.path, "limit": limit},
            code=ErrorCode.TOO_LARGE,
        )
    return data


def _changed_while_writing(shown: str, real: str, what: str) -> ToolError:
    return ToolError(
        f"{shown} changed while writing: {what}. Nothing was written; read it again and retry.",
        {"path": real, "reason": "changed"},
        code=ErrorCode.CHANGED_MEANWHILE,
    )


def _atomic_write(found: Walk, data: bytes, shown: str, old: os.stat_result | None) -> None:
    """Replace the located file with ``data`` atomically, keeping ``old``'s mode and owner.

    Everything goes through the walk's descriptors: missing directories are made with
    ``mkdirat`` and opened without following links, the temp file is created with ``openat`` and
    renamed with ``renameat`` in the same directory, so nothing swapped in after the sandbox check
    can redirect a byte. ``old`` is the file that was read (None: create a new one, and fail if
    the name appears meanwhile).

    Raises:
        ToolError: The write failed; the original file (if any) is intact and no temp file is left.
    """
    dfd = found.parent_fd
    opened: list[int] = []
    try:
        for part in found.missing_dirs:
            try:
                os.mkdir(part, 0o777, dir_fd=dfd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise os_error(exc, "create the directory for", shown) from exc
            try:
                dfd = open_at(dfd, part, os.O_PATH | os.O_DIRECTORY)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise _changed_while_writing(
                        shown, found.path, f"directory {part!r} was replaced by a symlink or a file"
                    ) from None
                raise os_error(exc, "create the directory for", shown) from exc
            opened.append(dfd)
        _replace_in(dfd, found.name, data, shown, found.path, old)
    finally:
        for fd in opened:
            os.close(fd)


def _replace_in(dfd: int, name: str, data: bytes, shown: str, real: str, old: os.stat_result | None) -> None:
    tmp = f".{name[:48]}.{secrets.token_hex(4)}.codemode-tmp"  # within NAME_MAX for any 255-byte name
    made_tmp = False
    try:
        if old is not None:
            try:
                now: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (old.st_dev, old.st_ino):
                raise _changed_while_writing(shown, real, "it was replaced, removed or turned into a symlink")
        fd = open_at(dfd, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        made_tmp = True
        try:
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
                if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(fd, old.st_uid, old.st_gid)
                    except PermissionError:
                        pass  # not ours to give away; the mode is still kept
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            rename_into(dfd, tmp, name, replace=old is not None)
        except FileExistsError:
            raise _changed_while_writing(shown, real, "something else created it meanwhile") from None
        made_tmp = False
        try:
            sync_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
        except PermissionError:
            return  # a directory we may write but not list: the rename is done, only not synced
        try:
            os.fsync(sync_fd)
        finally:
            os.close(sync_fd)
    except OSError as exc:
        raise os_error(exc, "write", shown) from exc
    finally:
        if made_tmp:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
