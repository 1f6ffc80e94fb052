"""The one schema of the state database, and the migrations that bring an older one to it.

Every table of every part lives here: the archive's entries and settings, store values, run
records and sessions, the bash tool's process records and notifications. A database records
its version in ``PRAGMA user_version``; a new one gets `SCHEMA` whole, an older one runs
``_MIGRATIONS[v]`` for each version ``v`` up to `SCHEMA_VERSION`, all in one transaction, so
another process sees the old schema or the new one, never half of each. To change a table: bump
`SCHEMA_VERSION`, change `SCHEMA` to the new shape, add the step that brings version ``v - 1``
there, and a test that opens a database of the old version.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from codemode.errors import StateDirError

__all__ = ["SCHEMA", "SCHEMA_VERSION", "init_schema"]

SCHEMA_VERSION = 15

# The bash tool's tables as version 6 had them (what migration 5 -> 6 creates).
_BASH_TABLES_V6 = """
CREATE TABLE IF NOT EXISTS bash_processes (
    process_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT NOT NULL,
    kind TEXT NOT NULL,
    marker TEXT NOT NULL,
    lifecycle TEXT NOT NULL,
    completion_mode TEXT NOT NULL,
    purpose TEXT,
    scope TEXT,
    state TEXT NOT NULL,
    pid INTEGER,
    pid_started REAL,
    supervisor_pid INTEGER,
    supervisor_started REAL,
    log_path TEXT NOT NULL,
    log_ref TEXT,
    log_base INTEGER NOT NULL DEFAULT 0,
    input_path TEXT,
    input_token TEXT,
    cgroup TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    exit_code INTEGER,
    exit_signal TEXT,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE INDEX IF NOT EXISTS bash_processes_session ON bash_processes (session_id, state);
CREATE TABLE IF NOT EXISTS bash_notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    process_id TEXT NOT NULL UNIQUE,
    command TEXT NOT NULL,
    exit_code INTEGER,
    text TEXT NOT NULL,
    created_at REAL NOT NULL,
    delivered_at REAL
);
CREATE INDEX IF NOT EXISTS bash_notifications_pending ON bash_notifications (session_id, delivered_at);
"""

# The bash tool's tables (process records of background runs, promoted runs and Monitor
# watchers; the notifications queued for sessions), part of SCHEMA. A notification is a
# completion (``kind`` completion, ``seq`` 0: one per process), a keyword report (``report``,
# numbered per process) or a watcher's event (``event``, numbered per watcher from 1: the
# cursor ``after`` reads on); ``delivered_at`` is set once the session has seen it.
_BASH_TABLES = """
CREATE TABLE IF NOT EXISTS bash_processes (
    process_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT NOT NULL,
    kind TEXT NOT NULL,
    marker TEXT NOT NULL,
    lifecycle TEXT NOT NULL,
    completion_mode TEXT NOT NULL,
    purpose TEXT,
    scope TEXT,
    state TEXT NOT NULL,
    pid INTEGER,
    pid_started REAL,
    supervisor_pid INTEGER,
    supervisor_started REAL,
    log_path TEXT NOT NULL,
    log_ref TEXT,
    log_base INTEGER NOT NULL DEFAULT 0,
    input_path TEXT,
    input_token TEXT,
    cgroup TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    exit_code INTEGER,
    exit_signal TEXT,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    options TEXT,
    verification TEXT
);
CREATE INDEX IF NOT EXISTS bash_processes_session ON bash_processes (session_id, state);
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    process_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    seq INTEGER NOT NULL,
    command TEXT NOT NULL,
    exit_code INTEGER,
    text TEXT NOT NULL,
    data TEXT,
    created_at REAL NOT NULL,
    delivered_at REAL,
    UNIQUE (process_id, kind, seq)
);
CREATE INDEX IF NOT EXISTS notifications_pending ON notifications (session_id, delivered_at);
"""

# A count of the writes to the bash tool's tables, kept by triggers (every connection's: a
# supervisor's too). A result asks whether its session has anything live or pending; while the
# count stands, a session found with nothing still has nothing (`bash_changes`). Each statement
# is executed alone: a trigger's body holds semicolons, so these are not split like `SCHEMA`.
_BASH_CHANGES = (
    "CREATE TABLE IF NOT EXISTS bash_changes (id INTEGER PRIMARY KEY CHECK (id = 0), n INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO bash_changes (id, n) VALUES (0, 0)",
    *(
        f"CREATE TRIGGER IF NOT EXISTS {table}_{event.lower()}_counted AFTER {event} ON {table} "
        "BEGIN UPDATE bash_changes SET n = n + 1 WHERE id = 0; END"
        for table in ("bash_processes", "notifications")
        for event in ("INSERT", "UPDATE", "DELETE")
    ),
)

# Sessions held open by a front process (``<pid>t<start>``) and how each ended (`_holds`).
_HOLD_TABLES = """
CREATE TABLE IF NOT EXISTS session_holds (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    opened_at REAL NOT NULL,
    ended_at REAL,
    reason TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS session_holds_open ON session_holds (ended_at);
"""

# A held session's resume secret (its SHA-256) and the tenant it was issued to (`_holds`).
_RESUME_TABLES = """
CREATE TABLE IF NOT EXISTS session_resume (
    secret_hash TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    issued_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS session_resume_session ON session_resume (session_id);
"""

# Approval requests and their decisions (the audit of codemode.policy's approvals).
_APPROVAL_TABLES = """
CREATE TABLE IF NOT EXISTS approval_records (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    created REAL NOT NULL,
    kind TEXT NOT NULL,
    tool TEXT NOT NULL,
    summary TEXT NOT NULL,
    arguments TEXT NOT NULL,
    rule TEXT NOT NULL,
    verdict TEXT NOT NULL,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS approval_records_session ON approval_records (session_id, created);
"""

# What a person did through the console (takeover, keystrokes, approvals, stops, trash).
_OPERATOR_TABLES = """
CREATE TABLE IF NOT EXISTS operator_actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    tenant TEXT NOT NULL,
    session_id TEXT,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS operator_actions_at ON operator_actions (at);
"""

# What every front's console shows: whose a held session is and its client (columns added to
# session_holds, `_holds`), and each program's summary and detail as JSON
# (`_journal.RunJournal`), ``seq`` growing with every write so that a console polls what changed.
_HOLD_LABELS = ("tenant", "client")
_JOURNAL_TABLES = """
CREATE TABLE IF NOT EXISTS run_journal (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    holder TEXT NOT NULL,
    tenant TEXT,
    started REAL NOT NULL,
    status TEXT NOT NULL,
    size INTEGER NOT NULL,
    summary TEXT NOT NULL,
    detail TEXT NOT NULL,
    UNIQUE (session_id, run_id)
);
CREATE INDEX IF NOT EXISTS run_journal_seq ON run_journal (seq);
CREATE INDEX IF NOT EXISTS run_journal_session ON run_journal (session_id, started);
"""

# Result types learned from upstream MCP tools' first results (codemode.tools.upstream).
_LEARNED_TABLES = """
CREATE TABLE IF NOT EXISTS upstream_result_types (
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    schema TEXT NOT NULL,
    observed REAL NOT NULL,
    PRIMARY KEY (server, tool)
) WITHOUT ROWID;
"""

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS archive_entries (
    ref TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    session_id TEXT,
    created REAL NOT NULL,
    finished REAL,
    total_bytes INTEGER NOT NULL DEFAULT 0,
    sha256 TEXT,
    retained_from INTEGER NOT NULL DEFAULT 0,
    raw INTEGER NOT NULL DEFAULT 0,
    stream INTEGER NOT NULL DEFAULT 0,
    pinned INTEGER NOT NULL DEFAULT 0,
    needs_compact INTEGER NOT NULL DEFAULT 0,
    file TEXT NOT NULL,
    disk_bytes INTEGER,
    cap_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS archive_entries_created ON archive_entries(created);
CREATE INDEX IF NOT EXISTS archive_entries_compact ON archive_entries(needs_compact) WHERE needs_compact = 1;
CREATE INDEX IF NOT EXISTS archive_entries_live ON archive_entries(finished) WHERE finished IS NULL;
CREATE TABLE IF NOT EXISTS archive_settings (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS store_values (
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    size INTEGER NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_records (
    session_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    result TEXT NOT NULL,
    created REAL NOT NULL,
    source_sha256 TEXT,
    PRIMARY KEY (session_id, call_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_records_created ON run_records(created);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    first_seen REAL NOT NULL
) WITHOUT ROWID;
"""
    + _BASH_TABLES
    + _APPROVAL_TABLES
    + _LEARNED_TABLES
    + _HOLD_TABLES
    + _RESUME_TABLES
    + _OPERATOR_TABLES
    + "".join(f"ALTER TABLE session_holds ADD COLUMN {column} TEXT;" for column in _HOLD_LABELS)
    + _JOURNAL_TABLES
)
"""Every table, as a new database gets it."""


def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
    """Run records: one key ``session + "\\x1f" + call`` becomes two columns.

    A key joined with a separator let session ``team`` with call id ``"victim\\x1fc1"`` hit the
    record of session ``team\\x1fvictim``'s call ``c1``. Version 1 stored the owner beside the
    joined key, so each row splits back exactly: the call id is the key without the
    ``session + "\\x1f"`` prefix (a key without that prefix was a plain call id).
    """
    conn.execute("ALTER TABLE run_records RENAME TO run_records_v1")
    conn.execute(
        "CREATE TABLE run_records (session_id TEXT NOT NULL, call_id TEXT NOT NULL, result TEXT NOT NULL,"
        " created REAL NOT NULL, PRIMARY KEY (session_id, call_id)) WITHOUT ROWID"
    )
    conn.execute(
        "INSERT OR IGNORE INTO run_records (session_id, call_id, result, created)"
        " SELECT session_id,"
        " CASE WHEN substr(call_id, 1, length(session_id) + 1) = session_id || char(31)"
        " THEN substr(call_id, length(session_id) + 2) ELSE call_id END,"
        " result, created FROM run_records_v1"
    )
    conn.execute("DROP TABLE run_records_v1")  # and its index
    conn.execute("CREATE INDEX run_records_created ON run_records(created)")


def _migrate_2_to_3(conn: sqlite3.Connection) -> None:
    """Entries record their disk use (for the quota) and their log's cap; a settings table.

    A finished entry of version 2 is one dense file of its retained bytes, so that is its
    disk use (within a block).
    """
    conn.execute("ALTER TABLE archive_entries ADD COLUMN disk_bytes INTEGER")
    conn.execute("ALTER TABLE archive_entries ADD COLUMN cap_bytes INTEGER")
    conn.execute(
        "UPDATE archive_entries SET disk_bytes = total_bytes - retained_from WHERE finished IS NOT NULL"
    )
    conn.execute("CREATE INDEX archive_entries_live ON archive_entries(finished) WHERE finished IS NULL")
    conn.execute("CREATE TABLE archive_settings (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID")


def _migrate_3_to_4(conn: sqlite3.Connection) -> None:
    """Run records keep the sha256 of their program's source, so a replay can check it
    (records from before have none: they replay unchecked)."""
    conn.execute("ALTER TABLE run_records ADD COLUMN source_sha256 TEXT")


def _migrate_4_to_5(conn: sqlite3.Connection) -> None:
    """A table of the sessions seen, so runs without a call id need no record of their own
    (nothing can replay them) and a session is still known once it has run anything."""
    conn.execute(
        "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, first_seen REAL NOT NULL) WITHOUT ROWID"
    )
    conn.execute(
        "INSERT OR IGNORE INTO sessions (session_id, first_seen)"
        " SELECT session_id, MIN(created) FROM run_records GROUP BY session_id"
    )


def _migrate_5_to_6(conn: sqlite3.Connection) -> None:
    """The bash tool's tables join the one schema (they were created apart, their columns
    added by hand): create them where missing, add the columns older copies lack."""
    for statement in _BASH_TABLES_V6.split(";"):
        if statement.strip():
            conn.execute(statement)
    have = {row[1] for row in conn.execute("PRAGMA table_info(bash_processes)")}
    for name in ("input_token", "cgroup"):
        if name not in have:
            conn.execute(f"ALTER TABLE bash_processes ADD COLUMN {name} TEXT")


def _migrate_6_to_7(conn: sqlite3.Connection) -> None:
    """Approval requests and decisions are kept (the audit records of approvals)."""
    for statement in _APPROVAL_TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate_7_to_8(conn: sqlite3.Connection) -> None:
    """Result types learned from upstream MCP tools are kept per server and tool."""
    for statement in _LEARNED_TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate_8_to_9(conn: sqlite3.Connection) -> None:
    """One queue of notifications for completions, keyword reports and Monitor events (several
    per process, told apart by kind and sequence number), and process records keep their
    options (a watcher's limits, a run's keywords and lifetime) and their verification."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(bash_processes)")}
    for column in ("options", "verification"):
        if column not in have:  # absent unless the queue came in an earlier numbering
            conn.execute(f"ALTER TABLE bash_processes ADD COLUMN {column} TEXT")
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "bash_notifications" not in tables:
        return  # the one queue is there already
    conn.execute(
        "CREATE TABLE notifications (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,"
        " process_id TEXT NOT NULL, kind TEXT NOT NULL, seq INTEGER NOT NULL, command TEXT NOT NULL,"
        " exit_code INTEGER, text TEXT NOT NULL, data TEXT, created_at REAL NOT NULL, delivered_at REAL,"
        " UNIQUE (process_id, kind, seq))"
    )
    conn.execute(
        "INSERT INTO notifications (id, session_id, process_id, kind, seq, command, exit_code, text,"
        " created_at, delivered_at) SELECT id, session_id, process_id, 'completion', 0, command, exit_code,"
        " text, created_at, delivered_at FROM bash_notifications"
    )
    conn.execute("DROP TABLE bash_notifications")  # and its index
    conn.execute("CREATE INDEX notifications_pending ON notifications (session_id, delivered_at)")


def _migrate_9_to_10(conn: sqlite3.Connection) -> None:
    """Sessions held open by a front process are recorded, with how each ended."""
    for statement in _HOLD_TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate_10_to_11(conn: sqlite3.Connection) -> None:
    """A held session's resume secret (its hash) and tenant (`_holds.issue_resume`)."""
    for statement in _RESUME_TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate_11_to_12(conn: sqlite3.Connection) -> None:
    """What a person did through the console is recorded (`_audit.OperatorLog`)."""
    for statement in _OPERATOR_TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate_12_to_13(conn: sqlite3.Connection) -> None:
    """Processes are named by their start in clock ticks since boot, no longer by psutil's
    wall-clock ``create_time()`` (which moves when the clock is stepped; see
    `codemode.sandbox.process_start`): recorded starts and session holders are converted with
    the boot time of now, which is what they were made with unless the clock was stepped."""
    boot = _boot_time()
    if boot is None:  # not Linux's /proc: nothing can be converted, nothing will match
        conn.execute("UPDATE bash_processes SET pid_started = NULL, supervisor_started = NULL")
        return
    ticks = os.sysconf("SC_CLK_TCK")
    for column in ("pid_started", "supervisor_started"):
        conn.execute(
            f"UPDATE bash_processes SET {column} = ROUND(({column} - ?) * ?) WHERE {column} IS NOT NULL",
            (boot, ticks),
        )
    for (holder,) in conn.execute("SELECT DISTINCT holder FROM session_holds").fetchall():
        pid, sep, hundredths = str(holder).partition("x")
        if sep and pid.isdigit() and hundredths.isdigit():
            started = round((int(hundredths) / 100 - boot) * ticks)
            conn.execute("UPDATE session_holds SET holder = ? WHERE holder = ?", (f"{pid}t{started}", holder))


def _migrate_13_to_14(conn: sqlite3.Connection) -> None:
    """Every front's console reads sessions and programs from the state (`_journal`)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(session_holds)")}
    for column in _HOLD_LABELS:
        if column not in columns:  # (a test's database may have it already)
            conn.execute(f"ALTER TABLE session_holds ADD COLUMN {column} TEXT")
    for statement in _JOURNAL_TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate_14_to_15(conn: sqlite3.Connection) -> None:
    """A result's question "anything live or pending?" is answered from memory while the bash
    tables are unchanged: their writes are counted (`_BASH_CHANGES`)."""
    for statement in _BASH_CHANGES:
        conn.execute(statement)


def _boot_time() -> int | None:
    """The kernel's boot time (``btime`` of ``/proc/stat``, whole seconds of the wall clock)."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


# _MIGRATIONS[v] brings a database from version v to v + 1, inside the caller's transaction.
_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _migrate_1_to_2,
    2: _migrate_2_to_3,
    3: _migrate_3_to_4,
    4: _migrate_4_to_5,
    5: _migrate_5_to_6,
    6: _migrate_6_to_7,
    7: _migrate_7_to_8,
    8: _migrate_8_to_9,
    9: _migrate_9_to_10,
    10: _migrate_10_to_11,
    11: _migrate_11_to_12,
    12: _migrate_12_to_13,
    13: _migrate_13_to_14,
    14: _migrate_14_to_15,
}


def init_schema(conn: sqlite3.Connection, db_path: Path) -> None:
    """Create the schema in a new database, or migrate an older one step by step.

    Args:
        conn: An autocommit connection (``isolation_level=None``) to the database.
        db_path: Its file, for messages.

    Raises:
        StateDirError: The database is in WAL-incapable storage, or was written by a newer
            codemode (its schema version is unknown here).
    """
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version == SCHEMA_VERSION:
        return
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StateDirError(f"the state database {db_path} cannot use WAL mode (got {mode})")
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have created or migrated it while this one waited for the lock.
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise StateDirError(
                f"the state database {db_path} has schema version {version}, newer than this "
                f"codemode's ({SCHEMA_VERSION}); upgrade codemode or use another state directory"
            )
        if version == 0:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            for statement in _BASH_CHANGES:
                conn.execute(statement)
        else:
            for step in range(version, SCHEMA_VERSION):
                _MIGRATIONS[step](conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
