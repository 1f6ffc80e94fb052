"""Durable state: archived text and logs, records, store values, redaction.

One state directory (mode 0700) holds a SQLite database and the archived files.
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
from codemode.archive._redact import Redactor, StreamRedactor

__all__ = [
    "COMPACT_KEEP_BYTES",
    "EXPIRE_AFTER_SECONDS",
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
