"""The shared state database on PostgreSQL (psycopg 3; the ``postgres`` extra).

Several hosts on several machines share one PostgreSQL database (``CODEMODE_DATABASE_URL``, or
``codemode mcp --database-url-file``): the tables of `SHARED_TABLES` live there (sessions and
who holds them, resume secrets, store values, run records, approvals, operators' actions, the
consoles' run journal, learned result types, copies of archived text and finished logs), so any
front can serve any session, an index of every machine's background processes and the
notifications of sessions that moved (`_elsewhere`). What belongs to one machine stays in its
state directory's SQLite: process records and their notifications, logs still being written.

The stores write one SQL for both databases (`codemode.state._database.SqlDatabase`); this
module turns its ``?`` placeholders into psycopg's ``%s``. The schema is plain versioned SQL
(`_MIGRATIONS`), applied once, in one transaction, under an advisory lock, so that two hosts
starting on a new database do not both create it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import psycopg
import psycopg.conninfo
import psycopg.sql

from codemode.errors import StateDirError
from codemode.state._database import DRIVER_ERRORS, SqlCursor

__all__ = ["PG_SCHEMA_VERSION", "SHARED_TABLES", "PostgresDatabase", "describe_url"]

DRIVER_ERRORS.append(psycopg.Error)

SHARED_TABLES = (
    "session_holds",
    "session_resume",
    "sessions",
    "store_values",
    "run_records",
    "approval_records",
    "operator_actions",
    "run_journal",
    "upstream_result_types",
    "front_beats",
    "shared_archive",
    "shared_processes",
    "shared_notifications",
)
"""The tables a shared database holds (the rest stay in each state directory's SQLite)."""

# One step per version: ``_MIGRATIONS[v - 1]`` brings a database from version ``v - 1`` to ``v``.
# Columns mirror the SQLite schema's (`codemode.state._schema`) for these tables.
_MIGRATIONS: tuple[str, ...] = (
    """
CREATE TABLE session_holds (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    opened_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION,
    reason TEXT,
    tenant TEXT,
    client TEXT
);
CREATE INDEX session_holds_open ON session_holds (ended_at);
CREATE TABLE session_resume (
    secret_hash TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    issued_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX session_resume_session ON session_resume (session_id);
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    first_seen DOUBLE PRECISION NOT NULL
);
CREATE TABLE store_values (
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    size BIGINT NOT NULL,
    updated DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_id, key)
);
CREATE TABLE run_records (
    session_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    result TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    source_sha256 TEXT,
    PRIMARY KEY (session_id, call_id)
);
CREATE INDEX run_records_created ON run_records (created);
CREATE TABLE approval_records (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    kind TEXT NOT NULL,
    tool TEXT NOT NULL,
    summary TEXT NOT NULL,
    arguments TEXT NOT NULL,
    rule TEXT NOT NULL,
    verdict TEXT NOT NULL,
    reason TEXT
);
CREATE INDEX approval_records_session ON approval_records (session_id, created);
CREATE TABLE operator_actions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at DOUBLE PRECISION NOT NULL,
    tenant TEXT NOT NULL,
    session_id TEXT,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX operator_actions_at ON operator_actions (at);
CREATE TABLE run_journal (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    holder TEXT NOT NULL,
    tenant TEXT,
    started DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL,
    size BIGINT NOT NULL,
    summary TEXT NOT NULL,
    detail TEXT NOT NULL,
    UNIQUE (session_id, run_id)
);
CREATE INDEX run_journal_seq ON run_journal (seq);
CREATE INDEX run_journal_session ON run_journal (session_id, started);
CREATE TABLE front_beats (
    holder TEXT PRIMARY KEY,
    seen_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE upstream_result_types (
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    schema TEXT NOT NULL,
    observed DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (server, tool)
);
""",
    """
CREATE TABLE shared_archive (
    ref TEXT PRIMARY KEY,
    session_id TEXT,
    kind TEXT NOT NULL,
    holder TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    finished DOUBLE PRECISION,
    total_bytes BIGINT NOT NULL DEFAULT 0,
    sha256 TEXT NOT NULL DEFAULT '',
    raw SMALLINT NOT NULL DEFAULT 0,
    head_start BIGINT NOT NULL DEFAULT 0,
    head BYTEA NOT NULL DEFAULT '',
    tail_start BIGINT NOT NULL DEFAULT 0,
    tail BYTEA NOT NULL DEFAULT '',
    size BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX shared_archive_session ON shared_archive (session_id, created);
CREATE INDEX shared_archive_created ON shared_archive (created);
CREATE TABLE shared_processes (
    process_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    holder TEXT NOT NULL,
    command TEXT NOT NULL,
    state TEXT NOT NULL,
    exit_code INTEGER,
    log_ref TEXT,
    started_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION,
    published_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX shared_processes_ended ON shared_processes (ended_at);
CREATE TABLE shared_notifications (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL,
    process_id TEXT NOT NULL,
    command TEXT NOT NULL,
    exit_code INTEGER,
    text TEXT NOT NULL,
    kind TEXT NOT NULL,
    seq BIGINT NOT NULL,
    data TEXT,
    created DOUBLE PRECISION NOT NULL,
    delivered_at DOUBLE PRECISION,
    UNIQUE (process_id, kind, seq)
);
CREATE INDEX shared_notifications_pending ON shared_notifications (session_id) WHERE delivered_at IS NULL;
CREATE INDEX shared_notifications_created ON shared_notifications (created);
""",
    """
ALTER TABLE shared_archive ADD COLUMN object_key TEXT;
ALTER TABLE shared_archive ADD COLUMN head_bytes BIGINT NOT NULL DEFAULT 0;
""",
)

PG_SCHEMA_VERSION = len(_MIGRATIONS)

_CONNECT_TIMEOUT_SECONDS = 10.0
# Advisory lock keys, one per name a transaction serialises on: the high 32 bits say "cm", so
# that an application sharing the database is unlikely to take the same keys.
_LOCK_SPACE = 0x636D_0000 << 32


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    """``sql`` with its ``?`` placeholders as psycopg's ``%s`` (the stores' SQL has neither a
    ``%`` nor a ``?`` in a literal; one would be misread, so it is refused)."""
    if "%" in sql:
        raise ValueError("SQL for the shared database may not contain '%'")
    return sql.replace("?", "%s")


def _lock_key(name: str) -> int:
    return _LOCK_SPACE | zlib.crc32(name.encode())


def describe_url(url: str) -> str:
    """The database a URL names, without its password: ``user@host:port/dbname``."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "a database URL that cannot be parsed"
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    return f"{user}{host}{port}/{parts.get('dbname') or '(default database)'}"


class _Connection:
    """A pooled psycopg connection (autocommit) speaking the stores' ``?`` SQL."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> SqlCursor:
        return self._conn.execute(_pg_sql(sql), parameters)  # type: ignore[arg-type]


class PostgresDatabase:
    """A shared PostgreSQL database, its schema current, with a pool of connections.

    The pool is the state directory's (`codemode.state.Database`) in psycopg: a connection is
    taken from the free ones or opened, and given back after the block unless it broke, is in a
    transaction, or `idle_connections` are free already. (psycopg_pool would do it with health
    checks, but it is not among the packages a machine without the package index has, as CI's
    is; a connection the server dropped fails its one statement as a `HostFault` and is
    discarded.)

    Args:
        url: A libpq connection string or URL (it carries a password: never logged; errors name
            the database by `describe_url`).
        idle_connections: Most connections kept open while unused.

    Raises:
        StateDirError: The database cannot be reached, or its schema is newer than this version
            of codemode knows.
    """

    def __init__(self, url: str, *, idle_connections: int = 8) -> None:
        self._url = url
        self._where = describe_url(url)
        self._keep = idle_connections
        self._lock = threading.Lock()
        self._free: list[psycopg.Connection[Any]] = []
        self._closed = False
        try:  # a database that is not there fails here, at once, and clearly
            conn = self._connect()
            try:
                _migrate(conn, self._where)
            except BaseException:
                conn.close()
                raise
        except psycopg.Error as exc:
            raise StateDirError(
                f"cannot use the shared state database {self._where}: {str(exc).strip()} (check that it "
                "runs and that CODEMODE_DATABASE_URL or --database-url-file names it)"
            ) from exc
        self._free.append(conn)

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self._url, autocommit=True, connect_timeout=int(_CONNECT_TIMEOUT_SECONDS))

    @contextlib.contextmanager
    def _pooled(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            if self._closed:
                raise ValueError("the shared state database is closed")
            conn = self._free.pop() if self._free else None
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        finally:
            idle = not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            with self._lock:
                keep = idle and not self._closed and len(self._free) < self._keep
                if keep:
                    self._free.append(conn)
            if not keep:
                conn.close()

    @property
    def dialect(self) -> Literal["postgres"]:
        """Which SQL this database speaks."""
        return "postgres"

    @property
    def where(self) -> str:
        """The database, without its password (`describe_url`)."""
        return self._where

    @contextlib.contextmanager
    def connection(self) -> Iterator[_Connection]:
        """A pooled autocommit connection for the block."""
        with self._pooled() as conn:
            yield _Connection(conn)

    @contextlib.contextmanager
    def transaction(self, lock: str) -> Iterator[_Connection]:
        """A pooled connection in a transaction that holds the advisory lock named ``lock``
        (every host's transactions on that name run one after another); committed after the
        block, rolled back when it raises."""
        with self._pooled() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(lock),))
            yield _Connection(conn)

    def execute(self, sql: str, params: tuple[object, ...]) -> int:
        """Run one statement on a pooled connection; return the rows it changed."""
        with self.connection() as conn:
            return conn.execute(sql, params).rowcount

    def bytes_of(self, column: str) -> str:
        """SQL for the UTF-8 size of a text column."""
        return f"octet_length({column})"

    def listen(self, channel: str, stop: threading.Event) -> Iterator[str]:
        """The payload of every ``NOTIFY`` on ``channel``, until ``stop`` is set (checked every
        second), on a connection of its own. An empty payload comes first and after every
        reconnection (a broken connection is retried every second): what was notified while
        not listening is missed, so the caller looks at everything again."""
        while not stop.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
                    yield ""
                    while not stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            yield note.payload
            except psycopg.Error:
                stop.wait(1.0)

    def close(self) -> None:
        """Close the free connections; those in use close when given back. Idempotent."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for conn in free:
            conn.close()


def _migrate(conn: psycopg.Connection[Any], where: str) -> None:
    """Bring the schema to `PG_SCHEMA_VERSION`, in one transaction under an advisory lock."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key("codemode_schema"),))
        conn.execute("CREATE TABLE IF NOT EXISTS codemode_schema (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM codemode_schema").fetchone()
        version = 0 if row is None else int(row[0])
        if version > PG_SCHEMA_VERSION:
            raise StateDirError(
                f"the shared state database {where} has schema version {version}, newer than this "
                f"codemode knows ({PG_SCHEMA_VERSION}): upgrade codemode on this machine"
            )
        for step in _MIGRATIONS[version:]:
            conn.execute(step.encode())
        if row is None:
            conn.execute("INSERT INTO codemode_schema (version) VALUES (%s)", (PG_SCHEMA_VERSION,))
        elif version < PG_SCHEMA_VERSION:
            conn.execute("UPDATE codemode_schema SET version = %s", (PG_SCHEMA_VERSION,))
