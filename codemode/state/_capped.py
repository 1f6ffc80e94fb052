"""Capped command logs and the state directory's quota. Standard library only.

The supervisor of a background process (``codemode/tools/bash/supervisor``) imports this
module without the rest of the ``codemode`` package; the archive imports it as
``codemode.state._capped``. Both write logs through :class:`CappedLog`, so a log is capped
the same way whoever writes it.

**A capped log** is one file in which every byte of a command's output sits at its own offset.
Once the output outgrows the cap, the file keeps its head (the first quarter of the cap) and a
rolling tail; the bytes between are released with ``fallocate(FALLOC_FL_PUNCH_HOLE)``. The file's
size still counts every byte written while its disk use stays within the cap, and readers find
what is kept with ``SEEK_DATA``/``SEEK_HOLE`` (:func:`read_kept`, :func:`kept_runs`). Where the file
system cannot punch holes, a log keeps its first ``cap`` bytes instead and the count of the
rest goes to the archive index when the writer closes.

**The quota** bounds the whole state directory: :func:`enforce_quota` evicts finished entries,
the oldest finished logs first, until the directory fits. Writers report growth to a
:class:`QuotaWatch`, which runs that check in a thread of its own now and then, so a command
that fills the directory is never stopped or slowed by it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator

__all__ = [
    "ALIGN",
    "DEFAULT_LOG_CAP_BYTES",
    "DEFAULT_QUOTA_BYTES",
    "MIN_LOG_CAP_BYTES",
    "MIN_QUOTA_BYTES",
    "CappedLog",
    "EntryLog",
    "QuotaWatch",
    "dropped_range",
    "enforce_quota",
    "holes_supported",
    "kept_runs",
    "kept_sha256",
    "pread_chunks",
    "pwrite_fully",
    "quota_step",
    "read_kept",
    "session_tmpfs_usage",
    "state_usage",
]

DEFAULT_LOG_CAP_BYTES = 256 * 1024 * 1024
"""Most bytes one command's log keeps on disk (head and tail)."""
DEFAULT_QUOTA_BYTES = 4 * 1024 * 1024 * 1024
"""Most bytes the state directory holds before finished entries are evicted."""
MIN_LOG_CAP_BYTES = 1024 * 1024
MIN_QUOTA_BYTES = 4 * 1024 * 1024

ALIGN = 64 * 1024
"""Holes are punched on these boundaries (a multiple of every file system's block size), so
every punched byte is released and SEEK_HOLE reports exactly the punched ranges."""
# A writer reports growth to its quota watch in steps of this many bytes.
_REPORT_BYTES = 1024 * 1024
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_BUSY_TIMEOUT_SECONDS = 10.0
_DB_FILES = ("state.db", "state.db-wal", "state.db-shm")


def _fallocate() -> Callable[[int, int, int, int], int]:
    import ctypes  # only once a log outgrows its head: most never do

    libc = ctypes.CDLL(None, use_errno=True)
    function = libc.fallocate
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    function.restype = ctypes.c_int

    def call(fd: int, mode: int, offset: int, length: int) -> int:
        if function(fd, mode, offset, length) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return 0

    return call


_FALLOCATE: list[Callable[[int, int, int, int], int]] = []


def _punch(fd: int, start: int, end: int) -> None:
    """Release the bytes ``[start, end)`` of the file (its size stays).

    Raises:
        OSError: The file system cannot punch holes (or the call failed).
    """
    if not _FALLOCATE:
        _FALLOCATE.append(_fallocate())
    _FALLOCATE[0](fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, start, end - start)


_HOLES: dict[str, bool] = {}


def holes_supported(directory: str) -> bool:
    """Whether files in ``directory`` can have holes punched and report them (probed once).

    A scratch file (unlinked at once) gets a hole punched in its middle; the answer is yes
    only if ``SEEK_HOLE`` and ``SEEK_DATA`` then report exactly that hole. A file system that
    punches but reports no holes would hand readers zeros as if they were output.
    """
    known = _HOLES.get(directory)
    if known is None:
        known = _HOLES[directory] = _probe_holes(directory)
    return known


def _probe_holes(directory: str) -> bool:
    # An unnamed file (O_TMPFILE) where the file system allows: nothing else ever sees it.
    path = os.path.join(directory, f".holes-probe-{os.getpid()}-{threading.get_ident()}")
    try:
        fd = os.open(directory, os.O_RDWR | os.O_TMPFILE | os.O_CLOEXEC, 0o600)
        path = ""
    except OSError:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError:
            return False
    try:
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.pwrite(fd, b"\x01" * (3 * ALIGN), 0)
        _punch(fd, ALIGN, 2 * ALIGN)
        return os.lseek(fd, 0, os.SEEK_HOLE) == ALIGN and os.lseek(fd, ALIGN, os.SEEK_DATA) == 2 * ALIGN
    except OSError:
        return False
    finally:
        os.close(fd)


def pwrite_fully(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (``pwrite`` may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


class CappedLog:
    """Writes a command's output to one file, keeping at most ``cap`` bytes of it on disk.

    Every byte is written at its offset in the output (``seen`` counts them all). Past the
    cap the file keeps its first quarter-cap (the head) and the latest bytes (the tail); the
    range between is punched out in steps of an eighth of the tail, before the write that
    would exceed the cap, so disk use never passes it (up to one file-system block). Where
    holes cannot be punched, the first ``cap`` bytes are kept and the rest only counted.
    Not thread-safe; the file is read concurrently through :func:`read_kept`.

    Args:
        path: The log file; written from its current end (created when missing).
        cap: Most bytes kept on disk (at least 1 MiB); ``None`` keeps every byte.
        create: Create the file, failing if it exists.
        on_growth: Called from the writing thread with the number of bytes the file's disk
            use grew by, when it reaches a new high by 1 MiB and at close (for the quota).

    Raises:
        OSError: The file cannot be opened.
        ValueError: ``cap`` is below 1 MiB.
    """

    def __init__(
        self,
        path: str,
        cap: int | None,
        *,
        create: bool = False,
        on_growth: Callable[[int], None] | None = None,
    ) -> None:
        if cap is not None and cap < MIN_LOG_CAP_BYTES:
            raise ValueError(f"a log cap must be at least {MIN_LOG_CAP_BYTES} bytes (got {cap})")
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if create else 0)
        self.path = path
        self.cap = cap
        self._fd: int | None = os.open(path, flags, 0o600)
        self.seen = os.fstat(self._fd).st_size
        self._kept = self.seen
        self._limit = cap if cap is not None else -1
        self._head = max(ALIGN, (cap or 0) // 4 // ALIGN * ALIGN)
        self._step = max(ALIGN, ((cap or 0) - self._head) // 8 // ALIGN * ALIGN)
        self._hole_end = self._head  # the punched range is [head, hole_end)
        self._holes: bool | None = None  # probed when first needed
        self._on_growth = on_growth
        self._reported = self._kept

    @property
    def kept_bytes(self) -> int:
        """Bytes of the output now on disk."""
        return self._kept

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data``, releasing older tail bytes first when the cap would be passed.

        Raises:
            ValueError: The log is closed.
            OSError: The write failed (disk full, I/O error).
        """
        if self._fd is None:
            raise ValueError(f"log {self.path} is closed")
        n = len(data)
        if self._limit < 0 or self._kept + n <= self._limit:
            pwrite_fully(self._fd, data, self.seen)
            self.seen += n
            self._kept += n
        else:
            view = memoryview(data)
            while view:
                self._write_capped(view[: self._step])
                view = view[self._step :]
        if self._on_growth is not None and self._kept - self._reported >= _REPORT_BYTES:
            grown, self._reported = self._kept - self._reported, self._kept
            self._on_growth(grown)

    def _write_capped(self, piece: memoryview) -> None:
        assert self._fd is not None and self.cap is not None
        m = len(piece)
        if self._holes is None:
            self._holes = holes_supported(os.path.dirname(os.path.abspath(self.path)))
        if self._holes and self._kept + m > self.cap:
            # After this piece, at most cap - step bytes stay: the next punch is a step away.
            target = self.seen + m - (self.cap - self._head) + self._step
            end = min(-(-target // ALIGN) * ALIGN, self.seen // ALIGN * ALIGN)
            if end > self._hole_end:
                try:
                    _punch(self._fd, self._hole_end, end)
                except OSError:
                    self._holes = False  # keep what is on disk; from now on only count
                else:
                    self._kept -= end - self._hole_end
                    self._hole_end = end
        if self._holes:
            pwrite_fully(self._fd, piece, self.seen)
            self._kept += m
        elif self.seen < self.cap and self._kept == self.seen:
            room = self.cap - self.seen
            pwrite_fully(self._fd, piece[:room], self.seen)
            self._kept += min(room, m)
        self.seen += m

    def close(self) -> None:
        """Close the file (idempotent), reporting growth not yet reported."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if self._on_growth is not None and self._kept > self._reported:
                grown, self._reported = self._kept - self._reported, self._kept
                self._on_growth(grown)


def read_kept(fd: int, offset: int, limit: int) -> tuple[int, bytes, int]:
    """Read up to ``limit`` kept bytes of a (possibly capped) log at or after ``offset``.

    A page never spans a dropped range, and is never torn by a writer punching the range it
    reads: after the read, the range must still be data, else the read is made again.

    Returns:
        ``(start, data, run_end)``: where the data starts (past ``offset`` when ``offset``
        falls in a dropped range), the bytes (empty when nothing is kept at or after
        ``offset``), and where the run of kept bytes holding them ends.
    """
    while True:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            return offset, b"", offset  # nothing kept from here on
        run_end = os.lseek(fd, start, os.SEEK_HOLE)
        data = os.pread(fd, min(limit, run_end - start), start)
        if os.lseek(fd, start, os.SEEK_HOLE) >= start + len(data):
            return start, data, run_end
        offset = start  # punched while being read: look again


def kept_runs(fd: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` ranges of a log file that hold kept bytes, in order."""
    runs: list[tuple[int, int]] = []
    offset = 0
    while True:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            return runs
        offset = os.lseek(fd, start, os.SEEK_HOLE)
        runs.append((start, offset))


def dropped_range(runs: list[tuple[int, int]], total: int) -> tuple[int, int] | None:
    """The first range of ``[0, total)`` that ``runs`` (from :func:`kept_runs`) do not cover.

    A capped log has at most one: its middle, or its end where holes cannot be punched.
    """
    position = 0
    for start, end in runs:
        if start > position:
            return position, start
        position = max(position, end)
    return (position, total) if position < total else None


def pread_chunks(fd: int, start: int, end: int) -> Iterator[bytes]:
    """The file's bytes ``[start, end)`` in chunks of at most 1 MiB (fewer at its end)."""
    while start < end:
        chunk = os.pread(fd, min(1 << 20, end - start), start)
        if not chunk:
            return
        yield chunk
        start += len(chunk)


def kept_sha256(fd: int) -> str:
    """sha256 (hex) of a log's kept bytes, in order (its head, then its tail)."""
    import hashlib  # here: a supervisor never hashes, and OpenSSL costs it megabytes

    digest = hashlib.sha256()
    for start, end in kept_runs(fd):
        for chunk in pread_chunks(fd, start, end):
            digest.update(chunk)
    return digest.hexdigest()


# -- the quota ------------------------------------------------------------------------------


def quota_step(quota: int) -> int:
    """How many bytes a writer adds between two quota checks (1/64 of the quota, 1-64 MiB)."""
    return max(1024 * 1024, min(64 * 1024 * 1024, quota // 64))


def _connect(db_path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(db_path, timeout=_BUSY_TIMEOUT_SECONDS, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_SECONDS * 1000)}")
    conn.execute("PRAGMA synchronous = NORMAL")  # (as every connection to the state database)
    return conn


def _disk_bytes(path: str) -> int:
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


def session_tmpfs_usage(state_dir: str) -> int:
    """Bytes in use on the session temp dirs of ``state_dir`` that are a tmpfs of their own
    (``STATE/tmp/s-*`` on another device than ``STATE/tmp``): one ``statvfs`` each, nothing
    walked. Those dirs are the host's own (commands write only inside them); a plain,
    counted temp dir is bounded by the refusal of new commands instead (``sandbox._tmpfs``)."""
    parent = os.path.join(state_dir, "tmp")
    try:
        device = os.stat(parent, follow_symlinks=False).st_dev
        names = [n for n in os.listdir(parent) if n.startswith("s-")]
    except OSError:
        return 0
    used = 0
    for name in names:
        path = os.path.join(parent, name)
        try:
            st = os.stat(path, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_dev == device:
                continue
            fs = os.statvfs(path)
        except OSError:
            continue
        used += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    return used


def state_usage(conn: sqlite3.Connection, state_dir: str) -> int:
    """Bytes the state directory uses: the database files, every archived entry and what the
    sessions' temp dirs hold where each is a tmpfs (`session_tmpfs_usage`).

    Finished entries count what the index recorded when they finished; entries still being
    written count what their file uses now.
    """
    (finished,) = conn.execute(
        "SELECT COALESCE(SUM(disk_bytes), 0) FROM archive_entries WHERE finished IS NOT NULL"
    ).fetchone()
    blobs = os.path.join(state_dir, "blobs")
    live = conn.execute("SELECT file FROM archive_entries WHERE finished IS NULL").fetchall()
    used = int(finished) + sum(_disk_bytes(os.path.join(blobs, file)) for (file,) in live)
    used += session_tmpfs_usage(state_dir)
    return used + sum(_disk_bytes(os.path.join(state_dir, name)) for name in _DB_FILES)


def enforce_quota(db_path: str, quota: int | None = None) -> int:
    """Evict finished entries until the state directory fits its quota.

    Unpinned logs go first, oldest finished first; then other unpinned entries (archived
    output); pinned entries (logs of completions not yet delivered) last. Entries still being
    written are never evicted: each is bounded by its own cap.

    Args:
        db_path: The state database (``state.db`` in the state directory).
        quota: The quota in bytes; ``None`` uses the one the last Host opened on this state
            directory stored (none stored: nothing to do).

    Returns:
        How many entries were evicted.

    Raises:
        sqlite3.Error: The database failed.
        OSError: The state directory cannot be read.
    """
    state_dir = os.path.dirname(os.path.abspath(db_path))
    conn = _connect(db_path)
    try:
        if quota is None:
            row = conn.execute("SELECT value FROM archive_settings WHERE key = 'quota_bytes'").fetchone()
            if row is None:
                return 0
            quota = int(row[0])
        victims: list[tuple[str, str]] = []
        if state_usage(conn, state_dir) <= quota:
            return 0  # the usual answer, found without taking the write lock
        conn.execute("BEGIN IMMEDIATE")
        over = state_usage(conn, state_dir) - quota
        if over > 0:
            rows = conn.execute(
                "SELECT ref, file, COALESCE(disk_bytes, 0) FROM archive_entries WHERE finished IS NOT NULL"
                " ORDER BY pinned, kind != 'log', finished"
            )
            for ref, file, disk in rows:
                victims.append((ref, file))
                over -= disk
                if over <= 0:
                    break
            conn.executemany("DELETE FROM archive_entries WHERE ref = ?", [(ref,) for ref, _ in victims])
        conn.execute("COMMIT")
    finally:
        conn.close()
    for _ref, file in victims:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(state_dir, "blobs", file))
    return len(victims)


class QuotaWatch:
    """Runs the quota check in a thread of its own once enough bytes were added.

    Args:
        db_path: The state database.
        quota: The quota; ``None`` reads the stored one at each check.
        before: Run first in the check's thread (the archive compacts finished logs there).
    """

    def __init__(
        self, db_path: str, quota: int | None, *, before: Callable[[], object] | None = None
    ) -> None:
        self._db_path = db_path
        self._quota = quota
        self._step = quota_step(quota if quota is not None else DEFAULT_QUOTA_BYTES)
        self._before = before
        self._added = 0
        self._running = False
        self._lock = threading.Lock()

    def added(self, nbytes: int) -> None:
        """Note ``nbytes`` more bytes in the state directory (thread-safe; never blocks on I/O)."""
        with self._lock:
            self._added += nbytes
            if self._running or self._added < self._step:
                return
            self._added = 0
            self._running = True
        threading.Thread(target=self._check, name="codemode-quota", daemon=True).start()

    def _check(self) -> None:
        try:
            if self._before is not None:
                self._before()
            enforce_quota(self._db_path, self._quota)
        except Exception:  # a failed check (database busy, archive closed) is retried at the next step
            pass
        finally:
            with self._lock:
                self._running = False


class EntryLog(CappedLog):
    """The capped log of an archive entry, written outside the archive (a background supervisor).

    The cap is the one the archive recorded for the entry; growth is reported to a quota
    watch on the same state directory; and where holes cannot be punched, the count of bytes
    not kept is stored in the index at close, so the archive still counts every byte.

    Args:
        db_path: The state database.
        path: The entry's file (``blobs/<ref>``, created by ``Archive.open_log``).

    Raises:
        OSError: The file cannot be opened.
        sqlite3.Error: The database cannot be read.
    """

    def __init__(self, db_path: str, path: str) -> None:
        self._db_path = db_path
        self._ref = os.path.basename(path)
        conn = _connect(db_path)
        try:
            row = conn.execute("SELECT cap_bytes FROM archive_entries WHERE ref = ?", (self._ref,)).fetchone()
            stored = conn.execute("SELECT value FROM archive_settings WHERE key = 'quota_bytes'").fetchone()
        finally:
            conn.close()
        # An entry always records its cap; were it missing, the default still bounds the log.
        cap = DEFAULT_LOG_CAP_BYTES if row is None or row[0] is None else int(row[0])
        quota = DEFAULT_QUOTA_BYTES if stored is None else int(stored[0])
        super().__init__(path, cap, on_growth=QuotaWatch(db_path, quota).added)

    def close(self) -> None:
        """Close the file; record the full count when bytes past the file's end were dropped.

        Never raises for the record (the supervisor must go on to record the exit): without
        it the archive counts the bytes in the file.
        """
        super().close()
        with contextlib.suppress(OSError, sqlite3.Error):
            if self.seen > os.path.getsize(self.path):
                conn = _connect(self._db_path)
                try:
                    conn.execute(
                        "UPDATE archive_entries SET total_bytes = ? WHERE ref = ? AND finished IS NULL",
                        (self.seen, self._ref),
                    )
                finally:
                    conn.close()
