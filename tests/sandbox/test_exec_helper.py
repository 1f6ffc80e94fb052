"""The exec helper: reviewed assembly, exact bytes, and its refusal paths (real processes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_support import Dirs, needs_landlock

from codemode.sandbox import ENFORCEMENT_FAILED_EXIT, ENFORCEMENT_FAILED_MARKER
from codemode.sandbox._exec_helper import build_elf_x86_64, helper_fd, helper_unavailable_reason
from codemode.sandbox._exec_helper_code import CODE_X86_64

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def helper() -> int:
    fd = helper_fd()
    if fd is None:
        pytest.skip(f"exec helper unavailable here: {helper_unavailable_reason()}")
    return fd


@pytest.mark.skipif(
    shutil.which("as") is None or shutil.which("objcopy") is None, reason="needs GNU as/objcopy"
)
def test_embedded_code_is_the_reviewed_assembly() -> None:
    # CI runs the same check without a skip (.ci/run): it fails when the bytes are stale.
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_exec_helper.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def test_the_generated_module_names_its_source() -> None:
    import hashlib

    from codemode.sandbox import _exec_helper_code

    source = (ROOT / "codemode" / "sandbox" / "exec_helper_x86_64.S").read_bytes()
    assert _exec_helper_code.SOURCE_SHA256 == hashlib.sha256(source).hexdigest()
    assert len(CODE_X86_64) > 500


def test_elf_header_points_at_the_code() -> None:
    elf = build_elf_x86_64(b"\x90" * 7)
    assert elf[:4] == b"\x7fELF" and elf.endswith(b"\x90" * 7)
    assert int.from_bytes(elf[24:32], "little") == 0x400000 + len(elf) - 7  # entry point


def test_helper_without_arguments_refuses(helper: int) -> None:
    proc = subprocess.run([f"/proc/self/fd/{helper}"], pass_fds=(helper,), capture_output=True, text=True)
    assert proc.returncode == ENFORCEMENT_FAILED_EXIT
    assert (
        proc.stderr.startswith(ENFORCEMENT_FAILED_MARKER) and "arguments failed with errno 22" in proc.stderr
    )


def test_helper_memfd_is_sealed(helper: int) -> None:
    with pytest.raises(PermissionError):
        open(f"/proc/self/fd/{helper}", "wb")


@needs_landlock
def test_helper_refuses_a_bad_ruleset_fd(helper: int, dirs: Dirs) -> None:
    with open("/dev/null") as not_a_ruleset:
        proc = subprocess.run(
            [
                f"/proc/self/fd/{helper}",
                "-",  # no cgroup
                str(not_a_ruleset.fileno()),
                str(not_a_ruleset.fileno()),  # stands in for the seccomp program: never reached
                "",  # no cwd change
                "/usr/bin/touch",
                "touch",
                "x",
            ],
            pass_fds=(helper, not_a_ruleset.fileno()),
            cwd=dirs.ws,
            capture_output=True,
            text=True,
            check=False,
        )
    assert proc.returncode == ENFORCEMENT_FAILED_EXIT
    assert proc.stderr.startswith(ENFORCEMENT_FAILED_MARKER)
    assert "landlock_restrict_self failed with errno 77" in proc.stderr  # EBADFD
    assert not (dirs.ws / "x").exists()


@pytest.mark.parametrize(
    "words",
    [["-", "5", "-"], ["-", "-", "5"], ["x", "-", "-"], ["-", "", "-"], ["-", "-5", "-"]],
    ids=["ruleset-without-filter", "filter-without-ruleset", "not-a-number", "empty", "negative"],
)
def test_helper_refuses_half_a_confinement_and_bad_fds(helper: int, dirs: Dirs, words: list[str]) -> None:
    proc = subprocess.run(
        [f"/proc/self/fd/{helper}", *words, "", "/usr/bin/touch", "touch", "x"],
        pass_fds=(helper,),
        cwd=dirs.ws,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == ENFORCEMENT_FAILED_EXIT
    assert "reading the exec helper's arguments failed with errno 22" in proc.stderr
    assert not (dirs.ws / "x").exists()


@needs_landlock
def test_helper_refuses_a_bad_filter(helper: int, dirs: Dirs) -> None:
    from codemode.sandbox import prepare_confinement

    with prepare_confinement(dirs.policy()) as conf, open(dirs.out / "existing") as not_a_filter:
        fds = conf.fds()
        ruleset = fds["ruleset_fd"]
        assert ruleset is not None
        os.set_inheritable(ruleset, True)
        proc = subprocess.run(
            [
                f"/proc/self/fd/{helper}",
                "-",
                str(ruleset),
                str(not_a_filter.fileno()),
                "",
                "/usr/bin/touch",
                "touch",
                "x",
            ],
            pass_fds=(helper, ruleset, not_a_filter.fileno()),
            cwd=dirs.ws,
            capture_output=True,
            text=True,
            check=False,
        )
    assert proc.returncode == ENFORCEMENT_FAILED_EXIT
    assert (
        "installing the seccomp filter failed" in proc.stderr or "reading the seccomp filter" in proc.stderr
    )
    assert not (dirs.ws / "x").exists()
