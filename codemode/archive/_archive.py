"""INTERFACE STUB — being implemented by the archive helper. Signatures are the contract."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ArchiveRef:
    """A stored text: its opaque reference, size in bytes and sha256 (hex)."""

    ref: str
    total_bytes: int
    sha256: str


@dataclass(frozen=True)
class ArchivePage:
    """A byte range of archived text."""

    ref: str
    offset: int
    data: bytes
    next_offset: int
    total_bytes: int
    eof: bool
    retained_from: int = 0  # earliest byte still retained (after compaction)


class LogWriter:
    """Streams bytes into a new archive entry (a command log). Not thread-safe."""

    ref: str
    path: Path

    def write(self, data: bytes) -> None: ...
    def close(self) -> ArchiveRef: ...


class Archive:
    def __init__(self, state_dir: Path) -> None: ...
    @property
    def state_dir(self) -> Path: ...
    def close(self) -> None: ...
    def put(self, data: str | bytes, *, kind: str, session_id: str | None = None) -> ArchiveRef: ...
    def open_log(self, *, kind: str, session_id: str | None = None) -> LogWriter: ...
    def read(self, ref: str, offset: int = 0, limit: int = 65536) -> ArchivePage: ...
    # store
    def store_get(self, session_id: str, key: str) -> Any: ...
    def store_set(self, session_id: str, key: str, value_json: str) -> None: ...
    def store_delete(self, session_id: str, key: str) -> bool: ...
    def store_keys(self, session_id: str) -> list[str]: ...
    # run records
    def get_run(self, call_id: str) -> str | None: ...
    def record_run(self, call_id: str, session_id: str, result_json: str) -> None: ...
    def maintain(self) -> None: ...
