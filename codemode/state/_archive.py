"""The archive: archived text and command logs, in the state directory's ``blobs/``.

An entry's offsets are byte offsets into the whole original text, and ``total_bytes`` is its
whole size. A log keeps at most its cap on disk while it is written: its head and its tail sit
at their own offsets in its file and the middle is a hole (see ``_capped``); a read that
lands in a dropped range says so and goes on from the next kept byte. A compacted log keeps
its last ``COMPACT_KEEP_BYTES`` bytes in a new file, and ``retained_from`` says where they
start (file offset 0 is byte ``retained_from``).

The directory has a quota: past it, finished entries are evicted (the oldest finished logs
first); writers check it every 1/64 of the quota in a thread of their own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from codemode.errors import ErrorCode, StateDirError, ToolError, UnknownRefError
from codemode.state import _capped
from codemode.state._capped import DEFAULT_LOG_CAP_BYTES, DEFAULT_QUOTA_BYTES, CappedLog
from codemode.state._database import Database, host_faults
from codemode.state._raw_pages import RawLogPages
from codemode.state._redact import Redactor
from codemode.state._shared_archive import SharedArchive, SharedCopy, copy_of_bytes, copy_of_file, materialize
from codemode.state._stream import StreamRedactor

__all__ = [
    "COMPACT_KEEP_BYTES",
    "EXPIRE_AFTER_SECONDS",
    "Archive",
    "ArchivePage",
    "ArchiveRef",
    "LogWriter",
]

COMPACT_KEEP_BYTES = 8 * 1024 * 1024
"""A finished log keeps this many bytes (its tail) after compaction."""
EXPIRE_AFTER_SECONDS = 30 * 24 * 3600
"""Entries and run records older than this are removed by `Archive.maintain` (unless pinned)."""
READ_MAX_LIMIT = 16 * 1024 * 1024

_REF_RE = re.compile(r"ar_[A-Za-z0-9_\-]{20}")
_SCHEMA_VERSION = 5


@dataclass(frozen=True)
class ArchiveRef:
    """A stored text: its opaque reference, size in bytes and sha256 (hex) of the stored bytes.

    Attributes:
        ref: The reference.
        total_bytes: Size of the whole text (for a log: every byte the command wrote).
        sha256: Of the bytes stored: for a log that outgrew its cap, its head then its tail.
        dropped: ``(start, end)`` of the bytes a log did not keep because it outgrew its cap
            (its middle; its end where the file system cannot punch holes), else ``None``.
    """

    ref: str
    total_bytes: int
    sha256: str
    dropped: tuple[int, int] | None = None

    @property
    def kept_bytes(self) -> int:
        """Bytes stored: ``total_bytes`` less the dropped range."""
        return (
            self.total_bytes
            if self.dropped is None
            else self.total_bytes - (self.dropped[1] - self.dropped[0])
        )


@dataclass(frozen=True)
class ArchivePage:
    """A byte range of archived text.

    Attributes:
        ref: The entry.
        offset: Where ``data`` starts (at least ``retained_from``).
        data: The bytes. For an entry stored raw (``open_log(redact=False)``) this is the
            redacted view of the stored bytes, so its length can differ from
            ``next_offset - offset``.
        next_offset: Offset to pass to read on.
        total_bytes: Size of the whole entry (for a log still being written: its size now).
        eof: ``next_offset`` has reached ``total_bytes``.
        retained_from: Earliest byte still retained (after compaction; 0 otherwise).
        dropped: ``(start, end)`` when the requested offset fell in bytes the entry no longer
            keeps (compacted away, or dropped from a log that outgrew its cap): the read
            skipped them and ``offset`` is ``end``. ``None`` when it read from the offset asked.
    """

    ref: str
    offset: int
    data: bytes
    next_offset: int
    total_bytes: int
    eof: bool
    retained_from: int = 0
    dropped: tuple[int, int] | None = None


def _new_ref() -> str:
    return "ar_" + secrets.token_urlsafe(15)


def _write_fully(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class LogWriter:
    """Streams bytes into a new archive entry (a command log) within its cap. Not thread-safe.

    Bytes reach the file at each `write` (no buffering in Python), so a reader sees them at
    once; with redaction on, a trailing partial line is held back until its line end (at most
    64 KiB) so that a secret split across writes is still redacted. Past the archive's log
    cap the file keeps the head and the tail (`CappedLog`); every byte is still counted, and
    reaching the cap never blocks the writer.

    Attributes:
        ref: The entry's reference, valid (readable) from the start.
        path: The file the bytes go to.
    """

    def __init__(
        self, archive: Archive, ref: str, path: Path, stream: StreamRedactor | None, cap: int | None
    ) -> None:
        self.ref = ref
        self.path = path
        self._archive = archive
        self._stream = stream
        self._log = CappedLog(str(path), cap, create=True, on_growth=archive._quota.added)
        self._open = True
        # Kept while every byte is on disk; a log that drops bytes hashes what it kept at close.
        self._hash: hashlib._Hash | None = hashlib.sha256()
        self._result: ArchiveRef | None = None

    @property
    def bytes_written(self) -> int:
        """Bytes written so far, kept or not: the offset the next byte will have."""
        return self._log.seen

    def write(self, data: bytes) -> None:
        """Append ``data`` (redacted first when the log redacts).

        Raises:
            ValueError: The writer is closed.
        """
        if not self._open:
            raise ValueError(f"log {self.ref} is closed")
        if self._stream is not None:
            data = self._stream.feed(data)
        if data:
            self._write_all(data)

    def flush(self) -> None:
        """Release bytes held back for redaction (a partial last line) to the file."""
        if self._open and self._stream is not None:
            data = self._stream.flush()
            if data:
                self._write_all(data)

    def _write_all(self, data: bytes) -> None:
        self._log.write(data)
        if self._hash is not None:
            if self._log.kept_bytes == self._log.seen:
                self._hash.update(data)
            else:
                self._hash = None

    def detach(self) -> None:
        """Release the file without finishing the entry, for a log another process appends to.

        The entry stays readable (and unfinished) while the other process writes to `path`;
        call `Archive.finish_log` with `ref` when it is done. Bytes held back for redaction
        are written first.
        """
        if not self._open:
            return
        self.flush()
        self._log.close()
        self._open = False

    def close(self) -> ArchiveRef:
        """Finish the entry (idempotent) and return its reference, size, sha256 and what was kept.

        Raises:
            ValueError: The writer was detached (finish it with `Archive.finish_log`).
        """
        if self._result is None and not self._open:
            raise ValueError(f"log {self.ref} was detached; finish it with Archive.finish_log")
        if self._result is not None:
            return self._result
        self.flush()
        self._log.close()
        self._open = False
        if self._hash is not None:
            self._result = ArchiveRef(self.ref, self._log.seen, self._hash.hexdigest())
            self._archive._finish_log(self._result, self.path.name)
        else:
            self._result = self._archive._finish_file(self.ref, self.path.name, 0, self._log.seen)
        return self._result

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Archive:
    """Archived text and logs of one state directory.

    Args:
        db: The state directory's database.
        redactor: Redacts text before it is persisted and raw logs when read. Defaults to a
            `Redactor` over ``os.environ``.
        log_cap_bytes: Most bytes one log keeps on disk while it is written (its head and
            tail; every byte is still counted). At least 1 MiB.
        quota_bytes: Most bytes the state directory holds before finished entries are
            evicted, oldest finished logs first. At least 4 MiB. Stored in the database too,
            for the supervisors of background processes: the last archive opened on a state
            directory sets theirs.
        shared: The shared database's copies (`SharedArchive`): every finished entry is
            copied there, and a reference this state directory does not hold is fetched from
            there. None: this state directory's entries are all there is.

    Every method below raises `HostFault` when the database or the disk fails (locked for
    longer than the busy timeout, disk full, I/O error): that is never the model's fault.

    Raises:
        StateDirError: ``blobs/`` cannot be created, or the quota cannot be recorded.
        ValueError: ``log_cap_bytes`` or ``quota_bytes`` is below its minimum.
    """

    def __init__(
        self,
        db: Database,
        redactor: Redactor | None = None,
        *,
        log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        shared: SharedArchive | None = None,
    ) -> None:
        if log_cap_bytes < _capped.MIN_LOG_CAP_BYTES:
            raise ValueError(
                f"log_cap_bytes must be at least {_capped.MIN_LOG_CAP_BYTES} (got {log_cap_bytes})"
            )
        if quota_bytes < _capped.MIN_QUOTA_BYTES:
            raise ValueError(f"quota_bytes must be at least {_capped.MIN_QUOTA_BYTES} (got {quota_bytes})")
        self._db = db
        self._shared = shared
        self._log_cap = log_cap_bytes
        self._quota_bytes = quota_bytes
        self._state_dir = db.state_dir
        self._db_path = db.db_path
        self._blob_dir = self._state_dir / "blobs"
        try:
            self._blob_dir.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StateDirError(f"cannot create {self._blob_dir}: {exc.strerror or exc}") from exc
        self._redactor = redactor if redactor is not None else Redactor()
        self._raw_logs = RawLogPages(self._redactor)
        try:
            db.execute(
                "INSERT OR REPLACE INTO archive_settings (key, value) VALUES ('quota_bytes', ?)",
                (quota_bytes,),
            )
        except sqlite3.Error as exc:
            raise StateDirError(f"cannot record the quota in {self._db_path}: {exc}") from exc
        self._quota = _capped.QuotaWatch(str(self._db_path), quota_bytes, before=self._compact_pending)

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def db(self) -> Database:
        """The state directory's database (its ``state_dir`` and ``db_path``)."""
        return self._db

    @property
    def state_dir(self) -> Path:
        """The state directory (the database's)."""
        return self._db.state_dir

    @property
    def db_path(self) -> Path:
        """The SQLite database file (the database's)."""
        return self._db.db_path

    @property
    def redactor(self) -> Redactor:
        """The redactor applied before text is persisted and to raw logs when read."""
        return self._redactor

    # -- entries ----------------------------------------------------------------------------

    @host_faults
    def put(self, data: str | bytes, *, kind: str, session_id: str | None = None) -> ArchiveRef:
        """Store a text (redacted first) or bytes (as given) as a new entry.

        Args:
            data: Text or bytes.
            kind: What it is (``"output"``, ``"log"``, ...), kept in the index. A ``"log"``
                entry is compacted by `maintain` like a finished streamed log.
            session_id: The owning session, if any.

        Returns:
            The new entry's reference, its size in bytes and the sha256 of the stored bytes.
        """
        blob = (
            self._redactor.redact(data).encode("utf-8", "replace") if isinstance(data, str) else bytes(data)
        )
        ref = _new_ref()
        path = self._blob_dir / ref
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_fully(fd, blob)
            disk = os.fstat(fd).st_blocks * 512
        finally:
            os.close(fd)
        digest = hashlib.sha256(blob).hexdigest()
        now = time.time()
        self._db.execute(
            "INSERT INTO archive_entries"
            " (ref, kind, session_id, created, finished, total_bytes, sha256, file, needs_compact, disk_bytes)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                ref,
                kind,
                session_id,
                now,
                now,
                len(blob),
                digest,
                ref,
                int(kind == "log" and len(blob) > COMPACT_KEEP_BYTES),
                disk,
            ),
        )
        self._quota.added(disk)
        if self._shared is not None:
            self._shared.keep(
                ref,
                kind=kind,
                session_id=session_id,
                created=now,
                total_bytes=len(blob),
                raw=False,
                parts=copy_of_bytes(blob, self._shared.entry_bytes),
            )
        return ArchiveRef(ref, len(blob), digest)

    @host_faults
    def open_log(self, *, kind: str, session_id: str | None = None, redact: bool = True) -> LogWriter:
        """Start a streamed entry (a command log); it is readable while being written.

        Args:
            kind: What it is (use ``"log"`` for command logs).
            session_id: The owning session, if any.
            redact: Redact before bytes reach the disk. With ``False`` raw bytes are stored
                and `read` redacts what it returns.

        The log keeps at most the archive's ``log_cap_bytes`` on disk (recorded with the
        entry, so a writer in another process, `_capped.EntryLog`, applies the same cap).
        """
        ref = _new_ref()
        path = self._blob_dir / ref
        self._db.execute(
            "INSERT INTO archive_entries (ref, kind, session_id, created, raw, stream, file, cap_bytes)"
            " VALUES (?, ?, ?, ?, ?, 1, ?, ?)",
            (ref, kind, session_id, time.time(), 0 if redact else 1, ref, self._log_cap),
        )
        if self._shared is not None:
            self._shared.announce(ref, kind=kind, session_id=session_id, raw=not redact)
        stream = StreamRedactor(self._redactor) if redact else None
        return LogWriter(self, ref, path, stream, self._log_cap)

    @host_faults
    def finish_log(self, ref: str) -> ArchiveRef:
        """Finish a streamed entry whose file another process wrote (see `LogWriter.detach`).

        Size, sha256 and what was kept are taken from the file as it is now (and the count
        the writer stored, for bytes it could not keep past the file's end). Finishing an
        entry that is already finished returns what was recorded.

        Raises:
            UnknownRefError: No such entry, or its file is gone.
        """
        file, retained_from, total, _raw, _stream = self._lookup(ref)
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT sha256, total_bytes FROM archive_entries WHERE ref = ?", (ref,)
            ).fetchone()
        if total is not None:
            return ArchiveRef(ref, total, str(row[0]) if row else "")
        return self._finish_file(ref, file, retained_from, int(row[1]) if row else 0)

    def _finish_file(self, ref: str, file: str, retained_from: int, counted: int) -> ArchiveRef:
        """Finish an entry from its file: size, kept ranges and their sha256.

        Raises:
            UnknownRefError: The file is gone.
        """
        try:
            fd = os.open(self._blob_dir / file, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise UnknownRefError(f"the file of log {ref!r} is gone", {"ref": ref}) from exc
        try:
            total = max(retained_from + os.fstat(fd).st_size, counted)
            gap = _capped.dropped_range(_capped.kept_runs(fd), total - retained_from)
            digest = _capped.kept_sha256(fd)
        finally:
            os.close(fd)
        dropped = None if gap is None else (retained_from + gap[0], retained_from + gap[1])
        result = ArchiveRef(ref, total, digest, dropped)
        self._finish_log(result, file)
        return result

    def _finish_log(self, result: ArchiveRef, file: str) -> None:
        try:
            disk = os.stat(self._blob_dir / file).st_blocks * 512
        except FileNotFoundError:
            disk = 0
        self._db.execute(
            "UPDATE archive_entries SET finished = ?, total_bytes = ?, sha256 = ?, needs_compact = ?,"
            " disk_bytes = ? WHERE ref = ?",
            (
                time.time(),
                result.total_bytes,
                result.sha256,
                int(result.kept_bytes > COMPACT_KEEP_BYTES),
                disk,
                result.ref,
            ),
        )
        if self._shared is not None:
            self._share_log(result, file)

    def _share_log(self, result: ArchiveRef, file: str) -> None:
        """Copy a finished log to the shared database (its head and tail, secrets masked)."""
        assert self._shared is not None
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT kind, session_id, created, raw, retained_from FROM archive_entries WHERE ref = ?",
                (result.ref,),
            ).fetchone()
        if row is None:
            return
        kind, session_id, created, raw, retained_from = row
        try:
            fd = os.open(self._blob_dir / file, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            parts = copy_of_file(
                fd,
                retained_from=retained_from,
                raw=bool(raw),
                redactor=self._redactor,
                cap=self._shared.entry_bytes,
            )
        finally:
            os.close(fd)
        self._shared.keep(
            result.ref,
            kind=kind,
            session_id=session_id,
            created=created,
            total_bytes=result.total_bytes,
            raw=bool(raw),
            parts=parts,
        )

    def _lookup(self, ref: str, session_id: str | None = None) -> tuple[str, int, int | None, int, int]:
        """Return (file, retained_from, total_bytes if finished else None, raw, stream).

        With ``session_id``, an entry of another session (or of none) is unknown, in the
        very words used for a reference that never existed.
        """
        if not isinstance(ref, str) or not _REF_RE.fullmatch(ref):
            raise UnknownRefError(
                f"{ref!r} is not an archive reference; references look like ar_xxxxxxxxxxxxxxxxxxxx and come "
                "from truncation notices and bash log fields",
                {"ref": ref},
            )
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT file, retained_from, finished, total_bytes, raw, stream, session_id"
                " FROM archive_entries WHERE ref = ?",
                (ref,),
            ).fetchone()
        if row is None or (session_id is not None and row[6] != session_id):
            raise UnknownRefError(
                f"no archived text {ref!r} (it may have expired after 30 days); use a reference from a "
                "truncation notice or a bash log field",
                {"ref": ref},
            )
        file, retained_from, finished, total, raw, stream, _owner = row
        return file, retained_from, (total if finished is not None else None), raw, stream

    def _lookup_or_fetch(self, ref: str, session_id: str | None) -> tuple[str, int, int | None, int, int]:
        """`_lookup`; a reference this state directory does not hold is fetched from the shared
        database's copies first (a finished entry of the same session)."""
        try:
            return self._lookup(ref, session_id)
        except UnknownRefError:
            if self._shared is None or not _REF_RE.fullmatch(ref):
                raise
            copy = self._shared.fetch(ref, session_id)  # another session's: None, nothing read
            if copy is None:
                raise
            if copy.finished is None:
                raise UnknownRefError(
                    f"{ref} is the log of a command still running on another machine ({copy.holder}); "
                    "it can be read here once the command has ended, or now from a session on that machine",
                    {"ref": ref, "where": copy.holder},
                ) from None
            self._adopt(copy)
            return self._lookup(ref, session_id)

    def _adopt(self, copy: SharedCopy) -> None:
        """Make the shared ``copy`` an entry of this state directory (finished, evictable)."""
        file, retained_from, disk = materialize(copy, self._blob_dir)
        try:
            added = self._add_fetched(copy, file, retained_from, disk)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                (self._blob_dir / file).unlink()
            raise
        if added:
            self._quota.added(disk)
        else:  # another thread fetched it first
            with contextlib.suppress(FileNotFoundError):
                (self._blob_dir / file).unlink()

    def _add_fetched(self, copy: SharedCopy, file: str, retained_from: int, disk: int) -> int:
        return self._db.execute(
            "INSERT INTO archive_entries (ref, kind, session_id, created, finished, total_bytes, sha256,"
            " retained_from, raw, file, disk_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (ref) DO NOTHING",
            (
                copy.ref,
                copy.kind,
                copy.session_id,
                copy.created,
                copy.finished,
                copy.total_bytes,
                copy.sha256,
                retained_from,
                int(copy.raw),
                file,
                disk,
            ),
        )

    @host_faults
    def read(
        self, ref: str, offset: int = 0, limit: int = 65536, *, session_id: str | None = None
    ) -> ArchivePage:
        """Read up to ``limit`` bytes of an entry from byte ``offset``.

        Concatenating the pages of a whole read gives back the stored bytes exactly. An
        ``offset`` in bytes the entry no longer keeps (before the retained part of a compacted
        log, or in the middle a log dropped when it outgrew its cap) reads from the next kept
        byte, and the page's ``dropped`` names the skipped range.

        Args:
            ref: The entry.
            offset: Byte offset to start at.
            limit: Most bytes to return.
            session_id: The reading session: every read on behalf of a model passes it, and
                an entry another session owns (or no session owns) is then reported exactly
                like a reference that never existed. ``None`` reads any entry: for the operator
                (the CLI) and for callers that checked the owner themselves.

        Raises:
            UnknownRefError: No such entry (for ``session_id``: none of its own).
            ToolError: ``offset`` or ``limit`` is not a valid number, or ``offset`` is past the end.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ToolError(
                f"offset must be an integer >= 0 (got {offset!r})",
                {"field": "offset"},
                code=ErrorCode.TOOL_FAILED,
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= READ_MAX_LIMIT:
            raise ToolError(
                f"limit must be an integer from 1 to {READ_MAX_LIMIT} (got {limit!r})",
                {"field": "limit"},
                code=ErrorCode.TOOL_FAILED,
            )
        for _attempt in range(3):
            file, retained_from, total, raw, _stream = self._lookup_or_fetch(ref, session_id)
            try:
                fd = os.open(self._blob_dir / file, os.O_RDONLY)
            except FileNotFoundError:
                continue  # compacted or expired between the lookup and the open: look again
            try:
                return self._read_fd(fd, ref, offset, limit, retained_from, total, bool(raw))
            finally:
                os.close(fd)
        raise UnknownRefError(
            f"archived text {ref!r} is no longer on disk (expired); its reference cannot be read",
            {"ref": ref},
        )

    def _read_fd(
        self, fd: int, ref: str, offset: int, limit: int, retained_from: int, total: int | None, raw: bool
    ) -> ArchivePage:
        if total is None:  # still being written: what is on disk now (a capped log's size counts all)
            total = retained_from + os.fstat(fd).st_size
        if offset > total:
            raise ToolError(
                f"offset {offset} is past the end of {ref} ({total} bytes); "
                f"read from an offset up to {total}",
                {"field": "offset", "total_bytes": total},
                code=ErrorCode.TOOL_FAILED,
            )
        asked = max(offset, retained_from)
        want = min(limit, total - asked)
        if want > 0:
            found, data, run_end = _capped.read_kept(fd, asked - retained_from, want)
            # Nothing kept from here on (a log's end it could not keep): all of it was dropped.
            start = retained_from + found if data else total
            run_end += retained_from
        else:
            start, data, run_end = asked, b"", asked
        next_offset = start + len(data)
        if raw and data:
            data, next_offset = self._raw_logs.page(fd, ref, data, start, retained_from, run_end)
        return ArchivePage(
            ref=ref,
            offset=start,
            data=data,
            next_offset=next_offset,
            total_bytes=total,
            eof=next_offset >= total,
            retained_from=retained_from,
            dropped=(offset, start) if start > offset else None,
        )

    @host_faults
    def pin(self, ref: str, pinned: bool) -> None:
        """Protect an entry from compaction and expiry (or lift the protection).

        Raises:
            UnknownRefError: No such entry.
        """
        if self._db.execute("UPDATE archive_entries SET pinned = ? WHERE ref = ?", (int(pinned), ref)) == 0:
            raise UnknownRefError(f"no archived text {ref!r} to pin", {"ref": ref})

    def flush_copies(self, timeout: float = 30.0) -> bool:
        """Wait until the copies queued for the shared database are written (a front letting a
        session go does, so that the next front finds them); True at once without one."""
        return self._shared is None or self._shared.flush(timeout)

    @host_faults
    def has_session(self, session_id: str) -> bool:
        """Whether an entry of this session is kept (here, or copied to the shared database)."""
        with self._db.connection() as conn:
            row = conn.execute("SELECT 1 FROM archive_entries WHERE session_id = ? LIMIT 1", (session_id,))
            if row.fetchone() is not None:
                return True
        return self._shared is not None and self._shared.has_session(session_id)

    @host_faults
    def entry_info(self, ref: str) -> dict[str, object]:
        """Index data of one entry: kind, session, sizes, times, flags (for the CLI and doctor).

        Raises:
            UnknownRefError: No such entry.
        """
        self._lookup(ref)
        with self._db.connection() as conn:
            cursor = conn.execute("SELECT * FROM archive_entries WHERE ref = ?", (ref,))
            names = [d[0] for d in cursor.description]
            row = cursor.fetchone()
        if row is None:
            raise UnknownRefError(f"no archived text {ref!r}", {"ref": ref})
        return dict(zip(names, row, strict=True))

    # -- maintenance ------------------------------------------------------------------------

    @host_faults
    def maintain(self, now: float | None = None) -> dict[str, int]:
        """Compact finished logs to their last 8 MiB, expire what is older than 30 days, and
        evict finished entries while the state directory is over its quota.

        Pinned entries are left alone by compaction and expiry (the quota evicts them last).
        Cheap when there is nothing to do (a few indexed queries). Safe to run from several
        processes at once.

        Args:
            now: The current time (seconds since the epoch); defaults to ``time.time()``.

        Returns:
            Counts: ``compacted``, ``expired`` (entries), ``evicted``.
        """
        now = time.time() if now is None else now
        cutoff = now - EXPIRE_AFTER_SECONDS
        counts = {"compacted": 0, "expired": 0}
        with self._db.connection() as conn:
            old = conn.execute(
                "SELECT ref, file, finished FROM archive_entries WHERE created < ? AND pinned = 0", (cutoff,)
            ).fetchall()
            for ref, file, finished in old:
                path = self._blob_dir / file
                if finished is None:
                    # An unfinished log may still be growing: expire it only when idle as long.
                    with contextlib.suppress(FileNotFoundError):
                        if path.stat().st_mtime >= cutoff:
                            continue
                if conn.execute("DELETE FROM archive_entries WHERE ref = ? AND pinned = 0", (ref,)).rowcount:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                    counts["expired"] += 1
        counts["compacted"] = self._compact_pending()
        counts["evicted"] = _capped.enforce_quota(str(self._db_path), self._quota_bytes)
        return counts

    def _compact_pending(self) -> int:
        """Compact every finished log waiting for it; return how many were."""
        compacted = 0
        with self._db.connection() as conn:
            todo = conn.execute(
                "SELECT ref FROM archive_entries WHERE needs_compact = 1 AND pinned = 0"
            ).fetchall()
            for (ref,) in todo:
                compacted += self._compact(conn, ref)
        return compacted

    def _compact(self, conn: sqlite3.Connection, ref: str) -> bool:
        """Keep the last 8 MiB of the log's last kept run (its tail) in a new file."""
        claimed = conn.execute(
            "UPDATE archive_entries SET needs_compact = 0 WHERE ref = ? AND needs_compact = 1 AND pinned = 0",
            (ref,),
        ).rowcount
        if not claimed:
            return False  # another process took it
        row = conn.execute("SELECT file, retained_from FROM archive_entries WHERE ref = ?", (ref,)).fetchone()
        if row is None:
            return False
        file, retained_from = row
        old_path = self._blob_dir / file
        new_file = f"{ref}.{secrets.token_hex(4)}"
        new_path = self._blob_dir / new_file
        try:
            with open(old_path, "rb") as src:
                runs = _capped.kept_runs(src.fileno())
                if not runs:
                    return False
                size = runs[-1][1]
                skip = max(size - COMPACT_KEEP_BYTES, runs[-1][0])
                if skip == 0:
                    return False
                src.seek(skip)
                fd = os.open(new_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with open(fd, "wb") as dst:
                    while chunk := src.read(1024 * 1024):
                        dst.write(chunk)
                    dst.flush()
                    disk = os.fstat(dst.fileno()).st_blocks * 512
        except OSError:
            with contextlib.suppress(OSError):
                new_path.unlink()
            conn.execute("UPDATE archive_entries SET needs_compact = 1 WHERE ref = ?", (ref,))
            return False
        conn.execute(
            "UPDATE archive_entries SET file = ?, retained_from = ?, disk_bytes = ? WHERE ref = ?",
            (new_file, retained_from + skip, disk, ref),
        )
        with contextlib.suppress(FileNotFoundError):
            old_path.unlink()
        return True
