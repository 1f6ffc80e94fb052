"""The supervisor of one background process (codemode/tools/bash/supervisor), started for
real through `start_background`: it records its command's end, outlives the host, takes input
only with the record's token, and cleans up the command's cgroup."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import secrets
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from codemode.sandbox import SandboxPolicy, process_start
from codemode.state import Archive, ProcessRecord
from codemode.state import process_records as _records
from codemode.tools.bash._answers import SupervisorAnswer
from codemode.tools.bash._background import start_background
from codemode.tools.bash._foreground import RunSpec
from tests.host_support import alive

Start = Callable[..., tuple[str, SupervisorAnswer]]
T = TypeVar("T")


def _poll(check: Callable[[], T | None], seconds: float = 15, what: str = "") -> T:
    """``check()`` once it is truthy (a deadline, no fixed sleeps)."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.01)


@pytest.fixture
def conn(archive: Archive) -> Iterator[sqlite3.Connection]:
    c = _records.connect(archive.db_path)
    yield c
    c.close()


@pytest.fixture
def session_id() -> str:
    # Unique: the command cgroups are grouped by session under the host's cgroup.
    return f"t{secrets.token_hex(4)}"


@pytest.fixture
def start(
    archive: Archive, conn: sqlite3.Connection, policy: SandboxPolicy, workspace: Path, session_id: str
) -> Iterator[Start]:
    started: list[str] = []

    @contextlib.contextmanager
    def db() -> Iterator[sqlite3.Connection]:
        yield conn

    def run(command: str, **extra: Any) -> tuple[str, SupervisorAnswer]:
        process_id = f"p_{secrets.token_hex(6)}"
        started.append(process_id)
        spec = RunSpec(
            command=command, cwd=workspace, timeout_seconds=60, session_id=session_id, policy=policy, **extra
        )
        return process_id, start_background(spec, process_id=process_id, archive=archive, db=db)

    yield run
    for process_id in started:  # leave nothing running
        record = _records.get(conn, process_id)
        if record is not None and record.live and record.pid is not None:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(record.pid)
                if proc.create_time() == record.pid_started:
                    proc.kill()
        if record is not None and record.cgroup:
            with contextlib.suppress(AssertionError):  # the supervisor removes it once the command ends
                _poll(functools.partial(_ended_now, conn, process_id), 10)
            for path in (record.cgroup, os.path.dirname(record.cgroup)):
                with contextlib.suppress(OSError):
                    os.rmdir(path)


def _ended_now(conn: sqlite3.Connection, process_id: str) -> bool:
    record = _records.get(conn, process_id)
    assert record is not None
    return not record.live


def _ended(conn: sqlite3.Connection, process_id: str) -> ProcessRecord:
    def check() -> ProcessRecord | None:
        record = _records.get(conn, process_id)
        assert record is not None
        return None if record.live else record

    record: ProcessRecord = _poll(check, what=f"{process_id} to end")
    return record


def _log(record: ProcessRecord) -> str:
    return Path(record.log_path).read_bytes().decode(errors="replace")


def test_the_exit_code_and_output_are_recorded_with_one_completion(
    start: Start, conn: sqlite3.Connection
) -> None:
    process_id, answer = start("echo hello from bg; exit 7")
    record = _ended(conn, process_id)
    assert (record.state, record.exit_code, record.exit_signal) == ("exited", 7, None)
    assert record.pid == answer["pid"] and record.pid_started == answer["pid_started"]
    assert record.supervisor_pid is not None and record.supervisor_pid != os.getpid()
    assert record.ended_at is not None
    assert "hello from bg" in _log(record)
    # the input channel is closed with it
    assert record.input_path is None and record.input_token is None
    (note,) = _records.pending(conn, record.session_id)
    assert note["process_id"] == process_id and note["exit_code"] == 7
    assert "exited with code 7" in note["text"]


def test_a_command_killed_by_a_signal_is_recorded_with_the_signal(
    start: Start, conn: sqlite3.Connection
) -> None:
    process_id, _ = start("kill -KILL $$")
    record = _ended(conn, process_id)
    assert (record.exit_code, record.exit_signal) == (128 + 9, "SIGKILL")
    assert record.state == "exited"


def test_the_command_runs_on_a_terminal_while_its_record_says_running(
    start: Start, conn: sqlite3.Connection, workspace: Path
) -> None:
    go = workspace / "go"
    process_id, answer = start(
        f"test -t 0 && test -t 1 && echo on-a-tty; while [ ! -e {go} ]; do sleep 0.02; done"
    )
    record = _records.get(conn, process_id)
    assert record is not None and record.state == "running"
    _poll(lambda: "on-a-tty" in _log(record), what="the tty line")
    assert process_start(answer["pid"]) == answer["pid_started"]
    # the supervisor is not the host's child: it forked away and was adopted
    assert psutil.Process(record.supervisor_pid).ppid() != os.getpid()
    go.touch()
    assert _ended(conn, process_id).exit_code == 0


_HOST_SCRIPT = """
import contextlib, json, sys
from pathlib import Path
from codemode.state import State
from codemode.sandbox import SandboxMode, SandboxPolicy
from codemode.state import process_records as _records
from codemode.tools.bash._background import start_background
from codemode.tools.bash._foreground import RunSpec

state, ws, tmp, session, process_id, command = sys.argv[1:]
archive_state = State(Path(state))
archive = archive_state.archive
conn = _records.connect(archive.db_path)

@contextlib.contextmanager
def db():
    yield conn

policy = SandboxPolicy(
    mode=SandboxMode.WORKSPACE_WRITE, writable_roots=(Path(ws),), temp_dir=Path(tmp), protected=(Path(state),)
)
spec = RunSpec(command=command, cwd=Path(ws), timeout_seconds=60, session_id=session, policy=policy)
print(json.dumps(start_background(spec, process_id=process_id, archive=archive, db=db)), flush=True)
"""


def test_the_supervisor_outlives_the_host_and_records_the_end(
    conn: sqlite3.Connection, state_dir: Path, workspace: Path, policy: SandboxPolicy, session_id: str
) -> None:
    go = workspace / "go"
    process_id = f"p_{secrets.token_hex(6)}"
    host = subprocess.run(
        [
            sys.executable,
            "-c",
            _HOST_SCRIPT,
            str(state_dir),
            str(workspace),
            str(policy.temp_dir),
            session_id,
            process_id,
            f"while [ ! -e {go} ]; do sleep 0.02; done; echo after the host; exit 5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert host.returncode == 0, host.stderr
    answer = json.loads(host.stdout)
    try:
        record = _records.get(conn, process_id)
        assert record is not None and record.state == "running"
        assert psutil.pid_exists(answer["pid"]) and psutil.pid_exists(record.supervisor_pid)
        go.touch()  # only now, with the host gone, may the command end
        ended = _ended(conn, process_id)
        assert (ended.state, ended.exit_code) == ("exited", 5)
        assert "after the host" in _log(ended)
    finally:
        go.touch()
        record = _records.get(conn, process_id)
        if record is not None and record.cgroup:
            _ended(conn, process_id)
            with contextlib.suppress(OSError):
                os.rmdir(record.cgroup)
                os.rmdir(os.path.dirname(record.cgroup))


def _send(record: ProcessRecord, payload: bytes) -> bytes:
    """Connect to the record's input socket, send ``payload``, return the reply (empty: refused)."""
    assert record.input_path is not None and record.input_path.startswith("@")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect("\0" + record.input_path[1:])
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        try:
            while chunk := sock.recv(16):
                reply += chunk
        except ConnectionResetError:  # closed with our bytes unread: refused
            pass
        return reply


def test_input_is_taken_only_with_the_records_token(start: Start, conn: sqlite3.Connection) -> None:
    process_id, _ = start('echo ready; read line; echo "got [$line]"')
    record = _records.get(conn, process_id)
    assert record is not None and record.input_token is not None
    token = record.input_token.encode()
    _poll(lambda: "ready" in _log(record), what="ready")

    forged = secrets.token_hex(32).encode()
    assert len(forged) == len(token) and forged != token
    assert _send(record, forged + b"forged\n") == b""  # refused, nothing answered
    assert _send(record, token[:-1] + b"x" + b"close\n") == b""
    assert _send(record, token[:10]) == b""  # too short
    assert not _ended_now(conn, process_id)  # none of it reached the command

    assert _send(record, token + b"real\n") == b"ok"
    ended = _ended(conn, process_id)
    log = _log(ended)
    assert "got [real]" in log
    assert "forged" not in log and "close" not in log


def test_the_input_socket_is_gone_once_the_command_ends(start: Start, conn: sqlite3.Connection) -> None:
    process_id, _ = start("exit 0")
    running = _records.get(conn, process_id)
    assert running is not None and running.input_path is not None and running.input_token is not None
    token = running.input_token.encode()
    _ended(conn, process_id)

    def refused() -> bool:
        try:
            _send(running, token + b"late\n")
        except ConnectionRefusedError:
            return True
        return False

    _poll(refused, what="the input socket to close")


@pytest.fixture
def cgroups(start: Start, conn: sqlite3.Connection) -> None:
    process_id, _ = start("exit 0")
    record = _records.get(conn, process_id)
    assert record is not None
    if record.cgroup is None:
        pytest.skip("cgroups are unavailable here")


def test_the_commands_cgroup_is_removed_when_it_ends(
    cgroups: None, start: Start, conn: sqlite3.Connection
) -> None:
    process_id, _ = start("read line; exit 3")  # it waits for its input: the cgroup is there
    record = _records.get(conn, process_id)
    assert record is not None and record.cgroup is not None and record.input_token is not None
    cgroup = record.cgroup
    assert os.path.isdir(cgroup)
    assert _send(record, record.input_token.encode() + b"go\n") == b"ok"
    _ended(conn, process_id)
    _poll(lambda: not os.path.exists(cgroup), what="the cgroup to go")


def test_processes_the_command_left_behind_end_with_it(
    cgroups: None, start: Start, conn: sqlite3.Connection, workspace: Path
) -> None:
    # An escaped child (own session, output away from the terminal) would outlive bash; its
    # cgroup holds it, so the supervisor ends it before it records the exit.
    pid_file = workspace / "child.pid"
    process_id, _ = start(f"setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $! > {pid_file}; exit 0")
    record = _ended(conn, process_id)
    assert record.exit_code == 0
    child = int(pid_file.read_text())

    _poll(lambda: not alive(child), what="the left-behind child to end")
    cgroup = record.cgroup
    assert cgroup is not None
    _poll(lambda: not os.path.exists(cgroup), what="the cgroup to go")


def test_a_child_holding_the_terminal_does_not_keep_the_record_open(
    cgroups: None, start: Start, conn: sqlite3.Connection, workspace: Path
) -> None:
    # The child keeps the PTY open after bash exits; the supervisor stops copying soon after
    # the exit, records it, and ends the child with the cgroup.
    pid_file = workspace / "child.pid"
    process_id, _ = start(f"sleep 300 & echo $! > {pid_file}; echo parent done; exit 4")
    record = _ended(conn, process_id)
    assert (record.state, record.exit_code) == ("exited", 4)
    assert "parent done" in _log(record)
    child = int(pid_file.read_text())

    _poll(lambda: not alive(child), what="the child to end")


def test_a_large_input_reaches_the_command_whole_and_in_order(start: Start, conn: sqlite3.Connection) -> None:
    # More than a pipe and a terminal buffer hold: the supervisor queues what the PTY cannot
    # take yet. The terminal is in line mode, so the input is lines; ^D ends it.
    lines = [f"{i:06d} {'x' * 90}" for i in range(3000)]
    process_id, _ = start("echo ready; sha256sum | cut -c1-64")
    record = _records.get(conn, process_id)
    assert record is not None and record.input_token is not None
    _poll(lambda: "ready" in _log(record), what="ready")
    data = ("\n".join(lines) + "\n").encode()
    assert len(data) > 256 * 1024
    assert _send(record, record.input_token.encode() + data + b"\x04") == b"ok"
    ended = _ended(conn, process_id)
    assert hashlib.sha256(data).hexdigest() in _log(ended)
