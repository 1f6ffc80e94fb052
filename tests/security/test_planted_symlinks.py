"""Symlinks a command plants where the host writes or reads: the ``rm`` shim's directory and
the trash inbox in the session's ``$TMPDIR``. The host removes a planted link and writes its
own file fresh; it never writes or reads through the link."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.sandbox._landlock import landlock_status
from tests.security._host_driver import run_host

pytestmark = pytest.mark.skipif(
    landlock_status().abi < 4, reason="confined commands need Landlock ABI >= 4 (network off)"
)


def _places(tmp_path: Path) -> tuple[Path, Path, Path]:
    workspace, state, target = tmp_path / "ws", tmp_path / "state", tmp_path / "target"
    workspace.mkdir()
    target.mkdir()
    (target / "keep").write_text("untouched\n")
    return workspace, state, target


def test_shim_dir_replaced_by_a_link_is_not_written_through(tmp_path: Path) -> None:
    workspace, state, target = _places(tmp_path)
    plant = f"rm -rf $TMPDIR/.codemode-bin && ln -s {target} $TMPDIR/.codemode-bin && echo planted"
    answers = run_host(
        workspace,
        state,
        [
            {"command": plant},
            {"command": "echo next"},
            {"command": "touch gone && rm gone && ls -A"},  # the shim still works, fresh
        ],
    )
    assert "planted" in answers[0]["text"] and "next" in answers[1]["text"]
    assert sorted(p.name for p in target.iterdir()) == ["keep"]
    assert (target / "keep").read_text() == "untouched\n"
    assert [t["path"] for t in answers[2]["data"]["trashed"]] == [str(workspace / "gone")]


def test_inbox_replaced_by_a_link_is_not_followed(tmp_path: Path) -> None:
    """An entry the command could not write (outside its roots) is reached only through the
    link: filing it would move a directory the command cannot touch into the host's trash."""
    workspace, state, target = _places(tmp_path)
    entry = target / "e1"
    entry.mkdir()
    (entry / "meta.json").write_text(f'{{"path": "{workspace}/victim", "kind": "file"}}')
    (entry / "item").write_text("not the command's\n")
    plant = f"rmdir $TMPDIR/.codemode-trash; ln -s {target} $TMPDIR/.codemode-trash && echo planted"
    answers = run_host(workspace, state, [{"command": plant}, {"command": "echo next"}])
    assert "planted" in answers[0]["text"] and "next" in answers[1]["text"]
    assert "trashed" not in answers[1]["data"]
    assert (entry / "item").read_text() == "not the command's\n"
    assert not (state / "trash").exists() or not any((state / "trash").iterdir())
