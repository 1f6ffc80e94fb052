"""The launcher (launcher.c): how it is loaded, and its refusal paths (real processes)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from codemode.errors import SandboxUnavailable
from codemode.sandbox import ENFORCEMENT_FAILED_EXIT, ENFORCEMENT_FAILED_MARKER, LaunchSpec, _launcher, launch
from codemode.sandbox._launcher import launcher_fd, launcher_path, launcher_unavailable_reason
from tests.sandbox.sandbox_support import Dirs, needs_landlock

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def helper() -> int:
    fd = launcher_fd()
    assert fd is not None, f"the launcher is not built: {launcher_unavailable_reason()}"
    return fd


def _run(
    helper: int, words: list[str], cwd: Path, pass_fds: tuple[int, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [f"/proc/self/fd/{helper}", *words],
        pass_fds=(helper, *pass_fds),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_launcher_is_built_into_the_package() -> None:
    path = launcher_path()
    assert path.parent == ROOT / "codemode" / "sandbox" and path.is_file() and os.access(path, os.X_OK)


def test_launcher_without_arguments_refuses(helper: int, tmp_path: Path) -> None:
    proc = _run(helper, [], tmp_path)
    assert proc.returncode == ENFORCEMENT_FAILED_EXIT
    assert (
        proc.stderr.startswith(ENFORCEMENT_FAILED_MARKER) and "arguments failed with errno 22" in proc.stderr
    )


def test_launcher_memfd_is_sealed(helper: int) -> None:
    with pytest.raises(PermissionError):
        open(f"/proc/self/fd/{helper}", "wb")


def test_the_launcher_runs_a_command_unconfined(helper: int, tmp_path: Path) -> None:
    proc = _run(helper, [f"cwd={tmp_path}", "--", "/bin/sh", "sh", "-c", "pwd; echo $0"], Path("/"))
    assert proc.returncode == 0 and proc.stdout.split() == [str(tmp_path), "sh"], proc.stderr


def test_a_missing_program_exits_127(helper: int, tmp_path: Path) -> None:
    proc = _run(helper, ["--", "/no/such/program", "x"], tmp_path)
    assert proc.returncode == 127 and proc.stderr == "codemode sandbox: cannot execute /no/such/program\n"


@needs_landlock
def test_launcher_refuses_a_bad_ruleset_fd(helper: int, dirs: Dirs) -> None:
    with open("/dev/null") as not_a_ruleset:
        fd = not_a_ruleset.fileno()
        # The seccomp word stands in for the program: never reached.
        words = [f"ruleset={fd}", f"seccomp={fd}", "--", "/usr/bin/touch", "touch", "x"]
        proc = _run(helper, words, dirs.ws, (fd,))
    assert proc.returncode == ENFORCEMENT_FAILED_EXIT
    assert proc.stderr.startswith(ENFORCEMENT_FAILED_MARKER)
    assert "landlock_restrict_self failed with errno 77" in proc.stderr  # EBADFD
    assert not (dirs.ws / "x").exists()


@pytest.mark.parametrize(
    "words",
    [
        ["ruleset=5"],
        ["seccomp=5"],
        ["cgroup=x"],
        ["ruleset="],
        ["cgroup=-5"],
        ["shm=99999999999"],
        ["unknown=1"],
        ["cwd=/", "cwd=/tmp"],
        ["cgroup=1"] * 5,
    ],
    ids=[
        "ruleset-without-filter",
        "filter-without-ruleset",
        "not-a-number",
        "empty",
        "negative",
        "too-large",
        "unknown-word",
        "twice",
        "too-many-cgroups",
    ],
)
def test_launcher_refuses_half_a_confinement_and_bad_words(helper: int, dirs: Dirs, words: list[str]) -> None:
    proc = _run(helper, [*words, "--", "/usr/bin/touch", "touch", "x"], dirs.ws)
    assert proc.returncode == ENFORCEMENT_FAILED_EXIT
    assert "reading the launcher's arguments failed with errno 22" in proc.stderr
    assert not (dirs.ws / "x").exists()


def test_launcher_refuses_without_the_separator_or_the_command(helper: int, dirs: Dirs) -> None:
    for words in (["/usr/bin/touch", "touch", "x"], ["--", "/usr/bin/touch"]):
        proc = _run(helper, words, dirs.ws)
        assert proc.returncode == ENFORCEMENT_FAILED_EXIT and "arguments failed" in proc.stderr
    assert not (dirs.ws / "x").exists()


@needs_landlock
def test_launcher_refuses_a_bad_filter(helper: int, dirs: Dirs) -> None:
    from codemode.sandbox import prepare_confinement

    with prepare_confinement(dirs.policy()) as conf, open(dirs.out / "existing") as not_a_filter:
        fds = conf.fds()
        ruleset = fds["ruleset_fd"]
        assert ruleset is not None
        bad = not_a_filter.fileno()
        words = [f"ruleset={ruleset}", f"seccomp={bad}", "--", "/usr/bin/touch", "touch", "x"]
        proc = _run(helper, words, dirs.ws, (ruleset, bad))
    assert proc.returncode == ENFORCEMENT_FAILED_EXIT
    assert (
        "installing the seccomp filter failed" in proc.stderr or "reading the seccomp filter" in proc.stderr
    )
    assert not (dirs.ws / "x").exists()


def test_the_launcher_binds_the_directory_the_host_opened(helper: int, tmp_path: Path) -> None:
    # Another directory put at the path after the host opened it is not what /dev/shm becomes.
    given, other = tmp_path / "shm", tmp_path / "other"
    given.mkdir()
    other.mkdir()
    fd = os.open(given, os.O_PATH | os.O_DIRECTORY)
    try:
        os.rename(given, tmp_path / "moved")
        os.rename(other, given)
        proc = _run(helper, [f"shm={fd}", "--", "/usr/bin/touch", "touch", "/dev/shm/x"], tmp_path, (fd,))
    finally:
        os.close(fd)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "moved" / "x").exists() and not (given / "x").exists()
    assert (
        not os.path.exists("/dev/shm/x")
        or os.stat("/dev/shm/x").st_ino != os.stat(tmp_path / "moved" / "x").st_ino
    )


def test_launcher_refuses_a_removed_shm_directory(helper: int, tmp_path: Path) -> None:
    given = tmp_path / "shm"
    given.mkdir()
    fd = os.open(given, os.O_PATH | os.O_DIRECTORY)
    try:
        given.rmdir()
        given.mkdir()  # a new directory at the same path is another inode
        proc = _run(helper, [f"shm={fd}", "--", "/usr/bin/touch", "touch", "x"], tmp_path, (fd,))
    finally:
        os.close(fd)
    assert proc.returncode == ENFORCEMENT_FAILED_EXIT
    assert proc.stderr.startswith(ENFORCEMENT_FAILED_MARKER)
    assert "opening the session's /dev/shm directory" in proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("damage", ["missing", "not-executable", "a-link", "not-the-launcher"])
def test_a_missing_or_damaged_launcher_refuses_every_command(
    damage: str, tmp_path: Path, dirs: Dirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "codemode-launcher"
    if damage == "not-executable":
        shutil.copy(launcher_path(), fake)
        fake.chmod(0o644)
    elif damage == "a-link":
        fake.symlink_to(launcher_path())
    elif damage == "not-the-launcher":
        shutil.copy("/bin/true", fake)  # runs, but does not answer the self-test
    monkeypatch.setenv("CODEMODE_LAUNCHER", str(fake))
    monkeypatch.setattr(_launcher, "_state", {})  # this process's launcher is loaded afresh
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        with pytest.raises(SandboxUnavailable, match="launcher") as caught:
            launch(LaunchSpec(["true"], str(dirs.ws), dict(os.environ), dirs.policy(), stdio=(devnull,) * 3))
    finally:
        os.close(devnull)
    assert str(fake) in str(caught.value)
