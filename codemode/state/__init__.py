"""Durable state: one state directory, one SQLite schema with versioned migrations, and the
stores on it (archived text and logs, store values, run records, process records), redaction;
optionally a PostgreSQL database several hosts share for what sessions share (`State`).

One state directory (mode 0700) holds the database and the archived files; each log is capped
while it is written and the directory has a quota. `State` opens all of it.
"""

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

if TYPE_CHECKING:
    from codemode.state import _elsewhere as elsewhere_records
    from codemode.state import _holds as session_holds
    from codemode.state import _processes as process_records
    from codemode.state._archive import (
        COMPACT_KEEP_BYTES,
        EXPIRE_AFTER_SECONDS,
        Archive,
        ArchivePage,
        ArchiveRef,
        LogWriter,
    )
    from codemode.state._audit import ApprovalLog, OperatorAction, OperatorLog
    from codemode.state._capped import (
        DEFAULT_LOG_CAP_BYTES,
        DEFAULT_QUOTA_BYTES,
        MIN_LOG_CAP_BYTES,
        MIN_QUOTA_BYTES,
    )
    from codemode.state._database import Database, SqlConnection, SqlDatabase, host_faults
    from codemode.state._holds import EndReason, HeldSession, SessionEnd
    from codemode.state._journal import JournalChange, JournalEntry, RunJournal
    from codemode.state._learned import LearnedTypes
    from codemode.state._processes import ProcessRecord
    from codemode.state._redact import Redactor, compile_rules_soon, redact_json
    from codemode.state._runs import RunRecord, RunRecords
    from codemode.state._schema import SCHEMA_VERSION
    from codemode.state._state import State
    from codemode.state._stream import StreamRedactor
    from codemode.state._values import (
        STORE_KEY_MAX_CHARS,
        STORE_SESSION_MAX_BYTES,
        STORE_VALUE_MAX_BYTES,
        SessionValues,
        ValueStore,
    )

if not TYPE_CHECKING:  # each name loads its module at first use (codemode._lazy)
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._archive": (
                "COMPACT_KEEP_BYTES",
                "EXPIRE_AFTER_SECONDS",
                "Archive",
                "ArchivePage",
                "ArchiveRef",
                "LogWriter",
            ),
            "._audit": (
                "ApprovalLog",
                "OperatorAction",
                "OperatorLog",
            ),
            "._capped": (
                "DEFAULT_LOG_CAP_BYTES",
                "DEFAULT_QUOTA_BYTES",
                "MIN_LOG_CAP_BYTES",
                "MIN_QUOTA_BYTES",
            ),
            "._database": (
                "Database",
                "SqlConnection",
                "SqlDatabase",
                "host_faults",
            ),
            "._holds": (
                "EndReason",
                "HeldSession",
                "SessionEnd",
            ),
            "._journal": (
                "JournalChange",
                "JournalEntry",
                "RunJournal",
            ),
            "._learned": ("LearnedTypes",),
            "._processes": ("ProcessRecord",),
            "._redact": (
                "Redactor",
                "compile_rules_soon",
                "redact_json",
            ),
            "._runs": (
                "RunRecord",
                "RunRecords",
            ),
            "._schema": ("SCHEMA_VERSION",),
            "._state": ("State",),
            "._stream": ("StreamRedactor",),
            "._values": (
                "STORE_KEY_MAX_CHARS",
                "STORE_SESSION_MAX_BYTES",
                "STORE_VALUE_MAX_BYTES",
                "SessionValues",
                "ValueStore",
            ),
        },
        {
            "elsewhere_records": "._elsewhere",
            "session_holds": "._holds",
            "process_records": "._processes",
        },
    )

__all__ = [
    "COMPACT_KEEP_BYTES",
    "DEFAULT_LOG_CAP_BYTES",
    "DEFAULT_QUOTA_BYTES",
    "EXPIRE_AFTER_SECONDS",
    "MIN_LOG_CAP_BYTES",
    "MIN_QUOTA_BYTES",
    "SCHEMA_VERSION",
    "STORE_KEY_MAX_CHARS",
    "STORE_SESSION_MAX_BYTES",
    "STORE_VALUE_MAX_BYTES",
    "ApprovalLog",
    "Archive",
    "ArchivePage",
    "ArchiveRef",
    "Database",
    "EndReason",
    "HeldSession",
    "JournalChange",
    "JournalEntry",
    "LearnedTypes",
    "LogWriter",
    "OperatorAction",
    "OperatorLog",
    "ProcessRecord",
    "Redactor",
    "RunJournal",
    "RunRecord",
    "RunRecords",
    "SessionEnd",
    "SessionValues",
    "SqlConnection",
    "SqlDatabase",
    "State",
    "StreamRedactor",
    "ValueStore",
    "compile_rules_soon",
    "elsewhere_records",
    "host_faults",
    "process_records",
    "redact_json",
    "session_holds",
]
