"""Capped logs and the state-dir quota: real files, a real SQLite file, real commands.

Issue 8, item 7: ``timeout 3 cat /dev/zero`` wrote ~970 MB into the state dir in 3 s.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codemode.state import Archive, Redactor, State, _capped
from codemode.state._capped import CappedLog, EntryLog, holes_supported, read_kept

MIB = 1024 * 1024
GH = "ghp_" + "A1b2C3d4E5" * 3 + "xyz123"


def pattern(start: int, length: int) -> bytes:
    """Bytes that say where they are (never NUL, so a hole read as zeros cannot pass)."""
    period = 251
    base = bytes(range(1, 252))
    block = base * (length // period + 2)
    skip = start % period
    return block[skip : skip + length]


def disk(path: Path) -> int:
    return path.stat().st_blocks * 512


def read_all(archive: Archive, ref: str, limit: int = 1 << 20) -> list[tuple[int, bytes, Any]]:
    """Every page of an entry: (offset, data, dropped)."""
    pages = []
    offset = 0
    while True:
        page = archive.read(ref, offset, limit)
        pages.append((page.offset, page.data, page.dropped))
        if page.eof:
            return pages
        assert page.next_offset > offset
        offset = page.next_offset


@pytest.fixture
def archive(tmp_path: Path) -> Any:
    arch_state = State(
        tmp_path / "state", Redactor(environ={}), log_cap_bytes=4 * MIB, quota_bytes=1024 * MIB
    )
    arch = arch_state.archive
    yield arch
    arch_state.close()


needs_holes = pytest.mark.skipif(
    not holes_supported(os.environ.get("TMPDIR", "/tmp")), reason="the file system cannot punch holes"
)


def test_a_log_under_its_cap_is_kept_whole(archive: Archive) -> None:
    log = archive.open_log(kind="log", session_id="s", redact=False)
    data = pattern(0, 3 * MIB)
    log.write(data)
    ref = log.close()
    assert (ref.total_bytes, ref.kept_bytes, ref.dropped) == (3 * MIB, 3 * MIB, None)
    assert ref.sha256 == hashlib.sha256(data).hexdigest()
    assert b"".join(d for _, d, _ in read_all(archive, ref.ref)) == data


@needs_holes
def test_a_log_past_its_cap_keeps_head_and_tail_counts_every_byte_and_stays_under_the_cap(
    archive: Archive,
) -> None:
    log = archive.open_log(kind="log", session_id="s", redact=False)
    total = 0
    sizes = [1, 4096, 65536, 1 << 20, 3 * MIB, 12345, 7]  # also one write over the whole tail
    peak = 0
    for i in range(60):
        size = sizes[i % len(sizes)]
        log.write(pattern(total, size))
        total += size
        peak = max(peak, disk(log.path))
    assert peak <= 4 * MIB + 64 * 1024  # the cap, to a block
    ref = log.close()
    assert ref.total_bytes == total == log.bytes_written
    assert ref.dropped is not None
    start, end = ref.dropped
    assert start == MIB  # the head: a quarter of the cap
    assert 3 * MIB - 512 * 1024 <= total - end <= 3 * MIB  # the tail: the rest, less a step
    assert ref.kept_bytes == total - (end - start)
    kept = pattern(0, start) + pattern(end, total - end)
    assert ref.sha256 == hashlib.sha256(kept).hexdigest()
    # Offsets are the original ones; the read that lands in the gap says so.
    pages = read_all(archive, ref.ref, limit=300_000)
    for offset, data, _ in pages:
        assert data == pattern(offset, len(data))
    assert b"".join(d for _, d, _ in pages) == kept
    assert [dropped for _, _, dropped in pages if dropped] == [(start, end)]
    inside = archive.read(ref.ref, start + 10, 100)
    assert (inside.offset, inside.dropped, inside.data) == (end, (start + 10, end), pattern(end, 100))
    info = archive.entry_info(ref.ref)
    disk_bytes = info["disk_bytes"]
    assert info["cap_bytes"] == 4 * MIB and isinstance(disk_bytes, int) and disk_bytes <= 4 * MIB + 64 * 1024


_WRITER = """
import sys
from codemode.state._capped import EntryLog
sys.path.insert(0, sys.argv[3])
from test_capped import pattern
log = EntryLog(sys.argv[1], sys.argv[2])
written = log.seen
while written < 400 * 1024 * 1024:
    log.write(pattern(written, 64 * 1024))
    written += 64 * 1024
log.close()
"""


@needs_holes
def test_reads_while_another_process_rolls_the_tail_are_never_torn(archive: Archive) -> None:
    log = archive.open_log(kind="log", session_id="s", redact=False)
    log.write(pattern(0, 4 * MIB))  # the head and a full tail first
    log.detach()
    # The writer is another process, like a background command's supervisor. A plain pread
    # racing its punches returns zeros about once in 10,000 reads; read_kept must never.
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(archive.db_path), str(log.path), str(Path(__file__).parent)]
    )
    fd = os.open(log.path, os.O_RDONLY)
    reads = 0
    try:
        while writer.poll() is None or reads < 100:
            # From the head's end a read lands on the oldest tail byte: the next to be punched.
            start, data, _ = read_kept(fd, MIB, 256 * 1024)
            reads += 1
            assert data == pattern(start, len(data)), f"the page at {start} is torn"
    finally:
        os.close(fd)
        writer.kill()
        writer.wait()
    assert writer.returncode == 0
    assert disk(log.path) <= 4 * MIB + 64 * 1024
    page = archive.read(log.ref, MIB, 1000)
    assert page.data == pattern(page.offset, len(page.data)) and page.dropped == (MIB, page.offset)


def test_without_holes_a_log_keeps_its_first_cap_bytes_and_counts_the_rest(
    archive: Archive, tmp_path: Path
) -> None:
    # A file system that cannot punch holes: the probe's answer, set as it would be found.
    blobs = str(archive.state_dir / "blobs")
    _capped._HOLES[blobs] = False
    try:
        log = archive.open_log(kind="log", session_id="s", redact=False)
        for i in range(10):
            log.write(pattern(i * MIB, MIB))
        ref = log.close()
        assert disk(log.path) <= 4 * MIB + 64 * 1024
        assert (ref.total_bytes, ref.dropped, ref.kept_bytes) == (10 * MIB, (4 * MIB, 10 * MIB), 4 * MIB)
        pages = read_all(archive, ref.ref)
        assert b"".join(d for _, d, _ in pages) == pattern(0, 4 * MIB)
        assert pages[-1] == (10 * MIB, b"", (4 * MIB, 10 * MIB))
        # The same for a log another process writes (a background supervisor): it stores the
        # count in the index at close, and finish_log takes it from there.
        other = archive.open_log(kind="log", session_id="s", redact=False)
        other.detach()
        entry = EntryLog(str(archive.db_path), str(other.path))
        for i in range(6):
            entry.write(pattern(i * MIB, MIB))
        entry.close()
        finished = archive.finish_log(other.ref)
        assert (finished.total_bytes, finished.dropped) == (6 * MIB, (4 * MIB, 6 * MIB))
    finally:
        del _capped._HOLES[blobs]


@needs_holes
def test_a_raw_log_page_never_joins_bytes_across_the_dropped_range(archive: Archive) -> None:
    log = archive.open_log(kind="log", session_id="s", redact=False)
    line = b"h" * 99 + b"\n"
    while log.bytes_written < 2 * MIB:
        log.write(line)
    log.write(b"t" * (12 * MIB))
    log.write(b"\n" + GH.encode() + b" at the end\n")
    ref = log.close()
    assert ref.dropped is not None
    pages = read_all(archive, ref.ref, limit=64 * 1024)
    for offset, data, _ in pages:
        # Each page lies on one side of the gap (the tail cannot continue a head line).
        assert offset + len(data) <= ref.dropped[0] or offset >= ref.dropped[1]
    text = b"".join(d for _, d, _ in pages)
    assert GH.encode() not in text
    assert text.endswith(b"\n[REDACTED:github-token] at the end\n")


def test_entry_log_takes_the_cap_the_archive_recorded(archive: Archive) -> None:
    log = archive.open_log(kind="log", session_id="s", redact=False)
    log.detach()
    entry = EntryLog(str(archive.db_path), str(log.path))
    assert entry.cap == 4 * MIB
    entry.close()


def test_read_kept_on_a_dense_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(pattern(0, 1000))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_kept(fd, 10, 5) == (10, pattern(10, 5), 1000)
        assert read_kept(fd, 1000, 5) == (1000, b"", 1000)
    finally:
        os.close(fd)


def test_a_cap_below_the_minimum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1048576"):
        CappedLog(str(tmp_path / "f"), 1000)
    with pytest.raises(ValueError, match="log_cap_bytes"):
        State(tmp_path / "state", log_cap_bytes=1000)
    with pytest.raises(ValueError, match="quota_bytes"):
        State(tmp_path / "state", quota_bytes=1000)


# -- compaction of a capped log ----------------------------------------------------------------


@needs_holes
def test_a_finished_capped_log_compacts_to_its_last_8_mib(tmp_path: Path) -> None:
    arch_state = State(tmp_path / "state", Redactor(environ={}), log_cap_bytes=32 * MIB)
    arch = arch_state.archive
    try:
        log = arch.open_log(kind="log", session_id="s", redact=False)
        for i in range(60):
            log.write(pattern(i * MIB, MIB))
        ref = log.close()
        assert ref.dropped is not None and ref.kept_bytes > 8 * MIB
        assert arch.maintain()["compacted"] == 1
        page = arch.read(ref.ref, 0, 100)
        assert page.offset == page.retained_from == 60 * MIB - 8 * MIB
        assert page.dropped == (0, page.offset) and page.data == pattern(page.offset, len(page.data))
        disk_bytes = arch.entry_info(ref.ref)["disk_bytes"]
        assert isinstance(disk_bytes, int) and disk_bytes <= 8 * MIB + 64 * 1024
    finally:
        arch_state.close()


# -- the quota ---------------------------------------------------------------------------------


def usage(archive: Archive) -> int:
    conn = sqlite3.connect(archive.db_path)
    try:
        return _capped.state_usage(conn, str(archive.state_dir))
    finally:
        conn.close()


def test_over_the_quota_the_oldest_finished_logs_go_first(tmp_path: Path) -> None:
    arch_state = State(tmp_path / "state", Redactor(environ={}), log_cap_bytes=4 * MIB, quota_bytes=12 * MIB)
    arch = arch_state.archive
    try:
        refs = []
        for _ in range(4):  # four finished 2 MiB logs, oldest first
            log = arch.open_log(kind="log", session_id="s", redact=False)
            log.write(pattern(0, 2 * MIB))
            refs.append(log.close().ref)
        output = arch.put(pattern(0, 2 * MIB), kind="output", session_id="s").ref
        pinned = arch.open_log(kind="log", session_id="s", redact=False)
        pinned.write(pattern(0, 2 * MIB))
        pinned.close()
        arch.pin(pinned.ref, True)
        live = arch.open_log(kind="log", session_id="s", redact=False)
        live.write(pattern(0, 3 * MIB))  # 15 MiB in all, and the database
        # The writers' own checks may have evicted some already; either way, oldest first.
        arch.maintain()
        assert usage(arch) <= 12 * MIB

        def alive(ref: str) -> bool:
            try:
                arch.read(ref, 0, 1)
            except Exception:
                return False
            return True

        assert [alive(r) for r in refs] == [False, False, True, True]
        assert alive(output) and alive(pinned.ref) and alive(live.ref)
        assert not (arch.state_dir / "blobs" / refs[0]).exists()
        # Still over: outputs next, then pinned logs; never the live one.
        arch_state.close()
        arch_state = State(tmp_path / "state", Redactor(environ={}), quota_bytes=4 * MIB)
        arch = arch_state.archive
        assert arch.maintain()["evicted"] == 4  # logs 3 and 4, the output, the pinned log
        assert usage(arch) <= 4 * MIB
        assert [alive(r) for r in (output, pinned.ref, live.ref)] == [False, False, True]
        live.detach()  # its archive was closed above
    finally:
        arch_state.close()


def test_writers_keep_the_quota_without_anyone_calling_maintain(tmp_path: Path) -> None:
    arch_state = State(tmp_path / "state", Redactor(environ={}), log_cap_bytes=2 * MIB, quota_bytes=8 * MIB)
    arch = arch_state.archive
    try:
        for _ in range(12):  # 24 MiB of finished logs through a quota of 8
            log = arch.open_log(kind="log", session_id="s", redact=False)
            log.write(pattern(0, 2 * MIB))
            log.close()
        # The check runs in a thread of its own; it must bring usage under the quota soon.
        deadline = time.monotonic() + 30
        while usage(arch) > 8 * MIB + _capped.quota_step(8 * MIB) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert usage(arch) <= 8 * MIB + _capped.quota_step(8 * MIB)
    finally:
        arch_state.close()


def test_the_quota_is_stored_for_supervisors(tmp_path: Path) -> None:
    State(tmp_path / "state", quota_bytes=64 * MIB).close()
    with sqlite3.connect(tmp_path / "state" / "state.db") as conn:
        assert conn.execute("SELECT value FROM archive_settings WHERE key = 'quota_bytes'").fetchone() == (
            64 * MIB,
        )
    conn.close()
