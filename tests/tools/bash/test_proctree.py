"""Finding and ending process trees with real processes."""

from __future__ import annotations

import os
import subprocess
import time

import psutil

from codemode.sandbox import process_start
from codemode.tools.bash._proctree import MARKER_VAR, find_members, is_same_process, terminate_tree


def _spawn(marker: str, script: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["bash", "-c", script], env={**os.environ, MARKER_VAR: marker}, start_new_session=True
    )


def _wait_for(predicate: object, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_marker_finds_double_forked_orphans_and_terminate_ends_them() -> None:
    marker = f"t_{os.getpid()}_a"
    proc = _spawn(marker, "(setsid sleep 1000 &) ; setsid sleep 1000 & sleep 1000")
    _wait_for(lambda: len(find_members(marker)) >= 4)
    members = find_members(marker, pgid=proc.pid, root_pid=proc.pid)
    assert proc.pid in members
    terminate_tree(marker, pgid=proc.pid, root_pid=proc.pid, grace_seconds=1)
    proc.wait()
    assert find_members(marker) == set()


def test_terminate_escalates_to_sigkill() -> None:
    marker = f"t_{os.getpid()}_b"
    proc = _spawn(marker, "trap '' TERM; while :; do sleep 0.05; done")
    _wait_for(lambda: len(find_members(marker)) >= 2)  # the loop runs, so the trap is set
    killed = terminate_tree(marker, pgid=proc.pid, root_pid=proc.pid, grace_seconds=0.2)
    assert killed >= 1
    assert proc.wait() == -9


def test_identity_uses_start_time() -> None:
    proc = subprocess.Popen(["sleep", "1000"])
    try:
        started = process_start(proc.pid)
        assert started is not None
        assert is_same_process(proc.pid, started)
        assert not is_same_process(proc.pid, started - 1)
    finally:
        proc.kill()
        proc.wait()
    assert not is_same_process(proc.pid, started)


def test_identity_is_counted_from_boot_not_from_the_wall_clock() -> None:
    # psutil's create_time() is the boot time (from the wall clock, whole seconds: it moves
    # when the clock is stepped) plus the start since boot; a process is named by the second
    # part alone, so a step of the clock cannot make a live host or supervisor look dead.
    proc = subprocess.Popen(["sleep", "1000"])
    try:
        since_boot = psutil.Process(proc.pid).create_time() - psutil.boot_time()
        assert process_start(proc.pid) == round(since_boot * os.sysconf("SC_CLK_TCK"))
    finally:
        proc.kill()
        proc.wait()
