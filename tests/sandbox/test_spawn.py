"""Confinement.spawn: posix_spawn through the exec helper (real processes, real fds)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import Dirs, needs_landlock

from codemode.sandbox import SandboxMode, SandboxPolicy, SpawnedProcess, prepare_confinement

pytestmark = needs_landlock


@pytest.fixture
def devnull() -> Iterator[int]:
    fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    yield fd
    os.close(fd)


def _run(policy: SandboxPolicy, script: str, cwd: Path | str, devnull: int) -> tuple[int, str]:
    """``bash -c script`` through ``spawn``; stdout and stderr together."""
    read, write = os.pipe2(os.O_CLOEXEC)
    with prepare_confinement(policy) as conf:
        try:
            proc = conf.spawn(
                ["/bin/bash", "-c", script],
                env=dict(os.environ),
                cwd=cwd,
                stdin=devnull,
                stdout=write,
                stderr=write,
            )
        finally:
            os.close(write)
    out = b""
    while chunk := os.read(read, 65536):
        out += chunk
    os.close(read)
    return proc.wait(timeout=30), out.decode()


def test_confined_children_are_spawned_processes(dirs: Dirs, devnull: int) -> None:
    read, write = os.pipe2(os.O_CLOEXEC)
    with prepare_confinement(dirs.policy()) as conf:
        proc = conf.spawn(
            ["true"], env=dict(os.environ), cwd=dirs.ws, stdin=devnull, stdout=write, stderr=write
        )
    os.close(write)
    os.close(read)
    assert isinstance(proc, SpawnedProcess)
    assert proc.wait(timeout=30) == 0 and proc.poll() == 0


def test_the_command_runs_in_cwd_confined_in_its_own_session(dirs: Dirs, devnull: int) -> None:
    code, out = _run(
        dirs.policy(),
        f"pwd; ps -o sid= -p $$; echo $$; touch {dirs.ws}/in && echo inside-ok; touch {dirs.out}/x || echo denied",
        dirs.ws,
        devnull,
    )
    lines = out.split()
    assert code == 0, out
    assert lines[0] == str(dirs.ws)
    assert lines[1] == lines[2]  # session id == its own pid: setsid
    assert "inside-ok" in out and "denied" in out
    assert not (dirs.out / "x").exists()


def test_the_command_gets_only_fds_0_to_2(dirs: Dirs, devnull: int) -> None:
    inheritable = os.open(os.devnull, os.O_RDONLY)  # not close-on-exec: would leak without the helper
    os.set_inheritable(inheritable, True)
    try:
        script = "exec python3 -c 'import os; print(*sorted(map(int, os.listdir(\"/proc/self/fd\"))))'"
        code, out = _run(dirs.policy(), script, dirs.ws, devnull)
    finally:
        os.close(inheritable)
    assert code == 0 and out.split() == ["0", "1", "2", "3"], out  # 3: listdir's own


def test_sigpipe_is_back_to_its_default(dirs: Dirs, devnull: int) -> None:
    start = time.monotonic()
    code, out = _run(dirs.policy(), "yes | head -n 1; echo ${PIPESTATUS[0]}", dirs.ws, devnull)
    assert code == 0 and out.split() == ["y", "141"]  # yes was killed by SIGPIPE (128 + 13)
    assert time.monotonic() - start < 30


def test_a_directory_that_has_gone_is_named(dirs: Dirs, devnull: int) -> None:
    code, out = _run(dirs.policy(), "echo ran", dirs.ws / "missing", devnull)
    assert code == 126
    assert out == f"codemode sandbox: cannot change to directory {dirs.ws / 'missing'}\n"


def test_wait_with_a_timeout(dirs: Dirs, devnull: int) -> None:
    with prepare_confinement(dirs.policy()) as conf:
        proc = conf.spawn(
            ["sleep", "30"], env=dict(os.environ), cwd=dirs.ws, stdin=devnull, stdout=devnull, stderr=devnull
        )
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.05)
    os.kill(proc.pid, 9)
    assert proc.wait(timeout=30) == -9


def test_unconfined_it_is_a_plain_popen(dirs: Dirs, devnull: int) -> None:
    with prepare_confinement(dirs.policy(SandboxMode.FULL_ACCESS)) as conf:
        proc = conf.spawn(
            ["true"], env=dict(os.environ), cwd=dirs.ws, stdin=devnull, stdout=devnull, stderr=devnull
        )
    assert isinstance(proc, subprocess.Popen)
    assert proc.wait(timeout=30) == 0
