"""FIFOs and devices where the host reads a file a command wrote: the trash inbox's
``meta.json``, a repository's ``.git/HEAD``. The host refuses them (logged) and keeps
answering; a FIFO left behind does not freeze the next host either. Each host runs in a
process of its own, waited for with a bound (see ``_host_driver``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from codemode.sandbox import UnsafePath, anchor, read_bytes_at
from codemode.sandbox._landlock import landlock_status
from tests.security._host_driver import run_host

pytestmark = pytest.mark.skipif(
    landlock_status().abi < 4, reason="confined commands need Landlock ABI >= 4 (network off)"
)


def _places(tmp_path: Path) -> tuple[Path, Path]:
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    return workspace, state


def test_fifo_as_an_inbox_meta_json_does_not_freeze_the_host(tmp_path: Path) -> None:
    workspace, state = _places(tmp_path)
    plant = "mkdir -p $TMPDIR/.codemode-trash/x && mkfifo $TMPDIR/.codemode-trash/x/meta.json && echo planted"
    first, second = run_host(workspace, state, [{"command": plant}, {"command": "echo still-answering"}])
    assert "planted" in first["text"]
    assert "still-answering" in second["text"] and not second["error"]


def test_dev_zero_link_as_an_inbox_meta_json_is_not_read(tmp_path: Path) -> None:
    workspace, state = _places(tmp_path)
    plant = "mkdir -p $TMPDIR/.codemode-trash/x && ln -s /dev/zero $TMPDIR/.codemode-trash/x/meta.json && echo planted"
    first, second = run_host(workspace, state, [{"command": plant}, {"command": "echo still-answering"}])
    assert "planted" in first["text"]
    assert "still-answering" in second["text"]
    assert not (state / "trash").exists() or not any((state / "trash").rglob("meta.json"))


def test_a_fifo_left_in_an_old_session_inbox_does_not_freeze_a_later_host(tmp_path: Path) -> None:
    """What a crashed host leaves: its session temp dir with the planted FIFO. Every later host
    files every inbox of its state dir (at close): it must refuse the FIFO, not wait on it."""
    workspace, state = _places(tmp_path)
    entry = state / "tmp" / "s-crashed" / ".codemode-trash" / "x"
    entry.mkdir(parents=True)
    os.mkfifo(entry / "meta.json")
    (entry / "item").write_text("kept")
    for _ in range(2):  # the next host, and the one after it
        (answer,) = run_host(workspace, state, [{"command": "echo alive"}])
        assert "alive" in answer["text"]
    assert (entry / "item").read_text() == "kept"  # refused, left where it was


def _repo_with_fifo_head(workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    head = workspace / ".git" / "HEAD"
    head.unlink()
    os.mkfifo(head)  # as a repository unpacked from an archive can hold


def test_fifo_as_git_head_does_not_freeze_a_read_only_host(tmp_path: Path) -> None:
    workspace, state = _places(tmp_path)
    _repo_with_fifo_head(workspace)
    first, second = run_host(
        workspace,
        state,
        [{"command": "echo one"}, {"command": "echo two"}],
        sandbox="read-only",
        network=False,
    )
    assert "one" in first["text"] and "two" in second["text"]
    assert second["data"]["workspace_revision"] is None  # HEAD unreadable: no revision, no wait


def test_read_file_of_a_fifo_is_refused_and_the_host_answers(tmp_path: Path) -> None:
    """The file tools resolve race-free (``sandbox._fs``) and open non-blocking: a FIFO the
    model asks to read is refused as not a file, whatever writes to it or not."""
    workspace, state = _places(tmp_path)
    os.mkfifo(workspace / "pipe")
    first, second = run_host(
        workspace,
        state,
        [{"tool": "read_file", "arguments": {"path": "pipe"}}, {"command": "echo still-answering"}],
    )
    assert first["error"] and "FIFO" in first["text"], first["text"]
    assert "still-answering" in second["text"]


def test_safe_open_refuses_fifos_devices_links_and_oversized_files(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    (tmp_path / "d").mkdir()
    os.symlink("d", tmp_path / "via")
    (tmp_path / "d" / "f").write_bytes(b"12345")
    with anchor(tmp_path) as fd:
        assert read_bytes_at(fd, "d/f", cap=5) == b"12345"
        expected = {
            "fifo": "not_a_file",
            "zero": "denied_by_sandbox",
            "via/f": "denied_by_sandbox",
            "../x": "denied_by_sandbox",
            "/etc/hostname": "denied_by_sandbox",
            "d": "not_a_file",
            "missing": "not_found",
        }
        for rel, code in expected.items():
            with pytest.raises(UnsafePath) as caught:
                read_bytes_at(fd, rel)
            assert caught.value.code == code, rel
        with pytest.raises(UnsafePath) as caught:
            read_bytes_at(fd, "d/f", cap=4)
        assert caught.value.code == "too_large"
