"""The state directory and its SQLite database: secured, migrated, pooled; and the interface
every database of the state offers (`SqlDatabase`), which PostgreSQL's (`_postgres`) offers too.

Layout of the state directory (mode 0700)::

    state.db          SQLite (WAL), every part's tables (``_schema``)
    blobs/<file>      one file per archived entry (mode 0600; the archive's)

Connections come from a small pool, so the stores can be used from many threads at once;
several processes can share one state directory (SQLite WAL plus a busy timeout).

The stores that may live in a shared database (`codemode.state._postgres.SHARED_TABLES`) write SQL both databases run:
``?`` placeholders, ``INSERT ... ON CONFLICT``, no SQLite-only functions (`SqlDatabase.bytes_of`
names the one they need), and serialised read-then-write steps in `SqlDatabase.transaction`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, Literal, ParamSpec, Protocol, TypeVar

from codemode.errors import HostFault, StateDirError
from codemode.state._schema import init_schema

__all__ = ["DRIVER_ERRORS", "Database", "SqlConnection", "SqlCursor", "SqlDatabase", "host_faults"]

_BUSY_TIMEOUT_MS = 10_000

DRIVER_ERRORS: list[type[Exception]] = [sqlite3.Error]
"""The errors of every database driver loaded (`_postgres` adds psycopg's when imported):
`host_faults` turns them into `HostFault`."""


class SqlCursor(Protocol):
    """What the stores read of a cursor (sqlite3's and psycopg's both)."""

    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class SqlConnection(Protocol):
    """What the stores do with a connection: statements with ``?`` placeholders."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> SqlCursor: ...


class SqlDatabase(Protocol):
    """A database the state's stores run on: the state directory's SQLite (`Database`) or a
    shared PostgreSQL (`codemode.state._postgres.PostgresDatabase`)."""

    @property
    def dialect(self) -> Literal["sqlite", "postgres"]: ...

    def connection(self) -> contextlib.AbstractContextManager[SqlConnection]: ...

    def transaction(self, lock: str) -> contextlib.AbstractContextManager[SqlConnection]: ...

    def execute(self, sql: str, params: tuple[object, ...]) -> int: ...

    def bytes_of(self, column: str) -> str: ...

    def listen(self, channel: str, stop: threading.Event) -> Iterator[str]: ...

    def close(self) -> None: ...


_P = ParamSpec("_P")
_T = TypeVar("_T")


def host_faults(fn: Callable[_P, _T]) -> Callable[_P, _T]:
    """Turn database and disk failures (locked for too long, disk full, I/O error) into
    `HostFault`: never the model's fault. Every store method that touches the disk wears it."""

    @wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return fn(*args, **kwargs)
        except OSError as exc:
            raise HostFault(
                f"the state directory could not {fn.__name__.replace('_', ' ')}: {exc.strerror or exc}"
            ) from exc
        except tuple(DRIVER_ERRORS) as exc:
            raise HostFault(f"the state database failed during {fn.__name__}: {exc}") from exc

    return wrapper


def _secure_state_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) or check and tighten an existing one."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise StateDirError(f"state directory {path} exists but is not a directory; move it away") from exc
    except OSError as exc:
        raise StateDirError(f"cannot create state directory {path}: {exc.strerror or exc}") from exc
    try:
        st = os.stat(path)
    except OSError as exc:
        raise StateDirError(f"cannot inspect state directory {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise StateDirError(f"state directory {path} is not a directory; move it away or choose another")
    if st.st_uid != os.getuid():
        raise StateDirError(
            f"state directory {path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()}); "
            "choose a directory of your own (CODEMODE_HOME)"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        try:
            os.chmod(path, 0o700)
        except OSError as exc:
            raise StateDirError(
                f"state directory {path} has mode {stat.S_IMODE(st.st_mode):o} and cannot be set to 700: "
                f"{exc.strerror or exc}"
            ) from exc
        if stat.S_IMODE(os.stat(path).st_mode) != 0o700:
            raise StateDirError(f"state directory {path} could not be secured to mode 700")
    return path


def _configure(conn: sqlite3.Connection) -> sqlite3.Connection:
    conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


class Database:
    """One state directory's database, its schema current, with a pool of connections.

    Args:
        state_dir: Directory to use (created with mode 0700, parents too; an existing one is
            tightened to 0700).

    Raises:
        StateDirError: The directory is not a directory, is not ours, cannot be secured, or
            the database cannot be opened or has a newer schema.
    """

    def __init__(self, state_dir: Path) -> None:
        self._state_dir = _secure_state_dir(Path(state_dir).expanduser().absolute())
        self._db_path = self._state_dir / "state.db"
        self._lock = threading.Lock()
        self._free: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._closed = False
        try:
            conn = self._open_connection()
            init_schema(conn, self._db_path)
            with contextlib.suppress(OSError):
                os.chmod(self._db_path, 0o600)
        except sqlite3.Error as exc:
            raise StateDirError(f"cannot open the state database {self._db_path}: {exc}") from exc
        self._free.append(conn)
        self._all.append(conn)

    @property
    def dialect(self) -> Literal["sqlite"]:
        """Which SQL this database speaks."""
        return "sqlite"

    @property
    def state_dir(self) -> Path:
        """The state directory."""
        return self._state_dir

    @property
    def db_path(self) -> Path:
        """The SQLite database file."""
        return self._db_path

    def connect(self) -> sqlite3.Connection:
        """Open a new connection of the caller's own (it closes it).

        WAL journal, ``synchronous=NORMAL``, a 10 s busy timeout, usable from any thread
        (``check_same_thread=False``; serialise use yourself) and Python's default
        transaction handling (``with conn:`` commits).
        """
        conn = sqlite3.connect(self._db_path, timeout=_BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        return _configure(conn)

    def _open_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._db_path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        return _configure(conn)

    def _acquire(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise ValueError("the state database is closed")
            if self._free:
                return self._free.pop()
        conn = self._open_connection()
        with self._lock:
            self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A pooled autocommit connection for the block (an open transaction is rolled back
        after it)."""
        conn = self._acquire()
        try:
            yield conn
        finally:
            self._release(conn)

    def _release(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        with self._lock:
            if self._closed:
                conn.close()
            else:
                self._free.append(conn)

    @contextlib.contextmanager
    def transaction(self, lock: str) -> Iterator[sqlite3.Connection]:
        """A pooled connection in a transaction that holds the database's write lock from its
        start (``BEGIN IMMEDIATE``: a read then a write in it see no other writer between
        them); committed after the block, rolled back when it raises. ``lock`` names what is
        serialised (PostgreSQL locks only that; SQLite locks the whole database)."""
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def execute(self, sql: str, params: tuple[object, ...]) -> int:
        """Run one statement on a pooled connection; return the rows it changed."""
        with self.connection() as conn:
            return conn.execute(sql, params).rowcount

    def bytes_of(self, column: str) -> str:
        """SQL for the UTF-8 size of a text column."""
        return f"length(CAST({column} AS BLOB))"

    def listen(self, channel: str, stop: threading.Event) -> Iterator[str]:
        """Nothing: only a shared database carries notifications between hosts."""
        return iter(())

    def close(self) -> None:
        """Close every pooled connection. Idempotent; connections in use close when released."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for conn in free:
            conn.close()
