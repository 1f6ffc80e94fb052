"""The supervisor's copier keeps every byte a command wrote before it exited, even when its time
to drain the pipes is over before it has read them (a busy machine, or more than one read's
worth)."""

from __future__ import annotations

import fcntl
import os
import subprocess

import pytest

from codemode.tools.bash.supervisor import _copier
from codemode.tools.bash.supervisor._copier import Copier, Hooks, Stopper
from codemode.tools.bash.supervisor._pty import read_left

_F_SETPIPE_SZ = 1031


class _Log:
    """Where the copier writes (the capped log's one method it uses)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data


def _exited_writer(size: int) -> tuple[subprocess.Popen[bytes], int]:
    """A command that wrote ``size`` bytes into a pipe big enough to hold them and exited
    (not reaped: its pidfd still opens), and the pipe's read end."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, _F_SETPIPE_SZ, 1 << 20)
    proc = subprocess.Popen(
        ["head", "-c", str(size), "/dev/zero"], stdout=write_end, stdin=subprocess.DEVNULL
    )
    os.close(write_end)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, still a zombie
    return proc, read_end


def test_output_left_in_the_pipe_when_the_drain_time_is_over_is_still_copied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No time at all to drain: the copier sees the exit with the first 64 KiB read, and the
    # rest (seven more reads' worth) is only in the pipe.
    monkeypatch.setattr(_copier, "_DRAIN_SECONDS", 0.0)
    size = 512 * 1024
    proc, read_end = _exited_writer(size)
    log = _Log()
    try:
        Copier(proc.pid, [read_end], log, None, Hooks(), Stopper(proc.pid, None)).run()
    finally:
        proc.wait()
    assert len(log.data) == size and not log.data.strip(b"\0")


def test_reading_what_is_left_takes_only_what_was_there() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"first")
    chunks = []
    for chunk in read_left(read_end):
        chunks.append(chunk)
        os.write(write_end, b"more")  # written while it reads: left for later, not waited for
    assert b"".join(chunks) == b"first"
    assert list(read_left(read_end)) == [b"more"]
    os.close(write_end)
    assert list(read_left(read_end)) == []  # closed and empty: nothing, no wait
    os.close(read_end)
