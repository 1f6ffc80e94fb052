"""`start_background` (codemode/tools/bash/_background.py): records, then starts, one
background process under a new supervisor, and fails cleanly when it cannot."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from codemode.errors import ToolError
from codemode.sandbox import SandboxPolicy, process_start
from codemode.state import Archive
from codemode.state import process_records as _records
from codemode.tools.bash import _background
from codemode.tools.bash._answers import SupervisorAnswer
from codemode.tools.bash._background import runtime_dir, start_background
from codemode.tools.bash._foreground import RunSpec

from .supervisor.test_supervisor import Start, _ended, _ended_now, _log, _poll


@pytest.fixture
def conn(archive: Archive) -> Iterator[sqlite3.Connection]:
    c = _records.connect(archive.db_path)
    yield c
    c.close()


@pytest.fixture
def start(
    archive: Archive, conn: sqlite3.Connection, policy: SandboxPolicy, workspace: Path
) -> Iterator[Start]:
    """``start(command, **RunSpec fields)`` -> (process_id, answer); cleans up afterwards."""
    started: list[str] = []
    session_id = f"t{secrets.token_hex(4)}"

    @contextlib.contextmanager
    def db() -> Iterator[sqlite3.Connection]:
        yield conn

    def run(command: str, **extra: Any) -> tuple[str, SupervisorAnswer]:
        process_id = f"p_{secrets.token_hex(6)}"
        started.append(process_id)
        fields: dict[str, Any] = {
            "command": command,
            "cwd": workspace,
            "timeout_seconds": 60,
            "session_id": session_id,
            "policy": policy,
            **extra,
        }
        return process_id, start_background(RunSpec(**fields), process_id=process_id, archive=archive, db=db)

    yield run
    for process_id in started:
        record = _records.get(conn, process_id)
        if record is None:
            continue
        if record.live and record.pid is not None:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(record.pid)
                if proc.create_time() == record.pid_started:
                    proc.kill()
            with contextlib.suppress(AssertionError):
                _poll(functools.partial(_ended_now, conn, process_id), 10)
        if record.cgroup:
            for path in (record.cgroup, os.path.dirname(record.cgroup)):
                with contextlib.suppress(OSError):
                    os.rmdir(path)


def test_a_start_records_the_process_and_answers_with_pid_and_log(
    start: Start, conn: sqlite3.Connection, archive: Archive, workspace: Path
) -> None:
    # It waits for a file, so that its input channel (cleared at its end) is still recorded.
    process_id, answer = start(
        'echo "term=$TERM marker=$CODEMODE_PROCESS_ID extra=$EXTRA_VAR"; while [ ! -e go ]; do sleep 0.02; done',
        purpose="build",
        scope="pkg",
        lifecycle="detached",
        completion_mode="silent",
        environ={**os.environ, "EXTRA_VAR": "from-spec"},
    )
    assert answer["ok"] is True
    assert isinstance(answer["pid"], int) and answer["pid_started"] == process_start(answer["pid"])
    record = _records.get(conn, process_id)
    assert record is not None
    assert answer["log_ref"] == record.log_ref
    assert (record.kind, record.marker, record.cwd) == ("background", process_id, str(workspace))
    assert (record.purpose, record.scope, record.lifecycle, record.completion_mode) == (
        "build",
        "pkg",
        "detached",
        "silent",
    )
    assert record.pid == answer["pid"] and record.state == "running"
    assert record.input_path is not None and record.input_path.startswith("@codemode-in-")
    assert record.input_token is not None and len(record.input_token) == 64
    # an empty error file is not left behind
    assert not (runtime_dir(archive) / f"{process_id}.err").exists()
    (workspace / "go").touch()

    ended = _ended(conn, process_id)
    assert f"term=xterm-256color marker={process_id} extra=from-spec" in _log(ended)
    assert _records.pending(conn, record.session_id) == []  # completion_mode silent


def test_two_starts_get_their_own_input_channel_and_token(
    start: Start, conn: sqlite3.Connection, workspace: Path
) -> None:
    waiting = "while [ ! -e go ]; do sleep 0.02; done"  # running while looked at (its end clears them)
    first, _ = start(waiting)
    second, _ = start(waiting)
    a, b = _records.get(conn, first), _records.get(conn, second)
    (workspace / "go").touch()
    assert a is not None and b is not None and a.input_path is not None and b.input_path is not None
    assert a.input_path != b.input_path and a.input_token != b.input_token
    assert a.log_ref != b.log_ref
    for process_id in (first, second):
        _ended(conn, process_id)


def _no_python(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))


def _silent_supervisor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    script = tmp_path / "broken_supervisor.py"
    script.write_text(
        "import sys\nsys.stdin.read()\nsys.stderr.write('boom: the supervisor broke\\n')\nsys.exit(1)\n"
    )
    monkeypatch.setattr(_background, "SUPERVISOR", script)


def _nul_in_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    return {"environ": {**os.environ, "BROKEN": "a\0b"}}


_FAILURES: dict[str, tuple[Callable[..., Any], str, str | None]] = {
    # how it fails: (set-up, words of the ToolError, its code)
    "no-interpreter": (_no_python, "could not start the background supervisor", "tool_failed"),
    "silent-supervisor": (
        _silent_supervisor,
        "the background supervisor did not start: boom",
        "supervisor_failed",
    ),
    "command-cannot-spawn": (_nul_in_env, "the background command could not start", "spawn_failed"),
}


@pytest.mark.parametrize("how", list(_FAILURES))
def test_a_start_that_fails_is_a_tool_error_and_a_failed_record(
    how: str, start: Start, conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    setup, words, code = _FAILURES[how]
    extra = setup(monkeypatch, tmp_path) or {}
    before = {r.process_id for r in _records.for_session(conn, None)}
    with pytest.raises(ToolError) as caught:
        start("echo never", **extra)
    assert words in caught.value.message
    assert caught.value.code == code and caught.value.data is None
    (record,) = [r for r in _records.for_session(conn, None) if r.process_id not in before]
    assert record.state == "failed"
    assert record.error
    assert record.ended_at is not None
    assert record.pid is None  # the command never ran
    assert not record.live


@pytest.mark.parametrize("how", list(_FAILURES))
def test_a_start_that_fails_leaves_no_cgroup(
    how: str, start: Start, conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    setup = _FAILURES[how][0]
    extra = setup(monkeypatch, tmp_path) or {}
    before = {r.process_id for r in _records.for_session(conn, None)}
    with pytest.raises(ToolError):
        start("echo never", **extra)
    (record,) = [r for r in _records.for_session(conn, None) if r.process_id not in before]
    if record.cgroup is None:
        pytest.skip("cgroups are unavailable here")
    assert not os.path.exists(record.cgroup)


@pytest.mark.parametrize("how", list(_FAILURES))
def test_a_start_that_fails_queues_no_completion(
    how: str, start: Start, conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    setup = _FAILURES[how][0]
    extra = setup(monkeypatch, tmp_path) or {}
    before = {r.process_id for r in _records.for_session(conn, None)}
    with pytest.raises(ToolError):
        start("echo never", **extra)
    (record,) = [r for r in _records.for_session(conn, None) if r.process_id not in before]
    assert _records.pending(conn, record.session_id) == []


def test_a_failed_supervisor_keeps_its_error_file_for_diagnosis(
    start: Start, archive: Archive, conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _silent_supervisor(monkeypatch, tmp_path)
    with pytest.raises(ToolError):
        start("echo never")
    (record,) = _records.for_session(conn, None)
    err = runtime_dir(archive) / f"{record.process_id}.err"
    assert "boom: the supervisor broke" in err.read_text()
    assert "boom: the supervisor broke" in (record.error or "")


def test_the_runtime_dir_is_private(archive: Archive) -> None:
    path = runtime_dir(archive)
    assert path.parent == archive.state_dir
    assert path.stat().st_mode & 0o777 == 0o700
