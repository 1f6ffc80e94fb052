"""The exec helper: reviewed assembly, exact bytes, and its refusal paths (real processes)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from sandbox_support import Dirs, needs_landlock

from codemode.sandbox import ENFORCEMENT_FAILED_EXIT, ENFORCEMENT_FAILED_MARKER
from codemode.sandbox._exec_helper import (
    _CODE_X86_64,
    ASM_SOURCE_X86_64,
    build_elf_x86_64,
    helper_fd,
    helper_unavailable_reason,
)


@pytest.fixture
def helper() -> int:
    fd = helper_fd()
    if fd is None:
        pytest.skip(f"exec helper unavailable here: {helper_unavailable_reason()}")
    return fd


@pytest.mark.skipif(
    shutil.which("as") is None or shutil.which("objcopy") is None, reason="needs GNU as/objcopy"
)
def test_embedded_code_is_the_reviewed_assembly(tmp_path: Path) -> None:
    source = tmp_path / "helper.S"
    source.write_text(ASM_SOURCE_X86_64)
    subprocess.run(["as", "--64", "-o", str(tmp_path / "helper.o"), str(source)], check=True)
    subprocess.run(
        ["objcopy", "-O", "binary", "-j", ".text", str(tmp_path / "helper.o"), str(tmp_path / "helper.bin")],
        check=True,
    )
    assert (tmp_path / "helper.bin").read_bytes() == _CODE_X86_64


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
                str(not_a_ruleset.fileno()),
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
