"""The shared PostgreSQL database itself (a real cluster): its schema made once when hosts open
a new database at the same moment, a newer schema refused, an unreachable or wrong database a
clear error that never shows the password, driver errors as host faults, and the extra missing."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from codemode.errors import HostFault, StateDirError
from codemode.state import State
from codemode.state._postgres import _MIGRATIONS, PG_SCHEMA_VERSION, PostgresDatabase, _pg_sql


def test_hosts_opening_a_new_database_at_once_make_its_schema_once(database_url: str) -> None:
    opened: list[PostgresDatabase] = []
    failures: list[BaseException] = []

    def open_one() -> None:
        try:
            opened.append(PostgresDatabase(database_url))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert failures == [] and len(opened) == 4
        with opened[0].connection() as conn:
            assert conn.execute("SELECT version FROM codemode_schema").fetchall() == [(PG_SCHEMA_VERSION,)]
    finally:
        for db in opened:
            db.close()


def test_a_database_of_an_older_version_is_brought_up_to_date_keeping_its_rows(database_url: str) -> None:
    """A database made by the previous version (schema 2: copies' bytes only in the database)
    gains what this one adds, its rows kept."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE codemode_schema (version INTEGER NOT NULL)")
        for step in _MIGRATIONS[:2]:
            conn.execute(step.encode())
        conn.execute("INSERT INTO codemode_schema (version) VALUES (2)")
        conn.execute(
            "INSERT INTO shared_archive (ref, kind, holder, created, head) VALUES ('ar_x', 'output', 'h', 1, 'kept')"
        )
    db = PostgresDatabase(database_url)
    try:
        with db.connection() as conn:
            assert conn.execute("SELECT version FROM codemode_schema").fetchall() == [(PG_SCHEMA_VERSION,)]
            row = conn.execute("SELECT head, object_key, head_bytes FROM shared_archive").fetchone()
        assert (bytes(row[0]), row[1], row[2]) == (b"kept", None, 0)
    finally:
        db.close()


def test_a_newer_schema_is_refused_and_named(database_url: str) -> None:
    PostgresDatabase(database_url).close()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE codemode_schema SET version = version + 1")
    with pytest.raises(StateDirError, match=r"schema version \d+, newer than this codemode knows.*upgrade"):
        PostgresDatabase(database_url)


def test_an_unreachable_database_fails_at_once_without_showing_its_password(tmp_path: Path) -> None:
    url = f"postgresql://alice:hunter2-secret@/codemode?host={tmp_path}/nothing-here"
    started = time.monotonic()
    with pytest.raises(StateDirError) as caught:
        State(tmp_path / "state", database_url=url)
    assert time.monotonic() - started < 5  # no pool retrying for its whole timeout
    message = str(caught.value)
    assert "alice@" in message and "/codemode" in message and "CODEMODE_DATABASE_URL" in message
    assert "hunter2" not in message and "hunter2" not in repr(caught.value.__cause__)


def test_a_failing_statement_is_a_host_fault(tmp_path: Path, database_url: str) -> None:
    with State(tmp_path / "state", database_url=database_url) as state:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("DROP TABLE upstream_result_types")
        with pytest.raises(HostFault, match="the state database failed during put"):
            state.learned.put("server", "tool", {"type": "object"})
        state.values.set("s", "k", "1")  # the other stores go on, on the same pool
        assert state.values.get("s", "k") == "1"


def test_sql_with_a_percent_sign_is_refused() -> None:
    """psycopg reads ``%`` as a placeholder: the stores' SQL must not contain one."""
    assert _pg_sql("SELECT a FROM t WHERE b = ? AND c = ?") == "SELECT a FROM t WHERE b = %s AND c = %s"
    with pytest.raises(ValueError, match="may not contain '%'"):
        _pg_sql("SELECT a FROM t WHERE b LIKE 'x%'")


def test_without_the_postgres_extra_a_database_url_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "codemode.state._postgres", None)  # as if psycopg were missing
    with pytest.raises(StateDirError, match=r"install codemode with the postgres extra"):
        State(tmp_path / "state", database_url="host=/nowhere dbname=x")


def test_a_connection_the_server_dropped_fails_once_and_is_not_kept(
    tmp_path: Path, database_url: str
) -> None:
    """A restarted or failed-over server drops the pool's idle connections: the statement on one
    is a `HostFault`, that connection is discarded, and the next statement opens a new one."""
    with State(tmp_path / "state", database_url=database_url) as state:
        state.values.set("s", "k", "1")
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE usename = current_user AND pid <> pg_backend_pid()"
            )
        with pytest.raises(HostFault, match="the state database failed during get"):
            state.values.get("s", "k")
        assert state.values.get("s", "k") == "1"
    with pytest.raises(ValueError, match="closed"):
        state.values.get("s", "k")


def test_listen_yields_once_connected_then_each_notification(database_url: str) -> None:
    db = PostgresDatabase(database_url)
    stop = threading.Event()
    got: list[str] = []
    connected = threading.Event()
    arrived = threading.Event()

    def listen() -> None:
        for payload in db.listen("codemode_test", stop):
            got.append(payload)
            (arrived if payload else connected).set()

    thread = threading.Thread(target=listen)
    thread.start()
    try:
        assert connected.wait(10)
        db.execute("SELECT pg_notify(?, ?)", ("codemode_test", "s-1"))
        assert arrived.wait(10)
        assert got == ["", "s-1"]
    finally:
        stop.set()
        thread.join(10)
        db.close()
    assert not thread.is_alive()
