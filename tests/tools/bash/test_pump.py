"""The pump that reads a foreground command's pipes (real processes, real pipes)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from codemode.sandbox import Process
from codemode.tools._capture import StreamCapture
from codemode.tools.bash._pump import Pump


class _Log:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data


@pytest.fixture
def sleeper() -> Iterator[tuple[Pump, subprocess.Popen[bytes], _Log]]:
    out_read, out_write = os.pipe2(os.O_CLOEXEC)
    err_read, err_write = os.pipe2(os.O_CLOEXEC)
    argv = ["/bin/sh", "-c", "echo started; read line; echo done >&2"]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=out_write,
        stderr=err_write,
    )
    os.close(out_write)
    os.close(err_write)
    log = _Log()
    # The pump watches the pid (a sandbox Process over it); the Popen reaps it.
    pump = Pump(Process(proc.pid, argv), (out_read, err_read), StreamCapture(), StreamCapture(), log)
    yield pump, proc, log
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    proc.wait(timeout=10)
    pump.force_finish()
    pump.close()


def test_a_tick_lets_the_waiter_recheck_its_deadline_without_waking(
    sleeper: tuple[Pump, subprocess.Popen[bytes], _Log],
) -> None:
    pump, _proc, log = sleeper
    pump.tick()
    # A tick is not a wake: with the deadline not reached, nothing is reported.
    assert pump.run(time.monotonic() + 0.2) == "deadline"
    assert b"started" in log.data
    pump.tick()
    assert pump.step(time.monotonic() + 60) is None


def test_a_wake_is_reported_once(sleeper: tuple[Pump, subprocess.Popen[bytes], _Log]) -> None:
    pump, _proc, _log = sleeper
    pump.wake()
    assert pump.run(time.monotonic() + 10) == "woken"
    assert pump.run(time.monotonic() + 0.1) == "deadline"


def test_the_pump_finishes_when_the_command_exits_and_its_pipes_close(
    sleeper: tuple[Pump, subprocess.Popen[bytes], _Log],
) -> None:
    pump, proc, log = sleeper
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.close()
    assert pump.run(time.monotonic() + 10) == "finished"
    assert pump.finished
    assert log.data.startswith(b"started\n") and log.data.endswith(b"done\n")


def test_a_closed_stream_is_not_reported_again_while_a_copy_of_its_pipe_lives() -> None:
    # Another command forked meanwhile holds copies of this one's pipes until it execs; epoll
    # keeps a closed fd in its set while any copy of the pipe is open. The pump must not read
    # (or close) that fd number again: by then it may name another file.
    out_read, out_write = os.pipe2(os.O_CLOEXEC)
    err_read, err_write = os.pipe2(os.O_CLOEXEC)
    argv = ["/bin/sh", "-c", "echo out; exec >&-; sleep 0.3; echo err >&2"]
    proc = subprocess.Popen(
        argv,
        stdout=out_write,
        stderr=err_write,
    )
    os.close(out_write)
    os.close(err_write)
    copy = os.dup(out_read)  # the forked child's copy of the read end
    log = _Log()
    # The pump watches the pid (a sandbox Process over it); the Popen reaps it.
    pump = Pump(Process(proc.pid, argv), (out_read, err_read), StreamCapture(), StreamCapture(), log)
    try:
        assert pump.run(time.monotonic() + 30) == "finished"
        assert log.data == b"out\nerr\n"
    finally:
        os.close(copy)
        proc.wait(timeout=10)
        pump.close()
