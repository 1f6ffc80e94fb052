"""The descriptor walk under the file tools, on real files, with openat2 and with the openat fallback."""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codemode.sandbox import _fs
from codemode.sandbox._fs import (
    Changed,
    EnteredProtected,
    SymlinkLoop,
    open_at,
    pseudo_fs,
    rename_into,
    reopen,
    walk,
)
from codemode.sandbox._paths import locate_readable
from codemode.sandbox._policy import SandboxPolicy

# Every test runs with openat2 (where the kernel has it) and with the O_NOFOLLOW openat walk.
pytestmark = pytest.mark.usefixtures("resolver")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """dirs, files and symlinks of every kind: relative, absolute, chained, dangling, into a file."""
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f.txt").write_text("f")
    (tmp_path / "other").mkdir()
    (tmp_path / "rel").symlink_to("d/e")
    (tmp_path / "abs").symlink_to(tmp_path / "d")
    (tmp_path / "chain").symlink_to("rel")
    (tmp_path / "d" / "up").symlink_to("../other")
    (tmp_path / "tofile").symlink_to("d/e/f.txt")
    (tmp_path / "dangling").symlink_to("nowhere/x")
    (tmp_path / "root").symlink_to("/")
    return tmp_path


CASES = [
    "d/e/f.txt",
    "rel/f.txt",
    "abs/e/f.txt",
    "chain/f.txt",
    "chain/../e/f.txt",
    "d/up/../d/e",
    "d/up/new/deeper.txt",
    "tofile",
    "dangling",
    "dangling/../y",
    "missing/../d/e/./f.txt",
    "d/e/",
    "root",
    "rel/..",
    "new.txt",
]


@pytest.mark.parametrize("relative", CASES)
def test_walk_resolves_like_realpath(tree: Path, relative: str) -> None:
    before = open_fds()
    path = str(tree / relative)
    with walk(path) as found:
        assert found.path == os.path.realpath(path)
        if os.path.lexists(os.path.realpath(path)):
            assert found.fd is not None and found.st is not None
            assert not stat.S_ISLNK(found.st.st_mode)
            assert os.path.samestat(found.st, os.stat(found.path))
        else:
            assert found.fd is None
            assert os.path.join(found.parent_path, *found.missing_dirs, found.name) == found.path
            assert os.path.samestat(os.fstat(found.parent_fd), os.stat(found.parent_path))
    assert open_fds() == before


def test_walk_holds_o_path_descriptors_that_open_nothing(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # opening it for reading would block without a writer
    with walk(str(tmp_path / "fifo")) as found:
        assert found.fd is not None and found.st is not None
        assert stat.S_ISFIFO(found.st.st_mode)
        assert os.get_blocking(found.fd) and os.fstat(found.fd).st_ino == found.st.st_ino
    with walk("/proc/kmsg" if os.path.exists("/proc/kmsg") else "/proc/self/status") as found:
        assert found.fd is not None
        assert pseudo_fs(found.fd) == "procfs"


def test_pseudo_fs_names_kernel_file_systems(tmp_path: Path) -> None:
    def kind(path: str) -> str | None:
        fd = os.open(path, os.O_PATH)
        try:
            return pseudo_fs(fd)
        finally:
            os.close(fd)

    assert kind("/proc/self/status") == "procfs"
    assert kind("/sys") == "sysfs"
    assert kind(str(tmp_path)) is None


def test_a_component_after_a_file_is_not_a_directory(tree: Path) -> None:
    for relative in ("d/e/f.txt/x", "tofile/..", "d/e/f.txt/", "tofile/."):
        with pytest.raises(NotADirectoryError):
            walk(f"{tree}/{relative}")


def test_symlink_loop_ends(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    (tmp_path / "self").symlink_to("self/x")
    before = open_fds()
    for name in ("a/f", "self"):
        with pytest.raises(SymlinkLoop) as info:
            walk(str(tmp_path / name))
        assert info.value.at.startswith(str(tmp_path))
    assert open_fds() == before


def test_forty_symlinks_are_followed_not_more(tmp_path: Path) -> None:
    (tmp_path / "l0").write_text("end")
    for i in range(1, _fs.MAX_SYMLINKS + 2):
        (tmp_path / f"l{i}").symlink_to(f"l{i - 1}")
    with walk(str(tmp_path / f"l{_fs.MAX_SYMLINKS}")) as found:
        assert found.path == str(tmp_path / "l0")
    with pytest.raises(SymlinkLoop):
        walk(str(tmp_path / f"l{_fs.MAX_SYMLINKS + 1}"))


def test_protected_directory_is_refused_by_identity(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    st = state.stat()
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "in").symlink_to(state)
    with pytest.raises(EnteredProtected) as info:
        walk(str(tmp_path / "ws" / "in" / "db"), {(st.st_dev, st.st_ino): str(state)})
    assert info.value.root == str(state) and info.value.at == str(state / "db")


def test_state_dir_reached_through_a_bind_mount_is_refused(tmp_path: Path, resolver: str) -> None:
    # A bind mount is a second real path to the same directory: only its identity gives it away.
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("needs unshare and mount")
    state = tmp_path / "state"
    state.mkdir()
    (state / "secret").write_text("token")
    alias = tmp_path / "ws" / "alias"
    alias.mkdir(parents=True)
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from codemode.errors import SandboxDenied
        from codemode.sandbox._paths import check_readable
        from codemode.sandbox._policy import SandboxPolicy
        assert Path({str(alias / "secret")!r}).read_text() == "token"
        try:
            check_readable(SandboxPolicy(protected=(Path({str(state)!r}),)), Path("/"), {str(alias / "secret")!r})
        except SandboxDenied as exc:
            print("denied", exc.data["protected"])
        else:
            print("read")
        """
    )
    mount = f"mount --bind {shlex.quote(str(state))} {shlex.quote(str(alias))}"
    script = f"{mount} && exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    env = {**os.environ, "CODEMODE_FS_OPENAT2": "1" if resolver == "openat2" else "0"}
    proc = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", script], capture_output=True, text=True, env=env
    )
    if not proc.stdout:
        pytest.skip(f"no private mount namespace here: {proc.stderr.strip()}")
    assert proc.stdout.strip() == f"denied {state}", proc.stderr


def test_reopen_refuses_a_file_swapped_after_the_walk(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("SECRET")
    target = tmp_path / "f.txt"
    for swap in ("symlink", "file", "fifo", "removed"):
        target.write_text("public")
        with walk(str(target)) as found:
            target.unlink()
            if swap == "symlink":
                target.symlink_to(secret)
            elif swap == "file":
                target.write_text("other")
            elif swap == "fifo":
                os.mkfifo(target)  # an open for reading would block: reopen opens non-blocking
            with pytest.raises(Changed):
                reopen(found, os.O_RDONLY)
        if target.exists() or target.is_symlink():
            target.unlink()
    target.write_text("public")
    with walk(str(target)) as found:
        fd = reopen(found, os.O_RDONLY)
        assert os.read(fd, 100) == b"public"
        os.close(fd)


def test_open_at_never_follows_and_takes_one_component(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path)
    dfd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as info:
            open_at(dfd, "link", os.O_RDONLY)
        assert info.value.errno == errno.ELOOP
        with pytest.raises(OSError):
            open_at(dfd, "link", os.O_PATH | os.O_DIRECTORY)
        fd = open_at(dfd, "link", os.O_PATH)  # the symlink itself
        assert stat.S_ISLNK(os.fstat(fd).st_mode)
        os.close(fd)
        for bad in ("a/b", "..", ".", ""):
            with pytest.raises(ValueError):
                open_at(dfd, bad, os.O_PATH)
    finally:
        os.close(dfd)


def test_rename_without_replace_keeps_an_existing_file(tmp_path: Path) -> None:
    (tmp_path / "tmp").write_text("new")
    (tmp_path / "dst").write_text("theirs")
    dfd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):
            rename_into(dfd, "tmp", "dst", replace=False)
        assert (tmp_path / "dst").read_text() == "theirs"
        rename_into(dfd, "tmp", "fresh", replace=False)
        assert (tmp_path / "fresh").read_text() == "new" and not (tmp_path / "tmp").exists()
        rename_into(dfd, "fresh", "dst", replace=True)
        assert (tmp_path / "dst").read_text() == "new"
    finally:
        os.close(dfd)


def test_socket_is_located_without_connecting(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        with walk(str(path)) as found:
            assert found.st is not None and stat.S_ISSOCK(found.st.st_mode)
    finally:
        server.close()


def test_locate_readable_keeps_descriptors_until_closed(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    before = open_fds()
    found = locate_readable(SandboxPolicy(), tmp_path, "f")
    assert open_fds() == before + 2  # the directory and the file, as O_PATH
    found.close()
    found.close()
    assert open_fds() == before


def test_env_switch_forces_the_fallback(resolver: str) -> None:
    if resolver == "openat":
        pytest.skip("one run is enough")
    code = "from codemode.sandbox import _fs; print(_fs.openat2_available())"
    for value, expected in (("0", "False"), ("1", "True")):
        env = {**os.environ, "CODEMODE_FS_OPENAT2": value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == expected
