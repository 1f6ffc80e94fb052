"""Archive: real state directory, real SQLite file, real threads and processes."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode.errors import StateDirError, ToolError, UnknownRefError
from codemode.state import (
    COMPACT_KEEP_BYTES,
    EXPIRE_AFTER_SECONDS,
    SCHEMA_VERSION,
    STORE_SESSION_MAX_BYTES,
    STORE_VALUE_MAX_BYTES,
    Archive,
    Redactor,
    State,
    process_records,
)

GH = "ghp_" + "A1b2C3d4E5" * 3 + "xyz123"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def state(tmp_path: Path) -> Iterator[State]:
    opened = State(tmp_path / "state", Redactor(environ={}))
    yield opened
    opened.close()


@pytest.fixture
def archive(state: State) -> Archive:
    return state.archive


def run_text(state: State, session_id: str, call_id: str) -> str | None:
    """The recorded result text of a run, or None."""
    record = state.runs.get(session_id, call_id)
    return None if record is None else record.result_json


def read_all(archive: Archive, ref: str, limit: int) -> bytes:
    out = b""
    offset = 0
    while True:
        page = archive.read(ref, offset, limit)
        out += page.data
        assert page.next_offset > offset or page.eof
        offset = page.next_offset
        if page.eof:
            return out


# -- state directory -----------------------------------------------------------------------


def test_creates_state_dir_with_parents_mode_0700(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state"
    State(target).close()
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert (target / "state.db").is_file()
    with __import__("sqlite3").connect(target / "state.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_tightens_loose_permissions(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    State(target).close()
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_refuses_a_file_as_state_dir(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.write_text("not a dir")
    with pytest.raises(StateDirError, match="not a directory"):
        State(target)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a directory owned by another user")
def test_refuses_a_dir_owned_by_someone_else(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir()
    os.chown(target, 12345, 12345)
    with pytest.raises(StateDirError, match="owned by uid 12345"):
        State(target)


def test_blob_files_are_private(archive: Archive) -> None:
    ref = archive.put("hello", kind="output")
    files = list((archive.state_dir / "blobs").iterdir())
    assert [f.name for f in files] == [ref.ref]
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600


# -- put / read ------------------------------------------------------------------------------


@pytest.mark.slow  # hundreds of pages of a large text: ~9 s under three workers
def test_put_and_read_exact_bytes_in_pages(archive: Archive) -> None:
    text = "".join(f"{i} héllo wörld 数字 🎉\n" for i in range(5000))
    ref = archive.put(text, kind="output", session_id="s1")
    assert ref.ref.startswith("ar_") and len(ref.ref) == 23 and "/" not in ref.ref
    data = text.encode()
    assert ref.total_bytes == len(data)
    assert ref.sha256 == hashlib.sha256(data).hexdigest()
    for limit in (1, 7, 4096, 65536, len(data) + 10):
        assert read_all(archive, ref.ref, limit) == data
    page = archive.read(ref.ref, 10, 5)
    assert (page.offset, page.next_offset, page.data, page.eof) == (10, 15, data[10:15], False)


def test_put_redacts_text_but_not_bytes(archive: Archive) -> None:
    ref = archive.put(f"token={GH}\n", kind="output")
    assert archive.read(ref.ref).data == b"token=[REDACTED:github-token]\n"
    raw = archive.put(f"token={GH}\n".encode(), kind="blob")
    assert archive.read(raw.ref).data == f"token={GH}\n".encode()


def test_read_at_end_and_past_end(archive: Archive) -> None:
    ref = archive.put("abc", kind="output")
    page = archive.read(ref.ref, 3)
    assert (page.data, page.eof, page.next_offset) == (b"", True, 3)
    with pytest.raises(ToolError, match="offset 4 is past the end") as info:
        archive.read(ref.ref, 4)
    assert info.value.data["field"] == "offset"


@pytest.mark.parametrize(
    ("offset", "limit", "field"), [(-1, 10, "offset"), (0, 0, "limit"), (0, 10**9, "limit")]
)
def test_bad_offset_or_limit_names_the_field(archive: Archive, offset: int, limit: int, field: str) -> None:
    ref = archive.put("abc", kind="output")
    with pytest.raises(ToolError, match=field) as info:
        archive.read(ref.ref, offset, limit)
    assert info.value.data["field"] == field


@pytest.mark.parametrize("ref", ["ar_" + "x" * 20, "../state.db", "/etc/passwd", ""])
def test_unknown_ref_says_where_refs_come_from(archive: Archive, ref: str) -> None:
    with pytest.raises(UnknownRefError) as info:
        archive.read(ref)
    assert "truncation notice" in info.value.message and "bash log" in info.value.message


def test_a_session_reads_only_its_own_entries(archive: Archive) -> None:
    mine = archive.put("mine", kind="output", session_id="A")
    theirs = archive.put("theirs", kind="output", session_id="B")
    nobodys = archive.put("nobody's", kind="output")
    log = archive.open_log(kind="log", session_id="B", redact=False)
    log.write(b"B's log\n")
    assert archive.read(mine.ref, session_id="A").data == b"mine"
    never = "ar_" + "n" * 20
    with pytest.raises(UnknownRefError) as info:
        archive.read(never, session_id="A")
    expected = info.value.message.replace(never, "REF")
    for ref in (theirs.ref, nobodys.ref, log.ref):
        with pytest.raises(UnknownRefError) as info:
            archive.read(ref, session_id="A")
        assert info.value.message.replace(ref, "REF") == expected
    # The operator reads them all.
    assert [archive.read(r).data for r in (theirs.ref, nobodys.ref, log.ref)] == [
        b"theirs",
        b"nobody's",
        b"B's log\n",
    ]
    log.close()


def test_empty_entry(archive: Archive) -> None:
    ref = archive.put("", kind="output")
    page = archive.read(ref.ref)
    assert (page.data, page.eof, page.total_bytes) == (b"", True, 0)


# -- logs --------------------------------------------------------------------------------------


def test_log_redacts_secret_split_across_writes(archive: Archive) -> None:
    log = archive.open_log(kind="log", session_id="s")
    line = f"export GITHUB_TOKEN={GH}\n".encode()
    log.write(line[:30])
    log.write(line[30:])
    log.write(b"second line without newline " + GH[:10].encode())
    log.write(GH[10:].encode())
    ref = log.close()
    data = archive.read(log.ref).data
    assert GH.encode() not in data
    assert data.count(b"[REDACTED:github-token]") == 2
    assert ref.total_bytes == len(data) and ref.sha256 == hashlib.sha256(data).hexdigest()
    assert log.path.read_bytes() == data


def test_log_private_key_block_across_chunks_is_suppressed(archive: Archive) -> None:
    log = archive.open_log(kind="log")
    log.write(b"before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234\n")
    log.write(b"QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=\n")
    log.write(b"-----END RSA PRIVATE KEY-----\nafter\n")
    log.close()
    data = archive.read(log.ref).data
    assert b"MIIE" not in data and b"QUJD" not in data
    assert data.startswith(b"before\n") and data.endswith(b"after\n")
    assert b"[REDACTED:private-key]" in data


def test_log_long_line_without_newline_is_flushed(archive: Archive) -> None:
    log = archive.open_log(kind="log")
    chunk = b"x" * 10_000
    for _ in range(20):
        log.write(chunk)
    assert log.bytes_written >= 64 * 1024  # not held back in memory past 64 KiB
    ref = log.close()
    assert ref.total_bytes == 200_000


def test_log_is_readable_while_written(archive: Archive) -> None:
    log = archive.open_log(kind="log", redact=False)
    log.write(b"line 1\n")
    page = archive.read(log.ref)
    assert page.data == b"line 1\n" and page.total_bytes == 7
    log.write(b"line 2\n")
    page = archive.read(log.ref, page.next_offset)
    assert page.data == b"line 2\n" and page.offset == 7
    log.close()


def test_raw_log_is_stored_raw_and_redacted_when_read(archive: Archive) -> None:
    log = archive.open_log(kind="log", redact=False)
    log.write(f"key {GH}\nplain\n".encode())
    log.close()
    assert GH.encode() in log.path.read_bytes()
    assert archive.read(log.ref).data == b"key [REDACTED:github-token]\nplain\n"


def test_raw_log_pages_end_at_line_ends_so_secrets_are_not_split(archive: Archive) -> None:
    log = archive.open_log(kind="log", redact=False)
    body = b"".join(f"line {i} {GH}\n".encode() for i in range(50))
    log.write(body)
    log.close()
    offset, pages = 0, []
    while True:
        page = archive.read(log.ref, offset, 100)
        pages.append(page.data)
        offset = page.next_offset
        if page.eof:
            break
    joined = b"".join(pages)
    assert GH.encode() not in joined and GH[:8].encode() not in joined
    assert joined.count(b"[REDACTED:github-token]") == 50


# -- maintain ------------------------------------------------------------------------------------


def test_maintain_compacts_finished_logs_to_last_8_mib(archive: Archive) -> None:
    log = archive.open_log(kind="log")
    block = b"".join(b"%09d\n" % i for i in range(100_000))  # 1 MB
    for _ in range(10):
        log.write(block)
    live = archive.open_log(kind="log")
    live.write(block * 9)
    ref = log.close()
    total = ref.total_bytes
    assert archive.maintain()["compacted"] == 1
    assert archive.maintain()["compacted"] == 0
    page = archive.read(log.ref, 0, 20)
    assert page.retained_from == total - COMPACT_KEEP_BYTES
    assert page.offset == page.retained_from and page.total_bytes == total
    whole = block * 10
    assert page.data == whole[page.retained_from : page.retained_from + 20]
    assert read_all_from(archive, log.ref, page.retained_from) == whole[page.retained_from :]
    assert archive.read(live.ref).retained_from == 0  # unfinished: untouched
    live.close()


def read_all_from(archive: Archive, ref: str, offset: int) -> bytes:
    out = b""
    while True:
        page = archive.read(ref, offset, 1 << 20)
        out += page.data
        offset = page.next_offset
        if page.eof:
            return out


def test_maintain_expires_old_entries_unless_pinned(archive: Archive, state: State) -> None:
    old = archive.put("old", kind="output")
    kept = archive.put("pinned", kind="output")
    archive.pin(kept.ref, True)
    state.runs.record("s", "call-1", '{"x": 1}')
    later = time.time() + EXPIRE_AFTER_SECONDS + 60
    counts = state.maintain(now=later)
    assert counts["expired"] == 1 and counts["expired_runs"] == 1
    with pytest.raises(UnknownRefError):
        archive.read(old.ref)
    assert not (archive.state_dir / "blobs" / old.ref).exists()
    assert archive.read(kept.ref).data == b"pinned"
    assert run_text(state, "s", "call-1") is None
    archive.pin(kept.ref, False)
    assert archive.maintain(now=later)["expired"] == 1
    assert archive.maintain(now=time.time())["expired"] == 0


def test_pinned_log_is_not_compacted_until_unpinned(archive: Archive) -> None:
    log = archive.open_log(kind="log")
    log.write(b"y" * (COMPACT_KEEP_BYTES + 1000))
    log.close()
    archive.pin(log.ref, True)
    assert archive.maintain()["compacted"] == 0
    archive.pin(log.ref, False)
    assert archive.maintain()["compacted"] == 1
    assert archive.read(log.ref).retained_from == 1000


def test_pin_unknown_ref(archive: Archive) -> None:
    with pytest.raises(UnknownRefError):
        archive.pin("ar_" + "z" * 20, True)


# -- store -------------------------------------------------------------------------------------


def test_store_roundtrip_missing_vs_null(archive: Archive, state: State) -> None:
    assert state.values.get("s", "k") is None
    state.values.set("s", "k", "null")
    assert state.values.get("s", "k") == "null"
    state.values.set("s", "k", '{"a": [1, 2]}')
    assert json.loads(state.values.get("s", "k") or "") == {"a": [1, 2]}
    assert state.values.get("other", "k") is None
    state.values.set("s", "b", "1")
    assert state.values.keys("s") == ["b", "k"]
    assert state.values.delete("s", "k") is True
    assert state.values.delete("s", "k") is False
    assert state.values.keys("s") == ["b"]


def test_store_persists_across_instances(tmp_path: Path) -> None:
    first_state = State(tmp_path / "st")
    first_state.values.set("s", "pid", '"proc_1"')
    first_state.close()
    second_state = State(tmp_path / "st")
    assert second_state.values.get("s", "pid") == '"proc_1"'
    second_state.close()


def test_store_limits(archive: Archive, state: State) -> None:
    with pytest.raises(ToolError, match="not valid JSON"):
        state.values.set("s", "k", "{nope")
    with pytest.raises(ToolError, match="1 to 256 characters"):
        state.values.set("s", "", "1")
    with pytest.raises(ToolError, match="1 to 256 characters"):
        state.values.get("s", "k" * 257)
    big = json.dumps("x" * STORE_VALUE_MAX_BYTES)
    with pytest.raises(ToolError, match="1 MiB") as info:
        state.values.set("s", "big", big)
    assert info.value.data["limit"] == STORE_VALUE_MAX_BYTES
    value = json.dumps("x" * (STORE_VALUE_MAX_BYTES - 2))  # exactly 1 MiB: allowed
    fits = STORE_SESSION_MAX_BYTES // STORE_VALUE_MAX_BYTES - 1  # keys count too
    for i in range(fits):
        state.values.set("s", f"k{i}", value)
    with pytest.raises(ToolError, match="16 MiB") as info:
        state.values.set("s", "one-more", value)
    assert "store is full" in info.value.message and info.value.data["limit"] == STORE_SESSION_MAX_BYTES
    state.values.set("s", "k0", value)  # replacing a value counts its new size only
    state.values.set("other", "k", value)  # the limit is per session


def test_store_and_records_from_many_threads(archive: Archive, state: State) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(100):
                state.values.set(f"s{n % 3}", f"t{n}-{i}", json.dumps({"n": n, "i": i}))
                assert json.loads(state.values.get(f"s{n % 3}", f"t{n}-{i}") or "") == {"n": n, "i": i}
                state.runs.record("s", f"c{n}-{i}", json.dumps(i))
                assert run_text(state, "s", f"c{n}-{i}") == json.dumps(i)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(len(state.values.keys(f"s{k}")) for k in range(3)) == 1200


def test_two_processes_write_at_once(tmp_path: Path) -> None:
    state = tmp_path / "shared"
    State(state).close()
    script = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from codemode.state import State\n"
        "a = State(Path(sys.argv[1]))\n"
        "tag = sys.argv[2]\n"
        "for i in range(200):\n"
        "    a.values.set('shared', f'{tag}-{i}', json.dumps(i))\n"
        "    a.runs.record('shared', f'{tag}-{i}', json.dumps(tag))\n"
        "    ref = a.archive.put(f'{tag} {i}', kind='output')\n"
        "    assert a.archive.read(ref.ref).data == f'{tag} {i}'.encode()\n"
        "a.close()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(state), tag], env=env, stderr=subprocess.PIPE)
        for tag in ("a", "b")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    opened = State(state)
    keys = opened.values.keys("shared")
    assert len(keys) == 400
    assert run_text(opened, "shared", "a-199") == '"a"' and run_text(opened, "shared", "b-0") == '"b"'
    opened.close()


# -- run records ---------------------------------------------------------------------------


def test_run_record_first_wins(archive: Archive, state: State) -> None:
    assert run_text(state, "s", "c1") is None
    state.runs.record("s", "c1", '{"text": "first"}')
    state.runs.record("s", "c1", '{"text": "second"}')
    assert run_text(state, "s", "c1") == '{"text": "first"}'


def test_run_records_of_two_sessions_never_meet_whatever_the_ids_hold(archive: Archive, state: State) -> None:
    # Issue 8, item 11: one joined key "session\x1fcall" let ("team", "victim\x1fc1") read
    # ("team\x1fvictim", "c1"). Two columns keep every pair apart.
    state.runs.record("team\x1fvictim", "c1", '"victim"')
    assert run_text(state, "team", "victim\x1fc1") is None
    state.runs.record("team", "victim\x1fc1", '"attacker"')
    assert run_text(state, "team\x1fvictim", "c1") == '"victim"'
    assert run_text(state, "team", "victim\x1fc1") == '"attacker"'
    assert run_text(state, "c1", "team\x1fvictim") is None


# The version-1 schema, as codemode created it before run records had two key columns.
_V1_SCHEMA = """
CREATE TABLE archive_entries (
    ref TEXT PRIMARY KEY, kind TEXT NOT NULL, session_id TEXT, created REAL NOT NULL, finished REAL,
    total_bytes INTEGER NOT NULL DEFAULT 0, sha256 TEXT, retained_from INTEGER NOT NULL DEFAULT 0,
    raw INTEGER NOT NULL DEFAULT 0, stream INTEGER NOT NULL DEFAULT 0, pinned INTEGER NOT NULL DEFAULT 0,
    needs_compact INTEGER NOT NULL DEFAULT 0, file TEXT NOT NULL
);
CREATE INDEX archive_entries_created ON archive_entries(created);
CREATE INDEX archive_entries_compact ON archive_entries(needs_compact) WHERE needs_compact = 1;
CREATE TABLE store_values (
    session_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, size INTEGER NOT NULL,
    updated REAL NOT NULL, PRIMARY KEY (session_id, key)
) WITHOUT ROWID;
CREATE TABLE run_records (
    call_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, result TEXT NOT NULL, created REAL NOT NULL
);
CREATE INDEX run_records_created ON run_records(created);
PRAGMA user_version = 1;
"""


def test_a_version_1_state_db_migrates_its_run_records_to_two_columns(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    with sqlite3.connect(state / "state.db") as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(_V1_SCHEMA)
        now = time.time()
        rows = [
            # What Host.run_code recorded: the key session + "\x1f" + call, the owner beside it.
            ("A\x1f1", "A", '"a1"', now),
            ("team\x1fvictim\x1fc1", "team\x1fvictim", '"victim"', now),
            # A record made through the Archive API with a plain call id.
            ("plain", "s", '"plain"', now),
            ("old\x1fx", "old", '"old"', now - EXPIRE_AFTER_SECONDS - 10),
        ]
        conn.executemany("INSERT INTO run_records VALUES (?, ?, ?, ?)", rows)
        conn.execute("INSERT INTO store_values VALUES ('A', 'k', '1', 1, ?)", (now,))
        # A finished entry (its file beside the database) and one still being written.
        (state / "blobs").mkdir(mode=0o700)
        (state / "blobs" / ("ar_" + "f" * 20)).write_bytes(b"finished text")
        (state / "blobs" / ("ar_" + "l" * 20)).write_bytes(b"live")
        conn.execute(
            "INSERT INTO archive_entries (ref, kind, session_id, created, finished, total_bytes, file)"
            " VALUES (?, 'output', 'A', ?, ?, 13, ?)",
            ("ar_" + "f" * 20, now, now, "ar_" + "f" * 20),
        )
        conn.execute(
            "INSERT INTO archive_entries (ref, kind, session_id, created, raw, stream, file)"
            " VALUES (?, 'log', 'A', ?, 1, 1, ?)",
            ("ar_" + "l" * 20, now, "ar_" + "l" * 20),
        )
    conn.close()
    arch_state = State(state)
    arch = arch_state.archive
    try:
        # Version 2 to 3: entries know their disk use and cap, the quota is stored.
        assert arch.entry_info("ar_" + "f" * 20)["disk_bytes"] == 13
        assert arch.entry_info("ar_" + "l" * 20)["disk_bytes"] is None
        assert arch.read("ar_" + "f" * 20, session_id="A").data == b"finished text"
        assert arch.finish_log("ar_" + "l" * 20).total_bytes == 4
        assert run_text(arch_state, "A", "1") == '"a1"'
        assert run_text(arch_state, "team\x1fvictim", "c1") == '"victim"'
        assert run_text(arch_state, "team", "victim\x1fc1") is None
        assert run_text(arch_state, "s", "plain") == '"plain"'
        assert arch_state.values.get("A", "k") == "1"  # the other tables are untouched
        arch_state.runs.record("A", "2", '"a2"')
        assert run_text(arch_state, "A", "2") == '"a2"'
        assert arch_state.maintain()["expired_runs"] == 1  # the created index moved with the rows
        assert run_text(arch_state, "old", "x") is None
    finally:
        arch_state.close()
    with sqlite3.connect(state / "state.db") as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(run_records)")]
        indexes = [row[1] for row in conn.execute("PRAGMA index_list(run_records)")]
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    conn.close()
    assert columns[:2] == ["session_id", "call_id"]
    assert "run_records_created" in indexes
    assert "archive_settings" in tables
    assert "run_records_v1" not in tables
    State(state).close()  # opening a migrated database again changes nothing


@pytest.mark.parametrize("bash_tables", ["absent", "first release"])
def test_a_version_5_state_db_gets_the_bash_tables_through_the_one_migration_list(
    tmp_path: Path, bash_tables: str
) -> None:
    # Version 5 kept the bash tool's tables outside the versioned schema: created on their own
    # (or not yet, if no bash tool ever ran), columns added by hand. Version 6 owns them.
    state = tmp_path / "state"
    State(state).close()
    with sqlite3.connect(state / "state.db") as conn:
        conn.execute("DROP TABLE notifications")
        conn.execute("DROP TABLE bash_processes")
        if bash_tables == "first release":  # without the input_token and cgroup columns
            conn.execute(
                "CREATE TABLE bash_processes (process_id TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
                " command TEXT NOT NULL, cwd TEXT NOT NULL, kind TEXT NOT NULL, marker TEXT NOT NULL,"
                " lifecycle TEXT NOT NULL, completion_mode TEXT NOT NULL, purpose TEXT, scope TEXT,"
                " state TEXT NOT NULL, pid INTEGER, pid_started REAL, supervisor_pid INTEGER,"
                " supervisor_started REAL, log_path TEXT NOT NULL, log_ref TEXT,"
                " log_base INTEGER NOT NULL DEFAULT 0, input_path TEXT, started_at REAL NOT NULL,"
                " ended_at REAL, exit_code INTEGER, exit_signal TEXT,"
                " stop_requested INTEGER NOT NULL DEFAULT 0, error TEXT)"
            )
            conn.execute(
                "INSERT INTO bash_processes (process_id, session_id, command, cwd, kind, marker, lifecycle,"
                " completion_mode, state, log_path, started_at) VALUES"
                " ('bg_1', 's', 'sleep 1', '/', 'background', 'm', 'session', 'resume', 'exited', 'l', 1.0)"
            )
        conn.execute("PRAGMA user_version = 5")
    conn.close()
    opened = State(state)
    try:
        with opened.db.connection() as conn:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            columns = {row[1] for row in conn.execute("PRAGMA table_info(bash_processes)")}
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        records = process_records.connect(opened.db_path)
        record = process_records.get(records, "bg_1")
        records.close()
    finally:
        opened.close()
    assert version == SCHEMA_VERSION
    assert {"input_token", "cgroup", "options", "verification"} <= columns
    assert "notifications" in tables and "bash_notifications" not in tables
    if bash_tables == "first release":  # the old rows are kept, the new columns empty
        assert record is not None and record.command == "sleep 1" and record.cgroup is None
    else:
        assert record is None


def test_a_version_6_state_db_keeps_its_completions_in_the_one_notification_queue(tmp_path: Path) -> None:
    # Version 6 had one completion per process in bash_notifications; version 7 queues
    # completions, keyword reports and watcher events in notifications.
    state = tmp_path / "state"
    State(state).close()
    with sqlite3.connect(state / "state.db") as conn:
        conn.execute("DROP TABLE notifications")
        conn.execute("ALTER TABLE bash_processes DROP COLUMN options")
        conn.execute("ALTER TABLE bash_processes DROP COLUMN verification")
        conn.execute(
            "CREATE TABLE bash_notifications (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,"
            " process_id TEXT NOT NULL UNIQUE, command TEXT NOT NULL, exit_code INTEGER, text TEXT NOT NULL,"
            " created_at REAL NOT NULL, delivered_at REAL)"
        )
        conn.execute(
            "INSERT INTO bash_notifications (session_id, process_id, command, exit_code, text, created_at)"
            " VALUES ('s', 'p_1', 'make', 2, 'Background process p_1 exited with code 2.', 1.0),"
            " ('s', 'p_2', 'true', 0, 'done', 2.0)"
        )
        conn.execute("UPDATE bash_notifications SET delivered_at = 3.0 WHERE process_id = 'p_2'")
        conn.execute("PRAGMA user_version = 6")
    conn.close()
    opened = State(state)
    try:
        records = process_records.connect(opened.db_path)
        pending = process_records.pending(records, "s")
        columns = {row[1] for row in records.execute("PRAGMA table_info(bash_processes)")}
        tables = {row[0] for row in records.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        records.close()
    finally:
        opened.close()
    assert [(r["process_id"], r["kind"], r["seq"], r["exit_code"]) for r in pending] == [
        ("p_1", "completion", 0, 2)
    ]
    assert {"options", "verification"} <= columns
    assert "bash_notifications" not in tables


def test_a_state_db_from_a_newer_codemode_is_refused(tmp_path: Path) -> None:
    State(tmp_path / "state").close()
    with sqlite3.connect(tmp_path / "state" / "state.db") as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StateDirError, match="schema version 99, newer"):
        State(tmp_path / "state")


def test_connect_gives_a_configured_connection(archive: Archive, state: State) -> None:
    conn = state.db.connect()
    with conn:
        conn.execute("CREATE TABLE IF NOT EXISTS other_part (x INTEGER)")
        conn.execute("INSERT INTO other_part VALUES (1)")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    conn.close()
    other = state.db.connect()
    assert other.execute("SELECT x FROM other_part").fetchall() == [(1,)]
    other.close()
    assert archive.db_path == archive.state_dir / "state.db"


def test_closed_archive_refuses(tmp_path: Path) -> None:
    arch_state = State(tmp_path / "s")
    arch_state.close()
    arch_state.close()
    with pytest.raises(ValueError, match="closed"):
        arch_state.values.keys("s")


def test_log_written_by_another_process(archive: Archive, tmp_path: Path) -> None:
    log = archive.open_log(kind="log", session_id="s", redact=False)
    log.detach()
    script = (
        "import sys\n"
        "with open(sys.argv[1], 'ab') as f:\n"
        "    for i in range(1000):\n"
        "        f.write(b'%d token ghp_' % i + b'Q' * 36 + b'\\n')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(log.path)], check=True, timeout=60)
    page = archive.read(log.ref, 0, 1 << 20)
    assert page.total_bytes == log.path.stat().st_size and b"ghp_" not in page.data
    with pytest.raises(ValueError, match="detached"):
        log.close()
    done = archive.finish_log(log.ref)
    raw = log.path.read_bytes()
    assert done.total_bytes == len(raw) and done.sha256 == hashlib.sha256(raw).hexdigest()
    assert archive.finish_log(log.ref) == done
    assert archive.entry_info(log.ref)["finished"] is not None


def test_disk_failure_is_a_host_fault(archive: Archive, state: State) -> None:
    from codemode.errors import HostFault

    blobs = archive.state_dir / "blobs"
    for f in blobs.iterdir():
        f.unlink()
    blobs.rmdir()
    blobs.write_text("in the way")
    with pytest.raises(HostFault, match="put"):
        archive.put("text", kind="output")
    assert state.values.keys("s") == []  # the archive keeps working otherwise


def test_put_and_read_from_many_threads(archive: Archive) -> None:
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(30):
                text = f"thread {n} item {i} " * (n + 1)
                ref = archive.put(text, kind="output", session_id=f"s{n}")
                assert archive.read(ref.ref).data == text.encode()
                results[n * 100 + i] = ref.ref
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(results.values())) == 240


def test_put_log_kind_is_compacted_other_kinds_are_not(archive: Archive) -> None:
    big = b"L" * (COMPACT_KEEP_BYTES + 10)
    log = archive.put(big, kind="log")
    out = archive.put(big, kind="output")
    assert archive.maintain()["compacted"] == 1
    assert archive.read(log.ref).retained_from == 10
    assert archive.read(out.ref).retained_from == 0


def test_maintain_with_nothing_to_do_touches_no_files(archive: Archive, state: State) -> None:
    refs = [archive.put(f"entry {i}", kind="output").ref for i in range(200)]
    before = {p.name: p.stat().st_mtime_ns for p in (archive.state_dir / "blobs").iterdir()}
    assert state.maintain() == {"compacted": 0, "expired": 0, "expired_runs": 0, "evicted": 0}
    after = {p.name: p.stat().st_mtime_ns for p in (archive.state_dir / "blobs").iterdir()}
    assert before == after and set(after) == set(refs)
