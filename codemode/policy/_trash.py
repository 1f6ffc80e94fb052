"""Protected deletes: the per-workspace trash in the state directory.

Confined commands cannot write the state directory, so the ``rm`` shim (``_rm.py``, first on
their PATH) moves what it removes into an inbox inside the session's own temp dir; the host
files complete inbox entries into ``STATE/trash/<workspace key>/<id>/`` (``meta.json`` and
``item``) after each foreground run, when a session closes, and before every ``codemode trash``
command. Restoring writes only inside the trash's own workspace, never over an existing path and
never through a symlink that leads out of it: an inbox entry is written by a confined command,
so its claimed path is not trusted further than the workspace it could write anyway.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import pydantic

from codemode.errors import ErrorCode, ToolError

__all__ = ["TRASH_INBOX", "Trash", "TrashEntry", "install_rm_shim"]

TRASH_INBOX = ".codemode-trash"
"""The inbox's name inside a session's temp dir."""
_SHIM_DIR = ".codemode-bin"
_SHIM_SOURCE = Path(__file__).with_name("_rm.py")


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


def install_rm_shim(temp_dir: Path) -> Path:
    """The directory holding the ``rm`` shim for a session's commands (written once).

    Returns:
        The directory to put first on the commands' PATH.
    """
    folder = temp_dir / _SHIM_DIR
    shim = folder / "rm"
    if not shim.exists():
        folder.mkdir(mode=0o700, exist_ok=True)
        text = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(_SHIM_SOURCE))} "$@"\n'
        partial = folder / ".rm.tmp"
        partial.write_text(text)
        partial.chmod(0o755)
        partial.replace(shim)
    return folder


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

    def env(self, temp_dir: Path) -> dict[str, str]:
        """What the shim needs in a command's environment (its inbox, the workspace, itself)."""
        return {
            "CODEMODE_TRASH_ROOT": str(self.workspace),
            "CODEMODE_TRASH_INBOX": str(self.inbox(temp_dir)),
            "CODEMODE_SHIM_DIR": str(temp_dir / _SHIM_DIR),
        }

    def inbox(self, temp_dir: Path) -> Path:
        """A session's inbox (made when missing)."""
        path = temp_dir / TRASH_INBOX
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    def file(self, inbox: Path) -> list[TrashEntry]:
        """File the complete entries of one inbox into the trash; the entries filed."""
        try:
            names = sorted(n for n in os.listdir(inbox) if not n.startswith("."))
        except OSError:
            return []
        filed: list[TrashEntry] = []
        for name in names:
            source = inbox / name
            try:
                meta = json.loads((source / "meta.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            claimed = meta.get("path") if isinstance(meta, dict) else None
            if not isinstance(claimed, str) or not _inside(claimed, self.workspace):
                continue  # another workspace's (a later host of it files it) or not an rm entry
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            target = self.root / name
            try:
                os.rename(source, target)
            except OSError:
                try:
                    shutil.move(str(source), str(target))
                except OSError:
                    continue
            entry = self._entry(target)
            if entry is not None:
                filed.append(entry)
        return filed

    def file_all(self) -> None:
        """File every session's inbox entries that belong to this workspace."""
        for inbox in (self.state_dir / "tmp").glob(f"*/{TRASH_INBOX}"):
            self.file(inbox)

    def _entry(self, folder: Path) -> TrashEntry | None:
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            return TrashEntry(
                id=folder.name,
                path=str(meta["path"]),
                kind=str(meta.get("kind", "file")),
                deleted_at=float(meta.get("deleted_at", 0.0)),
                location=str(folder / "item"),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def entries(self) -> list[TrashEntry]:
        """The trash, oldest first."""
        try:
            folders = sorted(self.root.iterdir())
        except OSError:
            return []
        found = [self._entry(folder) for folder in folders if folder.is_dir()]
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
        if os.path.lexists(target):
            raise ToolError(
                f"cannot restore {entry_id}: {target} exists now; move it away first",
                code=ErrorCode.ALREADY_EXISTS,
            )
        existing = target.parent
        while not existing.exists():
            existing = existing.parent
        if not _inside(os.path.realpath(existing), self.workspace, allow_root=True):
            raise ToolError(
                f"cannot restore {entry_id}: {target.parent} leads out of the workspace (a symlink)",
                code=ErrorCode.DENIED_BY_POLICY,
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(entry.location, target)
        except OSError:
            shutil.move(entry.location, str(target))
        shutil.rmtree(Path(entry.location).parent, ignore_errors=True)
        return entry

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
