"""`State`: the stores of one state directory, on its one database."""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType

from codemode.state._archive import EXPIRE_AFTER_SECONDS, Archive
from codemode.state._audit import ApprovalLog, OperatorLog
from codemode.state._capped import DEFAULT_LOG_CAP_BYTES, DEFAULT_QUOTA_BYTES
from codemode.state._database import Database
from codemode.state._journal import RunJournal
from codemode.state._learned import LearnedTypes
from codemode.state._redact import Redactor
from codemode.state._runs import RunRecords
from codemode.state._values import ValueStore

__all__ = ["State"]


class State:
    """One state directory: its database (one schema, migrated at open) and the stores on it.

    Attributes:
        db: The database (the bash tool's process records open their own connections on it).
        archive: Archived text and logs.
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

    Raises:
        StateDirError: The directory or its database cannot be used.
        ValueError: ``log_cap_bytes`` or ``quota_bytes`` is below its minimum.
    """

    def __init__(
        self,
        state_dir: Path,
        redactor: Redactor | None = None,
        *,
        log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
    ) -> None:
        self.db = Database(state_dir)
        try:
            self.archive = Archive(self.db, redactor, log_cap_bytes=log_cap_bytes, quota_bytes=quota_bytes)
        except BaseException:
            self.db.close()
            raise
        self.values = ValueStore(self.db)
        self.runs = RunRecords(self.db)
        self.approvals = ApprovalLog(self.db)
        self.operators = OperatorLog(self.db)
        self.journal = RunJournal(self.db)
        self.learned = LearnedTypes(self.db)

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

    def maintain(self, now: float | None = None) -> dict[str, int]:
        """Upkeep of every store: the archive's (`Archive.maintain`: compaction, expiry, the
        quota) and run records older than 30 days.

        Returns:
            Counts: ``compacted``, ``expired`` (entries), ``evicted``, ``expired_runs``.

        Raises:
            HostFault: The database or the disk failed.
        """
        now = time.time() if now is None else now
        counts = self.archive.maintain(now)
        counts["expired_runs"] = self.runs.expire(now - EXPIRE_AFTER_SECONDS)
        return counts

    def close(self) -> None:
        """Close the database's pooled connections. Idempotent."""
        self.db.close()

    def __enter__(self) -> State:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
