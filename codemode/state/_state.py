"""`State`: the stores of one state directory, on its database, and those sessions share, on
the state directory's database too or on a shared PostgreSQL one."""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType

from codemode.errors import StateDirError
from codemode.state import _elsewhere as elsewhere
from codemode.state._archive import EXPIRE_AFTER_SECONDS, Archive
from codemode.state._audit import ApprovalLog, OperatorLog
from codemode.state._capped import DEFAULT_LOG_CAP_BYTES, DEFAULT_QUOTA_BYTES
from codemode.state._database import Database, SqlDatabase, host_faults
from codemode.state._journal import RunJournal
from codemode.state._learned import LearnedTypes
from codemode.state._objects import ObjectStore, S3Store, parse_object_store_url
from codemode.state._redact import Redactor
from codemode.state._runs import RunRecords
from codemode.state._shared_archive import SharedArchive
from codemode.state._values import ValueStore

__all__ = ["State"]


class State:
    """One state directory: its database (one schema, migrated at open) and the stores on it;
    with ``database_url``, the stores sessions share (`codemode.state._postgres.SHARED_TABLES`)
    on a PostgreSQL database instead, so that hosts on several machines serve any session.

    Attributes:
        db: The state directory's database (the bash tool's process records open their own
            connections on it).
        shared: Where the stores sessions share live: ``db``, or the PostgreSQL database.
        archive: Archived text and logs (the state directory's).
        values: Store values (a program's ``store``), per session.
        runs: Run records and the sessions seen.
        approvals: Approval requests and their decisions (the audit).
        operators: What people did through the console (the audit).
        journal: Programs as every front's console shows them.
        learned: Result types learned from upstream MCP tools.

    Args:
        state_dir: Directory to use (created with mode 0700, parents too).
        redactor: The one redactor for text persisted and read back (default: over
            ``os.environ``).
        log_cap_bytes: Most bytes one log keeps on disk while it is written (`Archive`).
        quota_bytes: Most bytes the state directory holds (`Archive`).
        database_url: A PostgreSQL database for what sessions share (the ``postgres`` extra),
            archived text included (copied there when finished, fetched by the machines that
            do not hold it: `SharedArchive`); None: the state directory's database holds it all.
        holder: This process with its place (``<pid>t<start>@<place>``), named in the shared
            database as the writer of logs still being written.
        archive_url: An S3-compatible object store for the shared copies' bytes (the ``s3``
            extra; `codemode.state._objects` says the URL's shape); needs ``database_url``.

    Raises:
        StateDirError: The directory or a database cannot be used, or ``database_url`` is
            given without the ``postgres`` extra installed; ``archive_url`` cannot be parsed,
            reached, or used without ``database_url`` or the ``s3`` extra.
        ValueError: ``log_cap_bytes`` or ``quota_bytes`` is below its minimum.
    """

    def __init__(
        self,
        state_dir: Path,
        redactor: Redactor | None = None,
        *,
        log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        database_url: str | None = None,
        holder: str = "",
        archive_url: str | None = None,
    ) -> None:
        if archive_url is not None and database_url is None:
            raise StateDirError(
                "an archive store holds the shared copies of archived text, and needs the shared "
                "database that indexes them: give a database URL too (--database-url-file)"
            )
        self.db = Database(state_dir)
        self.shared: SqlDatabase = self.db
        objects: ObjectStore | None = None
        try:
            copies = None
            if database_url is not None:
                self.shared = _open_shared(database_url)
                objects = None if archive_url is None else _open_objects(archive_url)
                copies = SharedArchive(self.shared, holder, objects)
            self.archive = Archive(
                self.db, redactor, log_cap_bytes=log_cap_bytes, quota_bytes=quota_bytes, shared=copies
            )
        except BaseException:
            if objects is not None:
                objects.close()
            if self.shared is not self.db:
                self.shared.close()
            self.db.close()
            raise
        self.copies = copies
        """The shared database's copies of archived text (None without a shared database)."""
        self.values = ValueStore(self.shared)
        self.runs = RunRecords(self.shared)
        self.approvals = ApprovalLog(self.shared)
        self.operators = OperatorLog(self.shared)
        self.journal = RunJournal(self.shared)
        self.learned = LearnedTypes(self.shared)

    @property
    def state_dir(self) -> Path:
        """The state directory."""
        return self.db.state_dir

    @property
    def db_path(self) -> Path:
        """The SQLite database file."""
        return self.db.db_path

    @property
    def redactor(self) -> Redactor:
        """The one redactor."""
        return self.archive.redactor

    @property
    def is_shared(self) -> bool:
        """Whether sessions' stores live in a shared database (not the state directory's)."""
        return self.shared is not self.db

    def has_session(self, session_id: str) -> bool:
        """Whether anything of this session is kept: a run, a run record, a store value or an
        archived text (background processes are the process manager's records).

        Raises:
            HostFault: A database failed.
        """
        return self.runs.has_session(session_id) or self.archive.has_session(session_id)

    @host_faults
    def maintain(self, now: float | None = None) -> dict[str, int]:
        """Upkeep of every store: the archive's (`Archive.maintain`: compaction, expiry, the
        quota) and run records older than 30 days.

        Returns:
            Counts: ``compacted``, ``expired`` (entries), ``evicted``, ``expired_runs``; with a
            shared database, ``expired_copies`` (its copies of archived text) and
            ``expired_elsewhere`` (its index of ended processes and published notifications).

        Raises:
            HostFault: The database or the disk failed.
        """
        now = time.time() if now is None else now
        counts = self.archive.maintain(now)
        counts["expired_runs"] = self.runs.expire(now - EXPIRE_AFTER_SECONDS)
        if self.copies is not None:
            counts["expired_copies"] = self.copies.expire(now - EXPIRE_AFTER_SECONDS, now)
            with self.shared.connection() as conn:
                counts["expired_elsewhere"] = elsewhere.expire(conn, now - EXPIRE_AFTER_SECONDS)
        return counts

    def close(self) -> None:
        """Write the copies still queued for the shared database (at most 10 s), then close
        the databases' pooled connections. Idempotent."""
        if self.copies is not None:
            self.copies.close()
        if self.shared is not self.db:
            self.shared.close()
        self.db.close()

    def __enter__(self) -> State:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _open_shared(url: str) -> SqlDatabase:
    """The shared PostgreSQL database at ``url`` (psycopg is loaded only then)."""
    try:
        from codemode.state._postgres import PostgresDatabase
    except ImportError as exc:
        raise StateDirError(
            f"a shared state database was asked for, but its driver is not installed ({exc.name}): "
            "install codemode with the postgres extra (pip install 'codemode[postgres]')"
        ) from exc
    return PostgresDatabase(url)


def _open_objects(url: str) -> ObjectStore:
    """The object store at ``url`` (boto3 is loaded only then)."""
    try:
        parsed = parse_object_store_url(url)
    except ValueError as exc:
        raise StateDirError(str(exc)) from None
    return S3Store(parsed)
