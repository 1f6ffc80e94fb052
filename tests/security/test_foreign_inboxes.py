"""Trash inboxes that are not this host's: another state dir's sessions, reached through a link
in this state dir's ``tmp/`` or planted by a command as its own inbox. A host files only the
inboxes of its own state dir's session temp dirs (``STATE/tmp/s-*``), never through a link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from codemode.policy import Trash
from codemode.sandbox._landlock import landlock_status
from security._host_driver import run_host


def _foreign_entry(other_state: Path, workspace: Path) -> Path:
    """An entry in a session inbox of another state dir, claiming a path of our workspace."""
    entry = other_state / "tmp" / "s-theirs" / ".codemode-trash" / "e1"
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text(json.dumps({"path": str(workspace / "x"), "kind": "file"}))
    (entry / "item").write_text("theirs\n")
    return entry


def test_a_linked_session_dir_of_another_state_dir_is_not_filed(tmp_path: Path) -> None:
    workspace, state, other = tmp_path / "ws", tmp_path / "state", tmp_path / "other-state"
    workspace.mkdir()
    entry = _foreign_entry(other, workspace)
    (state / "tmp").mkdir(parents=True)
    os.symlink(other / "tmp" / "s-theirs", state / "tmp" / "s-linked")
    trash = Trash(state, workspace)
    trash.file_all()
    assert trash.entries() == []
    assert (entry / "item").read_text() == "theirs\n"


def test_own_session_inboxes_are_filed(tmp_path: Path) -> None:
    """The same entry in this state dir's own session dir is filed: the rule is not "file nothing"."""
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    _foreign_entry(state, workspace)
    trash = Trash(state, workspace)
    trash.file_all()
    assert [e.id for e in trash.entries()] == ["e1"]
    assert Path(trash.entries()[0].location).read_text() == "theirs\n"


@pytest.mark.skipif(landlock_status().abi < 4, reason="confined commands need Landlock ABI >= 4")
def test_a_command_cannot_point_its_inbox_at_another_state_dir(tmp_path: Path) -> None:
    workspace, state, other = tmp_path / "ws", tmp_path / "state", tmp_path / "other-state"
    workspace.mkdir()
    entry = _foreign_entry(other, workspace)
    inbox = entry.parent
    plant = f"rmdir $TMPDIR/.codemode-trash; ln -s {inbox} $TMPDIR/.codemode-trash && echo planted"
    answers = run_host(workspace, state, [{"command": plant}, {"command": "echo next"}])
    assert "planted" in answers[0]["text"] and "trashed" not in answers[1]["data"]
    assert (entry / "item").read_text() == "theirs\n"
