"""Durable state: archived text and logs, records, store values, redaction.

One state directory (mode 0700) holds a SQLite database and the archived files; each log is
capped while it is written and the directory has a quota.
"""

from codemode.archive._archive import (
    COMPACT_KEEP_BYTES,
    EXPIRE_AFTER_SECONDS,
    STORE_KEY_MAX_CHARS,
    STORE_SESSION_MAX_BYTES,
    STORE_VALUE_MAX_BYTES,
    Archive,
    ArchivePage,
    ArchiveRef,
    LogWriter,
)
from codemode.archive._capped import (
    DEFAULT_LOG_CAP_BYTES,
    DEFAULT_QUOTA_BYTES,
    MIN_LOG_CAP_BYTES,
    MIN_QUOTA_BYTES,
)
from codemode.archive._redact import Redactor, StreamRedactor

__all__ = [
    "COMPACT_KEEP_BYTES",
    "DEFAULT_LOG_CAP_BYTES",
    "DEFAULT_QUOTA_BYTES",
    "EXPIRE_AFTER_SECONDS",
    "MIN_LOG_CAP_BYTES",
    "MIN_QUOTA_BYTES",
    "STORE_KEY_MAX_CHARS",
    "STORE_SESSION_MAX_BYTES",
    "STORE_VALUE_MAX_BYTES",
    "Archive",
    "ArchivePage",
    "ArchiveRef",
    "LogWriter",
    "Redactor",
    "StreamRedactor",
]
