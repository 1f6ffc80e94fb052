"""The safe-open module on real files, FIFOs, links and directories: each function, through
openat2 where the kernel has it and through the O_NOFOLLOW walk it falls back to."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from codemode.sandbox import (
    UnsafePath,
    _safeopen,
    anchor,
    aread_text,
    copy_tree_at,
    listdir_at,
    make_dir_at,
    open_anchor,
    read_bytes_at,
    read_file_beneath,
    remove_at,
    rename_at,
    write_fresh_at,
)


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test runs twice: with openat2 as the kernel gives it, and with the walk."""
    if request.param == "walk":
        monkeypatch.setattr(_safeopen._OPENAT2, "libc", None)
    elif _safeopen._OPENAT2.libc is None:
        pytest.skip("no openat2 on this kernel")
    yield request.param


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("text")
    os.mkfifo(tmp_path / "d" / "fifo")
    os.symlink("/dev/zero", tmp_path / "d" / "zero")
    os.symlink("d", tmp_path / "to-d")
    os.symlink("/etc", tmp_path / "d" / "etc")
    return tmp_path


def _code(call: object) -> str:
    with pytest.raises(UnsafePath) as caught:
        assert callable(call)
        call()
    return str(caught.value.code)


def test_reads_regular_files_and_refuses_everything_else(tree: Path, resolution: str) -> None:
    with anchor(tree) as fd:
        assert read_bytes_at(fd, "d/f") == b"text"
        assert read_bytes_at(fd, "./d//f") == b"text"
        assert _code(lambda: read_bytes_at(fd, "d/fifo")) == "not_a_file"
        assert _code(lambda: read_bytes_at(fd, "d/zero")) == "denied_by_sandbox"
        assert _code(lambda: read_bytes_at(fd, "to-d/f")) == "denied_by_sandbox"
        assert _code(lambda: read_bytes_at(fd, "d/etc/hostname")) == "denied_by_sandbox"
        assert _code(lambda: read_bytes_at(fd, "d/../d/f")) == "denied_by_sandbox"
        assert _code(lambda: read_bytes_at(fd, "d/f/x")) == "denied_by_sandbox"
        assert _code(lambda: read_bytes_at(fd, "d/none")) == "not_found"
        assert _code(lambda: read_bytes_at(fd, "d/f", cap=3)) == "too_large"
        assert read_bytes_at(fd, "d/f", cap=4) == b"text"


def test_lists_directories_without_following_links(tree: Path, resolution: str) -> None:
    with anchor(tree) as fd:
        assert sorted(listdir_at(fd, "d")) == ["etc", "f", "fifo", "zero"]
        assert _code(lambda: listdir_at(fd, "to-d")) == "denied_by_sandbox"
        assert _code(lambda: listdir_at(fd, "d/etc")) == "denied_by_sandbox"


def test_anchor_refuses_a_link(tree: Path) -> None:
    assert _code(lambda: open_anchor(tree / "to-d")) == "denied_by_sandbox"
    assert _code(lambda: open_anchor(tree / "missing")) == "not_found"


def test_fresh_writes_never_replace_or_follow(tree: Path, resolution: str) -> None:
    with anchor(tree) as fd:
        write_fresh_at(fd, "new", b"fresh", 0o640)
        assert (tree / "new").read_bytes() == b"fresh"
        assert (tree / "new").stat().st_mode & 0o777 == 0o640
        assert _code(lambda: write_fresh_at(fd, "new", b"again")) == "already_exists"
        assert _code(lambda: write_fresh_at(fd, "to-d", b"through")) == "already_exists"
        assert _code(lambda: write_fresh_at(fd, "d/f", b"nested")) == "denied_by_sandbox"
        assert (tree / "d" / "f").read_text() == "text"


def test_make_dir_rename_and_remove_stay_in_their_dir_fds(tree: Path, resolution: str) -> None:
    with anchor(tree) as fd:
        sub = make_dir_at(fd, "sub")
        os.close(make_dir_at(fd, "sub"))  # exists: opened again
        try:
            write_fresh_at(sub, "a", b"1")
            rename_at(sub, "a", fd, "b")
        finally:
            os.close(sub)
        assert (tree / "b").read_bytes() == b"1"
        assert _code(lambda: make_dir_at(fd, "to-d")) == "denied_by_sandbox"
        remove_at(fd, "to-d")  # the link goes, not what it names
        assert not (tree / "to-d").exists() and (tree / "d" / "f").exists()
        remove_at(fd, "sub")
        remove_at(fd, "missing")
        assert not (tree / "sub").exists()


def test_copy_tree_copies_links_as_links_and_skips_fifos(
    tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    target = tmp_path_factory.mktemp("target")
    with anchor(tree) as src, anchor(target) as dst:
        skipped = copy_tree_at(src, "d", dst, "copy")
        assert skipped == ["d/fifo"]
        assert _code(lambda: copy_tree_at(src, "d", dst, "copy")) == "already_exists"
    assert (target / "copy" / "f").read_text() == "text"
    assert os.readlink(target / "copy" / "zero") == "/dev/zero"
    assert os.readlink(target / "copy" / "etc") == "/etc"
    assert not (target / "copy" / "fifo").exists()


def test_copy_tree_is_bounded(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    target = tmp_path_factory.mktemp("target")
    with anchor(tree) as src, anchor(target) as dst:
        assert _code(lambda: copy_tree_at(src, "d", dst, "c1", max_entries=2)) == "too_large"
        assert _code(lambda: copy_tree_at(src, "d", dst, "c2", max_bytes=3)) == "too_large"


def test_path_helpers_and_the_async_read(tree: Path) -> None:
    assert read_file_beneath(tree, Path("d/f"), cap=10) == b"text"

    async def main() -> str:
        return await aread_text(tree, "d/f")

    assert anyio.run(main) == "text"
