"""Durable state: archived text and logs, records, store values, redaction.

One state directory (mode 0700) holds a SQLite database and the archived files.
"""

from codemode.archive._archive import Archive, ArchivePage, ArchiveRef, LogWriter
from codemode.archive._redact import Redactor

__all__ = ["Archive", "ArchivePage", "ArchiveRef", "LogWriter", "Redactor"]
