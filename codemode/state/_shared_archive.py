"""Copies of archived entries in the shared database, so that any machine reads any session's.

With a shared PostgreSQL database (`codemode.state._postgres`), every archived text is copied
there when it is finished (an output at once; a command's log when its process ends: live
logs stay on the machine that runs the process), and a machine asked for a reference it does
not hold fetches the copy into its own archive and reads it there (`Archive.read`), with every
rule a local read has (owner check, dropped ranges, redaction of raw logs).

A copy is capped: at most `SHARED_ENTRY_BYTES` of an entry (all of it when it fits; else its
head and its tail, cut at `_capped`'s alignment so that the fetching machine can leave the
middle as a hole), at most `SESSION_SHARED_BYTES` per session and `SHARED_TOTAL_BYTES` in all
(the oldest finished copies go first). Offsets are the entry's own, so a page read on either machine starts and ends at the
same byte. A raw log (stored unredacted, redacted when read) leaves its machine with every
secret masked in place by a marker of the secret's own length, found as a local read finds it:
with the lines around each edge of the copy as context, and the values found by their context
in the 8 MiB before its tail.

A log still being written is announced (its row, without bytes, names the process that
writes it), so another machine says where it is instead of "no such reference".

With an object store beside the database (`codemode.state._objects`), a copy's bytes are one
object there (its head then its tail) and its row names the object, under caps of their own
(`OBJECT_ENTRY_BYTES`, `OBJECT_SESSION_BYTES`, `OBJECT_TOTAL_BYTES`). The object is written
before its row and removed after it, so a row never names an object not yet written; an object
whose row is gone (a failure between the two) goes with the expiry of its age. What is read
back must have the size and digest its row gives, or the read fails.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from codemode.errors import HostFault
from codemode.state import _capped
from codemode.state._database import SqlDatabase, host_faults
from codemode.state._objects import ObjectStore
from codemode.state._redact import Redactor, context_start
from codemode.state._stream import StreamRedactor

__all__ = [
    "OBJECT_ENTRY_BYTES",
    "OBJECT_SESSION_BYTES",
    "OBJECT_TOTAL_BYTES",
    "SESSION_SHARED_BYTES",
    "SHARED_ENTRY_BYTES",
    "SharedArchive",
    "SharedCopy",
    "copy_of_bytes",
    "copy_of_file",
    "materialize",
]

SHARED_ENTRY_BYTES = 4 * 1024 * 1024
"""Most bytes of one entry its shared copy keeps (its head and its tail past that)."""
SESSION_SHARED_BYTES = 64 * 1024 * 1024
"""Most bytes of one session's copies the shared database keeps (oldest finished go first)."""
SHARED_TOTAL_BYTES = 4 * 1024 * 1024 * 1024
"""Most bytes of all copies the shared database keeps (oldest finished go first)."""
OBJECT_ENTRY_BYTES = 64 * 1024 * 1024
"""`SHARED_ENTRY_BYTES` when an object store holds the copies' bytes."""
OBJECT_SESSION_BYTES = 1024 * 1024 * 1024
"""`SESSION_SHARED_BYTES` when an object store holds the copies' bytes."""
OBJECT_TOTAL_BYTES = 256 * 1024 * 1024 * 1024
"""`SHARED_TOTAL_BYTES` when an object store holds the copies' bytes."""
QUEUE_BYTES = 64 * 1024 * 1024
"""Most bytes of copies waiting to be written; past it a copy is not made (and logged)."""

_ALIGN = _capped.ALIGN
_CONTEXT_BYTES = 64 * 1024  # of the line around an edge, read as a local page read reads it
_KNOWN_SCAN_BYTES = 8 * 1024 * 1024  # before the tail, scanned for values found by their context
_log = logging.getLogger("codemode.state")


@dataclass(frozen=True)
class SharedCopy:
    """An entry's copy: ``head`` at entry offset ``head_start``, ``tail`` at ``tail_start``
    (empty when the head holds all that is kept), of ``total_bytes`` in all. ``finished`` is
    None while the log is still being written on the machine of ``holder`` (then it has no
    bytes). ``sha256`` is of ``head + tail``."""

    ref: str
    session_id: str | None
    kind: str
    holder: str
    created: float
    finished: float | None
    total_bytes: int
    sha256: str
    raw: bool
    head_start: int
    head: bytes
    tail_start: int
    tail: bytes

    @property
    def dropped(self) -> tuple[int, int] | None:
        """The range of the entry the copy does not keep between its head and its end."""
        head_end = self.head_start + len(self.head)
        end = self.tail_start if self.tail else self.total_bytes
        return (head_end, end) if end > head_end else None


def _fitted(marker: bytes, size: int) -> bytes:
    """``marker`` made ``size`` bytes long: ``[REDACTED:kind]`` then ``*``, or ``*`` alone."""
    return marker + b"*" * (size - len(marker)) if size >= len(marker) else b"*" * size


def _masked(
    fd: int, start: int, end: int, run: tuple[int, int], redactor: Redactor, known: dict[bytes, bytes]
) -> bytes:
    """The file's bytes ``[start, end)`` (within the kept ``run``) with each secret masked in
    place, found as a local read of that range finds it (`RawLogPages.page`): with the start of
    the line it begins in (or of a private key block open there) and the rest of the line it
    ends in as context, and the values in ``known``; a secret crossing an edge is masked in
    the part inside."""
    data = _read(fd, start, end)
    before_from = max(run[0], start - _CONTEXT_BYTES)
    before = _read(fd, before_from, start)
    before = before[context_start(before) :]
    after = b""
    if end < run[1] and data[-1:] not in (b"\n", b"\r"):
        after = _read(fd, end, min(run[1], end + _CONTEXT_BYTES))
        line_end = max(after.find(b"\n"), after.find(b"\r"))
        after = after[: line_end + 1] if line_end >= 0 else after
    spans = redactor.secret_spans(before + data + after, known)
    if not spans:
        return data
    out = bytearray(data)
    for span_start, span_end, marker in spans:
        inside = (max(span_start - len(before), 0), min(span_end - len(before), len(data)))
        if inside[0] < inside[1]:
            out[inside[0] : inside[1]] = _fitted(marker, inside[1] - inside[0])
    return bytes(out)


def _known_before(
    fd: int, data_runs: list[tuple[int, int]], offset: int, redactor: Redactor, known: dict[bytes, bytes]
) -> None:
    """Add to ``known`` the values found by their context (``password = 'X'``) in the kept
    bytes of the `_KNOWN_SCAN_BYTES` before ``offset``, as a local read scans them."""
    stream = StreamRedactor(redactor)
    stream.known.update(known)
    for run_start, run_end in data_runs:
        for chunk in _capped.pread_chunks(
            fd, max(run_start, offset - _KNOWN_SCAN_BYTES), min(run_end, offset)
        ):
            stream.feed(chunk)
    known.update(stream.known)


def _run_of(data_runs: list[tuple[int, int]], offset: int) -> tuple[int, int]:
    return next(run for run in data_runs if run[0] <= offset < run[1])


def _runs(data_runs: list[tuple[int, int]], cap: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The ``(start, end)`` of the head and of the tail (``(0, 0)`` when none) to copy from a
    file whose kept runs are ``data_runs`` (at most ``cap`` bytes, cut at the alignment)."""
    first, last = data_runs[0], data_runs[-1]
    if sum(end - start for start, end in data_runs) <= cap and len(data_runs) <= 2:
        return first, ((0, 0) if len(data_runs) == 1 else last)
    tail_from = max(last[0], -(-(last[1] - cap // 2) // _ALIGN) * _ALIGN)
    tail = (tail_from, last[1])
    head_room = (cap - (tail[1] - tail[0])) // _ALIGN * _ALIGN
    head_end = min(first[1], first[0] + head_room, tail_from if first == last else first[1])
    return (first[0], head_end), tail


def copy_of_file(
    fd: int, *, retained_from: int, raw: bool, redactor: Redactor, cap: int
) -> tuple[int, bytes, int, bytes]:
    """What a copy of a finished entry's file keeps (at most ``cap`` bytes): ``(head_start,
    head, tail_start, tail)`` in entry offsets (the file's offset 0 is ``retained_from``), a
    raw log's secrets masked."""
    data_runs = _capped.kept_runs(fd)
    if not data_runs:
        return retained_from, b"", retained_from, b""
    (h0, h1), (t0, t1) = _runs(data_runs, cap)
    if raw:
        known: dict[bytes, bytes] = {}
        head = _masked(fd, h0, h1, _run_of(data_runs, h0), redactor, known)
        tail = b""
        if t1 > t0:
            _known_before(fd, data_runs, t0, redactor, known)
            tail = _masked(fd, t0, t1, _run_of(data_runs, t0), redactor, known)
    else:
        head = _read(fd, h0, h1)
        tail = _read(fd, t0, t1) if t1 > t0 else b""
    return retained_from + h0, head, retained_from + (t0 if tail else h1), tail


def copy_of_bytes(data: bytes, cap: int) -> tuple[int, bytes, int, bytes]:
    """What a copy of an entry stored whole (already redacted) keeps, as `copy_of_file`."""
    if not data:
        return 0, b"", 0, b""
    (h0, h1), (t0, t1) = _runs([(0, len(data))], cap)
    return h0, data[h0:h1], (t0 if t1 > t0 else h1), data[t0:t1]


def _read(fd: int, start: int, end: int) -> bytes:
    return b"".join(_capped.pread_chunks(fd, start, end))


_COLUMNS = (
    "ref, session_id, kind, holder, created, finished, total_bytes, sha256, raw,"
    " head_start, head, tail_start, tail, object_key, head_bytes"
)


class SharedArchive:
    """The shared database's copies of archived entries (the ``shared_archive`` table).

    What it writes (`announce`, `keep`) goes through a queue to a thread of its own, in order,
    so that neither the event loop nor a command's reaper waits on the database; a database
    that fails or falls behind (`QUEUE_BYTES` waiting) is logged, and the entry stays readable
    on its machine only. `flush` waits for the queue. `fetch`, `has_session` and `expire` raise
    `HostFault` when the database fails.

    Args:
        db: The shared database.
        holder: This process (``<pid>t<start>@<place>``), named in what it announces.
        objects: An object store for the copies' bytes (the rows stay in ``db``); None: ``db``
            holds them. Closed with this archive.
    """

    def __init__(self, db: SqlDatabase, holder: str, objects: ObjectStore | None = None) -> None:
        self._db = db
        self.holder = holder
        self.objects = objects
        self._work: collections.deque[tuple[str, int, Callable[[], None]]] = collections.deque()
        self._queued_bytes = 0
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stored_since_trim = 0

    @property
    def entry_bytes(self) -> int:
        """Most bytes of one entry a copy keeps."""
        return SHARED_ENTRY_BYTES if self.objects is None else OBJECT_ENTRY_BYTES

    @property
    def session_bytes(self) -> int:
        """Most bytes of one session's copies."""
        return SESSION_SHARED_BYTES if self.objects is None else OBJECT_SESSION_BYTES

    @property
    def total_bytes(self) -> int:
        """Most bytes of all copies."""
        return SHARED_TOTAL_BYTES if self.objects is None else OBJECT_TOTAL_BYTES

    @property
    def where(self) -> str:
        """Where copies go, for messages: the shared database, or the archive store."""
        return (
            "the shared database" if self.objects is None else f"the archive store {self.objects.describe()}"
        )

    @property
    def queue_bytes(self) -> int:
        """Most bytes of copies waiting: `QUEUE_BYTES`, and room for two of the largest."""
        return max(QUEUE_BYTES, 2 * self.entry_bytes)

    def _submit(self, what: str, size: int, job: Callable[[], None]) -> None:
        """Queue ``job`` for the writer thread; ``what`` says what is lost when it cannot run
        ("X is not copied to ..."), logged with why."""
        with self._cond:
            if self._closed or self._queued_bytes + size > self.queue_bytes:
                _log.warning(
                    "%s: %s",
                    what,
                    "the archive is closed"
                    if self._closed
                    else f"{self.where} is behind ({self._queued_bytes:,} bytes wait to be written)",
                )
                return
            self._work.append((what, size, job))
            self._queued_bytes += size
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._drain, name="codemode-archive-copies", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _drain(self) -> None:
        while True:
            with self._cond:
                while not self._work and not self._closed:
                    self._cond.wait()
                if not self._work:
                    return
                what, size, job = self._work.popleft()
                self._busy = True
            try:
                job()
            except Exception as exc:  # the database or the store failed: the entry stays on its machine
                _log.warning("%s: %s", what, exc)
            finally:
                with self._cond:
                    self._queued_bytes -= size
                    self._busy = False
                    self._cond.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued is written (or failed); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._work and not self._busy, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (at most ``timeout`` seconds), then stop the thread. Idempotent."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        if self.objects is not None:
            self.objects.close()

    def announce(self, ref: str, *, kind: str, session_id: str | None, raw: bool) -> None:
        """Record a log this process has started writing (queued)."""
        row = (ref, session_id, kind, self.holder, time.time(), int(raw))
        self._submit(
            f"the announcement of log {ref} is not made in {self.where}", 0, lambda: self._announce(row)
        )

    def _announce(self, row: tuple[object, ...]) -> None:
        self._db.execute(
            "INSERT INTO shared_archive (ref, session_id, kind, holder, created, raw)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (ref) DO NOTHING",
            row,
        )

    def keep(
        self,
        ref: str,
        *,
        kind: str,
        session_id: str | None,
        created: float,
        total_bytes: int,
        raw: bool,
        parts: tuple[int, bytes, int, bytes],
    ) -> None:
        """Copy a finished entry (``parts`` from `copy_of_file` or `copy_of_bytes`; queued)."""
        head_start, head, tail_start, tail = parts
        copy = SharedCopy(
            ref=ref,
            session_id=session_id,
            kind=kind,
            holder=self.holder,
            created=created,
            finished=time.time(),
            total_bytes=total_bytes,
            sha256=hashlib.sha256(head + tail).hexdigest(),
            raw=raw,
            head_start=head_start,
            head=head,
            tail_start=tail_start,
            tail=tail,
        )
        self._submit(
            f"archived text {ref} is not copied to {self.where}",
            len(head) + len(tail),
            lambda: self.store(copy),
        )

    def store(self, copy: SharedCopy) -> None:
        """Keep ``copy`` (replacing its announcement), then drop the session's oldest finished
        copies past `session_bytes`. With an object store, its bytes are written there first."""
        size = len(copy.head) + len(copy.tail)
        head, tail, key = copy.head, copy.tail, None
        if self.objects is not None and size:  # (an empty copy needs no object)
            key = f"{self.objects.prefix}{copy.ref}.{secrets.token_hex(8)}"
            self.objects.put(key, copy.head + copy.tail)
            head, tail = b"", b""
        values = (
            copy.ref,
            copy.session_id,
            copy.kind,
            copy.holder,
            copy.created,
            copy.finished,
            copy.total_bytes,
            copy.sha256,
            int(copy.raw),
            copy.head_start,
            head,
            copy.tail_start,
            tail,
            key,
            len(copy.head),
        )
        dropped: list[str | None] = []
        try:
            with self._db.connection() as conn:
                replaced = conn.execute(
                    "SELECT object_key FROM shared_archive WHERE ref = ?", (copy.ref,)
                ).fetchone()
                dropped.append(None if replaced is None else replaced[0])
                conn.execute(
                    f"INSERT INTO shared_archive ({_COLUMNS}, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (ref) DO UPDATE SET finished = excluded.finished,"
                    " total_bytes = excluded.total_bytes, sha256 = excluded.sha256, head_start = excluded.head_start,"
                    " head = excluded.head, tail_start = excluded.tail_start, tail = excluded.tail,"
                    " object_key = excluded.object_key, head_bytes = excluded.head_bytes, size = excluded.size",
                    (*values, size),
                )
                if copy.session_id is not None:
                    rows = conn.execute(
                        "SELECT ref, size, object_key FROM shared_archive WHERE session_id = ?"
                        f" AND finished IS NOT NULL AND {self._own_kind} ORDER BY created DESC",
                        (copy.session_id,),
                    ).fetchall()
                    held = 0
                    for ref, ref_size, ref_key in rows:
                        held += int(ref_size)
                        if held > self.session_bytes:
                            conn.execute("DELETE FROM shared_archive WHERE ref = ?", (ref,))
                            dropped.append(ref_key)
        except BaseException:
            if key is not None:
                self._remove_objects([key])  # its row was not written: nothing names it
            raise
        self._remove_objects(dropped)
        self._stored_since_trim += size
        if self._stored_since_trim >= self.total_bytes // 64:
            self._stored_since_trim = 0
            self.trim()

    @property
    def _own_kind(self) -> str:
        """The SQL condition of the copies this archive's caps count: those whose bytes are where
        this archive keeps its own (the database, or an object store). A fleet with servers of
        both kinds (mid-way through turning a store on) keeps each kind under its own caps."""
        return "object_key IS NULL" if self.objects is None else "object_key IS NOT NULL"

    def _remove_objects(self, keys: list[str | None]) -> None:
        """Remove these objects (None: a copy kept in the database); a failure is logged, and
        what is left goes when it expires (`expire`)."""
        named = [key for key in keys if key]
        if self.objects is None or not named:
            return
        try:
            self.objects.delete(named)
        except HostFault as exc:
            _log.warning(
                "%d copies of archived text stay in the archive store until they expire: %s", len(named), exc
            )

    def trim(self) -> int:
        """Drop the oldest finished copies while all of them hold more than `total_bytes`
        (checked after every 1/64 of it stored); how many."""
        dropped: list[str | None] = []
        with self._db.connection() as conn:
            (total,) = conn.execute(
                f"SELECT COALESCE(SUM(size), 0) FROM shared_archive WHERE {self._own_kind}"
            ).fetchone()
            excess = int(total) - self.total_bytes
            if excess <= 0:
                return 0
            for ref, size, key in conn.execute(
                "SELECT ref, size, object_key FROM shared_archive WHERE finished IS NOT NULL"
                f" AND {self._own_kind} ORDER BY created"
            ).fetchall():
                if excess <= 0:
                    break
                conn.execute("DELETE FROM shared_archive WHERE ref = ?", (ref,))
                excess -= int(size)
                dropped.append(key)
        self._remove_objects(dropped)
        return len(dropped)

    @host_faults
    def fetch(self, ref: str, session_id: str | None = None) -> SharedCopy | None:
        """The copy of ``ref``; None when there is none (or, with ``session_id``, when it is
        another session's: nothing of it is read, from the database or the store). A copy still
        being written on its machine comes without bytes.

        Raises:
            HostFault: The database or the object store failed, or the bytes read are not the
                ones its row describes (their size and SHA-256).
        """
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT ref, session_id, kind, holder, created, finished, total_bytes, sha256, raw,"
                " head_start, tail_start, object_key, head_bytes, size FROM shared_archive WHERE ref = ?",
                (ref,),
            ).fetchone()
            if row is None or (session_id is not None and row[1] != session_id):
                return None
            key, head_bytes, size = row[11], int(row[12]), int(row[13])
            head = tail = b""
            if row[5] is not None and key is None:
                kept = conn.execute("SELECT head, tail FROM shared_archive WHERE ref = ?", (ref,)).fetchone()
                head, tail = (b"", b"") if kept is None else (bytes(kept[0]), bytes(kept[1]))
        holder = str(row[3])
        if key is not None:
            if self.objects is None:
                raise HostFault(
                    f"the copy of {ref} is in an archive store this server was not given: start it with "
                    "the same --archive-url-file (or $CODEMODE_ARCHIVE_URL) as the server that made it"
                )
            data = self.objects.get(str(key), size)
            if data is None:
                raise HostFault(
                    f"the archive store {self.objects.describe()} has lost the copy of {ref}; "
                    f"the machine that made it ({holder}) may still hold it"
                )
            head, tail = data[:head_bytes], data[head_bytes:]
        if row[5] is not None and (
            len(head) + len(tail) != size or hashlib.sha256(head + tail).hexdigest() != row[7]
        ):
            raise HostFault(
                f"{self.where} holds a damaged copy of {ref} (not the size and digest it was written "
                f"with); the machine that made it ({holder}) may still hold it"
            )
        return SharedCopy(
            ref=str(row[0]),
            session_id=row[1],
            kind=str(row[2]),
            holder=holder,
            created=float(row[4]),
            finished=None if row[5] is None else float(row[5]),
            total_bytes=int(row[6]),
            sha256=str(row[7]),
            raw=bool(row[8]),
            head_start=int(row[9]),
            head=head,
            tail_start=int(row[10]),
            tail=tail,
        )

    @host_faults
    def has_session(self, session_id: str) -> bool:
        """Whether a copy of this session's is kept."""
        with self._db.connection() as conn:
            row = conn.execute("SELECT 1 FROM shared_archive WHERE session_id = ? LIMIT 1", (session_id,))
            return row.fetchone() is not None

    @host_faults
    def expire(self, before: float, now: float) -> int:
        """Remove the copies created before ``before``; how many. Their objects, and any object
        of this store written before then (one an interrupted write or removal left: listed at
        most once a day, ``now`` saying when today is), are removed by the writer thread (queued:
        a long listing never holds the caller)."""
        with self._db.connection() as conn:
            keys = [
                row[0]
                for row in conn.execute(
                    "SELECT object_key FROM shared_archive WHERE created < ? AND object_key IS NOT NULL",
                    (before,),
                ).fetchall()
            ]
            expired = conn.execute("DELETE FROM shared_archive WHERE created < ?", (before,)).rowcount
        objects = self.objects
        if objects is not None:

            def sweep() -> None:
                self._remove_objects(list(keys))
                objects.delete_older(before, now)

            self._submit(f"expired objects stay in {self.where} until its next expiry", 0, sweep)
        return int(expired)


def materialize(copy: SharedCopy, blob_dir: Path) -> tuple[str, int, int]:
    """Write ``copy``'s bytes to a new file of ``blob_dir`` for the archive to read: its head
    at offset 0 and its tail at its offset, the middle a hole. Where the file system cannot
    leave holes, only the tail (or the head when there is no tail) is written.

    Returns:
        ``(file name, retained_from, disk bytes)``.

    Raises:
        OSError: The file cannot be written.
    """
    head_start, head, tail_start, tail = copy.head_start, copy.head, copy.tail_start, copy.tail
    if tail and tail_start > head_start + len(head) and not _capped.holes_supported(str(blob_dir)):
        head_start, head = tail_start, b""  # keep the end, as compaction does
    file = f"{copy.ref}.{secrets.token_hex(4)}"
    fd = os.open(blob_dir / file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _capped.pwrite_fully(fd, head, 0)
        _capped.pwrite_fully(fd, tail, tail_start - head_start)
        disk = os.fstat(fd).st_blocks * 512
    except BaseException:
        os.unlink(blob_dir / file)  # a part written (disk full): no file outside the index
        raise
    finally:
        os.close(fd)
    return file, head_start, disk
