"""The engine's zygote started early (`codemode run` in mode process): adopted once, alive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codemode import _zygote_start


@pytest.fixture(autouse=True)
def _nothing_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_zygote_start, "_taken", False)  # as in a process whose engine took none


def _hello(started: _zygote_start.Started) -> dict[str, object]:
    process, sock = started
    sock.settimeout(30)
    try:
        hello: dict[str, object] = json.loads(sock.recv(65536))
    finally:
        process.kill()
        process.wait()
        sock.close()
    return hello


def test_the_zygote_started_early_is_the_one_taken_once() -> None:
    _zygote_start.launch_early()
    early = _zygote_start._early
    assert early is not None
    _zygote_start.launch_early()  # once: a second call starts nothing
    assert _zygote_start._early is early
    taken = _zygote_start.take()
    assert taken is early and _zygote_start._early is None
    assert _hello(taken)["hello"] == early[0].pid
    again = _zygote_start.take()  # none left early: a new one
    assert again[0].pid != early[0].pid
    assert _hello(again)["hello"] == again[0].pid
    _zygote_start.launch_early()  # the engine took one: it starts its own from now on
    assert _zygote_start._early is None


def test_an_early_zygote_that_died_is_replaced() -> None:
    _zygote_start.launch_early()
    early = _zygote_start._early
    assert early is not None
    early[0].kill()
    early[0].wait()
    taken = _zygote_start.take()
    assert taken[0].pid != early[0].pid and early[1].fileno() == -1  # its socket closed
    assert _hello(taken)["hello"] == taken[0].pid


ONE_SHOTS = """
import sys, psutil, codemode
for _ in range(3):
    result = codemode.run_code("print(1)", workspace=sys.argv[1], state_dir=sys.argv[2], engine="process")
    assert result.text == "1\\n", result.text
print(len(psutil.Process().children()))
"""


def test_one_shots_in_one_process_start_one_zygote(tmp_path: Path) -> None:
    # The first codemode.run_code() starts the zygote early; the engine keeps it for the next.
    (tmp_path / "ws").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", ONE_SHOTS, str(tmp_path / "ws"), str(tmp_path / "state")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
