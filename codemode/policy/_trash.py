"""Protected deletes: the per-workspace trash in the state directory.

Confined commands cannot write the state directory, so the ``rm`` shim (``_rm.py``, first on
their PATH) moves what it removes into an inbox inside the session's own temp dir; the host
files complete inbox entries into ``STATE/trash/<workspace key>/<id>/`` (``meta.json`` and
``item``) after each foreground run, when a session closes, and before every ``codemode trash``
command. Restoring writes only inside the trash's own workspace, never over an existing path and
never through a symlink that leads out of it: an inbox entry is written by a confined command,
so its claimed path is not trusted further than the workspace it could write anyway.

A session's inbox is ``STATE/tmp/s-<id>.trash``, beside its temp dir on the state dir's disk
(not in the temp dir's tmpfs: the shim's move there is a rename wherever the workspace and the
state dir share a file system, whatever its size, and filing it into ``STATE/trash`` is a rename
too); a policy without one (``SandboxPolicy.trash_inbox``) keeps it in the temp dir. The inbox
is writable by the session's commands (the shim's directory is not: it is ``STATE/bin``,
readable and executable only, `install_rm_shim`): the host
touches them only through `codemode.sandbox` safe-open (directory fds, no symlink
followed, regular files only, capped, never blocking). A planted link there is removed, never
followed. Filing walks only the host's own ``STATE/tmp/s-*`` session dirs, never through a link.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import secrets
import shlex
import shutil
import sys
from pathlib import Path

import pydantic

from codemode.errors import ErrorCode, ToolError
from codemode.sandbox import (
    INBOX_SUFFIX,
    OWNER_SUFFIX,
    SHIM_DIR_NAME,
    UnsafePath,
    anchor,
    copy_tree_at,
    is_dir_at,
    listdir_at,
    make_dir_at,
    open_anchor,
    open_dir_at,
    read_text_at,
    remove_at,
    rename_at,
    write_fresh_at,
)

__all__ = ["TRASH_INBOX", "Trash", "TrashEntry", "install_rm_shim"]

TRASH_INBOX = ".codemode-trash"
"""The inbox's name inside a session's temp dir."""
_SHIM_SOURCE = Path(__file__).with_name("_rm.py")
#: The session temp dirs the host makes (``tempfile.mkdtemp(prefix="s-")`` in ``STATE/tmp``).
_SESSION_PREFIX = "s-"
#: The most of an entry's ``meta.json`` the host reads (the shim writes a few hundred bytes).
_META_CAP = 64 * 1024
#: The most entries filed from one inbox at a time (what a command left beyond stays, logged).
_MAX_FILED = 10_000

log = logging.getLogger("codemode.policy.trash")


class TrashEntry(pydantic.BaseModel):
    """One removed path kept in the trash.

    Attributes:
        id: Pass to `Trash.restore`.
        path: Where it was (absolute).
        kind: file, directory or symlink.
        deleted_at: When (Unix time).
        location: Where it is now (the entry's ``item``).
    """

    id: str
    path: str
    kind: str
    deleted_at: float
    location: str


def _own_dir(parent_fd: int, name: str) -> int:
    """The real directory ``name`` in ``parent_fd``, opened; whatever a command planted there
    instead (a symlink, a file) is removed first, never followed."""
    try:
        return make_dir_at(parent_fd, name)
    except UnsafePath:
        log.warning("removing %s planted in a session temp dir (not a directory)", name)
        remove_at(parent_fd, name)
        return make_dir_at(parent_fd, name)


def install_rm_shim(state_dir: Path) -> Path:
    """The directory holding the ``rm`` shim for the host's commands: ``STATE/bin``.

    Commands read and execute it but never write it (it is beneath the protected state dir;
    the sandbox grants it read and execute only, `SandboxPolicy.shim_dir`), so no command can
    put a program of its own first on PATH. The shim is written fresh (``O_EXCL``) and renamed
    into place unless the one there already has the same text.

    Returns:
        The directory to put first on the commands' PATH.

    Raises:
        UnsafePath: The state dir is missing or not a directory.
    """
    text = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(_SHIM_SOURCE))} "$@"\n'
    with anchor(state_dir) as state_fd:
        folder_fd = _own_dir(state_fd, SHIM_DIR_NAME)
        try:
            with contextlib.suppress(UnsafePath):
                if read_text_at(folder_fd, "rm", cap=4096) == text:
                    return state_dir / SHIM_DIR_NAME
            partial = f".rm.{secrets.token_hex(6)}"
            write_fresh_at(folder_fd, partial, text.encode(), 0o755)
            rename_at(folder_fd, partial, folder_fd, "rm")
        finally:
            os.close(folder_fd)
    return state_dir / SHIM_DIR_NAME


def _move_entry(inbox_fd: int, name: str, root_fd: int) -> None:
    """Move the inbox entry ``name`` into the trash root: a rename, or where the session's
    ``$TMPDIR`` is a file system of its own (a tmpfs), a safe copy (`copy_tree_at`: no link
    followed, no FIFO opened) under a dot name, renamed complete, then the entry removed.

    Raises:
        OSError: It could not be moved (a partial copy is removed).
        UnsafePath: The entry is over the copy's bounds.
    """
    try:
        rename_at(inbox_fd, name, root_fd, name)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    partial = f".{name}.filing"
    remove_at(root_fd, partial)
    try:
        copy_tree_at(inbox_fd, name, root_fd, partial)
        rename_at(root_fd, partial, root_fd, name)
    except BaseException:
        with contextlib.suppress(OSError):
            remove_at(root_fd, partial)
        raise
    remove_at(inbox_fd, name)


def _key(workspace: Path) -> str:
    return hashlib.sha256(str(workspace).encode("utf-8", "surrogateescape")).hexdigest()[:16]


class Trash:
    """The trash of one workspace.

    Args:
        state_dir: The state directory.
        workspace: The workspace (resolved).
    """

    def __init__(self, state_dir: Path, workspace: Path) -> None:
        self.state_dir = state_dir
        self.workspace = Path(os.path.realpath(workspace))
        self.root = state_dir / "trash" / _key(self.workspace)

    def env(self, temp_dir: Path, inbox_dir: Path | None = None) -> dict[str, str]:
        """What the shim needs in a command's environment (its inbox, the workspace, itself).

        Args:
            temp_dir: The session's temp dir (the shim's directory is in it).
            inbox_dir: The session's inbox on the state dir's disk (``SandboxPolicy.trash_inbox``,
                made by the host); None uses one inside ``temp_dir``.
        """
        inbox = inbox_dir if inbox_dir is not None else self.inbox(temp_dir)
        return {
            "CODEMODE_TRASH_ROOT": str(self.workspace),
            "CODEMODE_TRASH_INBOX": str(inbox),
            "CODEMODE_SHIM_DIR": str(self.state_dir / SHIM_DIR_NAME),
        }

    def inbox(self, temp_dir: Path) -> Path:
        """A session's inbox (made when missing; a link planted in its place is replaced)."""
        with anchor(temp_dir) as temp_fd:
            os.close(_own_dir(temp_fd, TRASH_INBOX))
        return temp_dir / TRASH_INBOX

    def file(self, temp_dir: Path, inbox_dir: Path | None = None) -> list[TrashEntry]:
        """File the complete entries of one session's inbox into the trash; the entries filed.

        Args:
            temp_dir: The session's temp dir (made by the host).
            inbox_dir: Its inbox on the state dir's disk, or None for one inside ``temp_dir``
                (``TRASH_INBOX``).
        """
        try:
            if inbox_dir is not None:
                with anchor(inbox_dir) as inbox_fd:
                    return self._file_inbox(inbox_fd, str(inbox_dir))
            with anchor(temp_dir) as temp_fd:
                return self._file_session(temp_fd, str(temp_dir))
        except UnsafePath:
            return []

    def file_ended(self, temp_dir: Path) -> list[TrashEntry]:
        """At a session's end: file its inbox (``STATE/tmp/s-<id>.trash``) and the one inside its
        temp dir (``TRASH_INBOX``), before they go with it. Only this session's: at every end
        `file_all` walked every session of the state dir, with 1,000 sessions ~1,000 owner
        records read per end, which made the HTTP front's CPU per call grow with its sessions."""
        return self.file(temp_dir, temp_dir.with_name(temp_dir.name + INBOX_SUFFIX)) + self.file(temp_dir)

    def file_all(self) -> None:
        """File the inbox entries of every session of this state dir (``STATE/tmp/s-*.trash``,
        and ``TRASH_INBOX`` inside ``STATE/tmp/s-*``; no link followed) that belong to this
        workspace."""
        try:
            with anchor(self.state_dir / "tmp") as tmp_fd:
                for name in sorted(listdir_at(tmp_fd)):
                    if not name.startswith(_SESSION_PREFIX) or not is_dir_at(tmp_fd, name):
                        continue
                    try:
                        session_fd = open_dir_at(tmp_fd, name)
                    except UnsafePath:
                        continue
                    shown = str(self.state_dir / "tmp" / name)
                    if not self._owns(tmp_fd, name.removesuffix(INBOX_SUFFIX), shown):
                        os.close(session_fd)
                        continue
                    try:
                        if name.endswith(INBOX_SUFFIX):
                            self._file_inbox(session_fd, shown)
                        else:
                            self._file_session(session_fd, shown)
                    finally:
                        os.close(session_fd)
        except UnsafePath:
            return

    def _owns(self, tmp_fd: int, session: str, shown: str) -> bool:
        """Whether the session ``session`` of ``STATE/tmp`` is this workspace's, by the record its
        host wrote beside it (`OWNER_SUFFIX`), out of its commands' reach. What an entry's own
        ``meta.json`` claims is never the test: a command writes it."""
        try:
            owner = read_text_at(tmp_fd, session + OWNER_SUFFIX, cap=_META_CAP)
        except UnsafePath:
            log.warning("not filing the trash inbox of %s: no record of its session's workspace", shown)
            return False
        return owner == str(self.workspace)

    def _file_session(self, temp_fd: int, shown: str) -> list[TrashEntry]:
        try:
            inbox_fd = open_dir_at(temp_fd, TRASH_INBOX)
        except UnsafePath:
            return []  # none, or a link a command planted (refused and logged): nothing to file
        try:
            return self._file_inbox(inbox_fd, f"{shown}/{TRASH_INBOX}")
        finally:
            os.close(inbox_fd)

    def _file_inbox(self, inbox_fd: int, shown: str) -> list[TrashEntry]:
        try:
            names = sorted(n for n in listdir_at(inbox_fd) if not n.startswith("."))
        except UnsafePath:
            return []
        if len(names) > _MAX_FILED:
            log.warning(
                "trash inbox %s holds %d entries; filing the first %d, refusing the rest",
                shown,
                len(names),
                _MAX_FILED,
            )
            names = names[:_MAX_FILED]
        filed: list[TrashEntry] = []
        root_fd: int | None = None
        try:
            for name in names:
                if not is_dir_at(inbox_fd, name):
                    continue
                try:
                    meta = json.loads(read_text_at(inbox_fd, f"{name}/meta.json", cap=_META_CAP))
                except UnsafePath:
                    continue  # incomplete, or not a regular file (a FIFO, a link): refused and logged
                except ValueError:
                    continue
                claimed = meta.get("path") if isinstance(meta, dict) else None
                if not isinstance(claimed, str) or not _inside(claimed, self.workspace):
                    # The session is this workspace's: an entry naming another path was not the
                    # shim's (it moves only workspace paths); a command wrote it. Refused.
                    log.warning(
                        "refusing trash entry %s/%s: its path is outside %s", shown, name, self.workspace
                    )
                    continue
                if root_fd is None:
                    self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
                    root_fd = open_anchor(self.root)
                try:
                    _move_entry(inbox_fd, name, root_fd)
                except (OSError, UnsafePath) as exc:
                    log.warning("could not file trash entry %s/%s: %s", shown, name, exc)
                    continue
                entry = self._entry_at(root_fd, name)
                if entry is not None:
                    filed.append(entry)
        finally:
            if root_fd is not None:
                os.close(root_fd)
        return filed

    def _entry_at(self, root_fd: int, name: str) -> TrashEntry | None:
        try:
            meta = json.loads(read_text_at(root_fd, f"{name}/meta.json", cap=_META_CAP))
            return TrashEntry(
                id=name,
                path=str(meta["path"]),
                kind=str(meta.get("kind", "file")),
                deleted_at=float(meta.get("deleted_at", 0.0)),
                location=str(self.root / name / "item"),
            )
        except (UnsafePath, ValueError, KeyError, TypeError):
            return None

    def entries(self) -> list[TrashEntry]:
        """The trash, oldest first."""
        try:
            with anchor(self.root) as root_fd:
                names = sorted(
                    n for n in listdir_at(root_fd) if not n.startswith(".") and is_dir_at(root_fd, n)
                )
                found = [self._entry_at(root_fd, name) for name in names]
        except UnsafePath:
            return []
        return sorted((e for e in found if e is not None), key=lambda e: (e.deleted_at, e.id))

    def restore(self, entry_id: str) -> TrashEntry:
        """Put an entry back where it was.

        Raises:
            ToolError: No such entry (``not_found``), something exists there now
                (``already_exists``), or its path is outside this workspace or leads out of it
                through a symlink (``denied_by_policy``).
        """
        entry = next((e for e in self.entries() if e.id == entry_id), None)
        if entry is None:
            raise ToolError(
                f"no trash entry {entry_id!r} for {self.workspace}; `codemode trash list` shows them",
                code=ErrorCode.NOT_FOUND,
            )
        target = Path(os.path.normpath(entry.path))
        if not _inside(str(target), self.workspace):
            raise ToolError(
                f"trash entry {entry_id} names {target}, outside the workspace {self.workspace}",
                code=ErrorCode.DENIED_BY_POLICY,
            )
        parts = target.relative_to(self.workspace).parts
        with anchor(self.workspace) as workspace_fd:
            parent_fd = self._restore_parent(workspace_fd, parts[:-1], entry_id, target)
            try:
                name = parts[-1]
                try:
                    os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    raise ToolError(
                        f"cannot restore {entry_id}: {target} exists now; move it away first",
                        code=ErrorCode.ALREADY_EXISTS,
                    )
                with anchor(self.root) as root_fd:
                    entry_fd = open_dir_at(root_fd, entry_id)
                    try:
                        try:
                            rename_at(entry_fd, "item", parent_fd, name)
                        except OSError as exc:
                            if exc.errno != errno.EXDEV:
                                raise
                            # Another file system: copied (links as links) into the directory
                            # walked above, by fds.
                            copy_tree_at(entry_fd, "item", parent_fd, name)
                    finally:
                        os.close(entry_fd)
                    remove_at(root_fd, entry_id)
            finally:
                os.close(parent_fd)
        return entry

    def _restore_parent(self, workspace_fd: int, parts: tuple[str, ...], entry_id: str, target: Path) -> int:
        """The directory ``parts`` beneath the workspace, made where missing, opened without
        following a link.

        Raises:
            ToolError: A symlink or a file is on the way (``denied_by_policy``).
        """
        current = os.dup(workspace_fd)
        try:
            for part in parts:
                step = make_dir_at(current, part, 0o777)
                os.close(current)
                current = step
        except UnsafePath as exc:
            os.close(current)
            raise ToolError(
                f"cannot restore {entry_id}: {target.parent} leads out of the workspace (a symlink) or "
                "is not a directory",
                code=ErrorCode.DENIED_BY_POLICY,
            ) from exc
        return current

    def empty(self) -> int:
        """Delete everything in this workspace's trash for good; how many entries."""
        count = 0
        for entry in self.entries():
            with contextlib.suppress(OSError):
                shutil.rmtree(Path(entry.location).parent)
                count += 1
        return count


def _inside(path: str, root: Path, *, allow_root: bool = False) -> bool:
    normal = os.path.normpath(path)
    base = str(root)
    return (allow_root and normal == base) or normal.startswith(base.rstrip("/") + "/")
