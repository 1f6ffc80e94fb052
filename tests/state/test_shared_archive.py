"""Archived text across machines (a real PostgreSQL): what one state directory archives, another
on the same shared database reads, as its owner session only; a log being written elsewhere is
named with where it runs; copies are capped per entry (head and tail, the middle reported
dropped) and per session; a raw log leaves its machine with its secrets masked in place.

Each test that takes ``machines`` runs twice: with the copies' bytes in the database, and in an
S3-compatible object store beside it (`tests.s3_support`)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from codemode.errors import HostFault, UnknownRefError
from codemode.state import Archive, ArchiveRef, State
from codemode.state import _capped as capped
from codemode.state import _shared_archive as shared_archive
from codemode.state._archive import READ_MAX_LIMIT
from codemode.state._objects import parse_object_store_url
from tests.s3_support import S3Server

SECRET = "ghp_" + "Q4w8E2r6T1y5U9i3O7p0A5s9D3f7G1h4J8k2"


@pytest.fixture(params=["database", "objects"])
def store(request: pytest.FixtureRequest) -> str | None:
    """Where the copies' bytes go: None (the database), or an archive store's URL."""
    return None if request.param == "database" else str(request.getfixturevalue("archive_url"))


@contextlib.contextmanager
def _two_machines(tmp_path: Path, database_url: str, store: str | None) -> Iterator[tuple[State, State]]:
    """Two state directories (two machines) on one shared database (and object store)."""
    a = State(tmp_path / "a", database_url=database_url, holder="11t1@place-a", archive_url=store)
    b = State(tmp_path / "b", database_url=database_url, holder="22t2@place-b", archive_url=store)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.fixture
def machines(tmp_path: Path, database_url: str, store: str | None) -> Iterator[tuple[State, State]]:
    """Two machines; their copies' bytes where ``store`` says."""
    with _two_machines(tmp_path, database_url, store) as both:
        yield both


_CAP_NAMES = {
    "entry": ("SHARED_ENTRY_BYTES", "OBJECT_ENTRY_BYTES"),
    "session": ("SESSION_SHARED_BYTES", "OBJECT_SESSION_BYTES"),
    "total": ("SHARED_TOTAL_BYTES", "OBJECT_TOTAL_BYTES"),
}


def _cap(monkeypatch: pytest.MonkeyPatch, which: str, value: int) -> None:
    """Set one of the copies' caps, whichever store holds their bytes."""
    for name in _CAP_NAMES[which]:
        monkeypatch.setattr(shared_archive, name, value)


def _object(server: S3Server, store: str, key: str) -> bytes:
    """The bytes of object ``key`` of the bucket ``store`` names, as the test server holds them."""
    answer = server.client().get_object(Bucket=parse_object_store_url(store).bucket, Key=key)
    return bytes(answer["Body"].read())


def _read_all(archive: Archive, ref: str, session_id: str | None, limit: int = READ_MAX_LIMIT) -> bytes:
    data, offset = b"", 0
    while True:
        page = archive.read(ref, offset, limit, session_id=session_id)
        data += page.data
        offset = page.next_offset
        if page.eof:
            return data


def test_text_archived_on_one_machine_is_read_on_another_by_its_session_only(
    machines: tuple[State, State],
) -> None:
    a, b = machines
    text = "".join(f"line {i}\n" for i in range(5000))
    ref = a.archive.put(text, kind="output", session_id="s1")
    assert a.archive.flush_copies()
    assert _read_all(b.archive, ref.ref, "s1") == text.encode()
    page = b.archive.read(ref.ref, 6, 10, session_id="s1")  # offsets are the entry's own
    assert page.data == text.encode()[6:16] and page.total_bytes == ref.total_bytes
    with pytest.raises(UnknownRefError) as stranger:
        b.archive.read(ref.ref, session_id="s2")
    with pytest.raises(UnknownRefError) as never:
        b.archive.read("ar_" + "x" * 20, session_id="s2")
    assert str(stranger.value).replace(ref.ref, "REF") == str(never.value).replace("ar_" + "x" * 20, "REF")
    assert b.has_session("s1") and not b.has_session("s2")


def test_a_log_is_named_with_its_machine_while_written_and_read_anywhere_once_finished(
    machines: tuple[State, State],
) -> None:
    a, b = machines
    writer = a.archive.open_log(kind="log", session_id="s1", redact=False)
    writer.write(b"building...\n")
    writer.flush()
    assert a.archive.flush_copies()
    with pytest.raises(UnknownRefError, match=r"still running on another machine \(11t1@place-a\)"):
        b.archive.read(writer.ref, session_id="s1")
    with pytest.raises(UnknownRefError, match="no archived text"):  # to a stranger: nothing at all
        b.archive.read(writer.ref, session_id="s2")
    writer.write(f"token={SECRET}\ndone\n".encode())
    writer.close()
    assert a.archive.flush_copies()
    here, there = _read_all(a.archive, writer.ref, "s1"), _read_all(b.archive, writer.ref, "s1")
    assert SECRET.encode() not in here and SECRET.encode() not in there
    assert there.startswith(b"building...\ntoken=") and there.endswith(b"\ndone\n")
    assert b.archive.read(writer.ref, 0, 1, session_id="s1").total_bytes == writer.bytes_written


def test_a_raw_log_leaves_its_machine_with_its_secrets_masked_in_place(
    machines: tuple[State, State], database_url: str, store: str | None, request: pytest.FixtureRequest
) -> None:
    a, _b = machines
    writer = a.archive.open_log(kind="log", session_id="s1", redact=False)
    raw = f"export GITHUB_TOKEN={SECRET}\nok\n".encode()
    writer.write(raw)
    writer.close()
    assert a.archive.flush_copies()
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT head, tail, raw, object_key FROM shared_archive WHERE ref = %s", (writer.ref,)
        ).fetchone()
    assert row is not None
    head, tail, is_raw, key = bytes(row[0]), bytes(row[1]), row[2], row[3]
    if store is not None:  # the bytes are the object's; the row holds none
        assert head == tail == b"" and key is not None
        head = _object(request.getfixturevalue("s3_server"), store, key)
    assert is_raw == 1 and tail == b""
    assert SECRET.encode() not in head and len(head) == len(raw)  # masked, every offset in place
    assert head.endswith(b"\nok\n") and b"[REDACTED:" in head


def _put_three_caps(a: State, monkeypatch: pytest.MonkeyPatch) -> tuple[int, bytes, ArchiveRef]:
    """A copy cap of 1 MiB, and an entry of 3 MiB of random bytes archived (and copied) on ``a``."""
    cap = 1024 * 1024
    _cap(monkeypatch, "entry", cap)
    blob = os.urandom(3 * cap)
    ref = a.archive.put(blob, kind="image", session_id="s1")
    assert a.archive.flush_copies()
    return cap, blob, ref


def test_a_copy_keeps_the_head_and_tail_of_a_big_entry_and_reports_its_middle_dropped(
    machines: tuple[State, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = machines
    cap, blob, ref = _put_three_caps(a, monkeypatch)
    first = b.archive.read(ref.ref, 0, READ_MAX_LIMIT, session_id="s1")
    assert blob.startswith(first.data) and len(first.data) >= cap // 4
    middle = b.archive.read(ref.ref, len(blob) // 2, 100, session_id="s1")
    assert middle.dropped is not None and middle.dropped[0] == len(blob) // 2
    assert middle.data == blob[middle.offset : middle.offset + 100]
    tail = _read_all(b.archive, ref.ref, "s1", limit=cap)
    assert len(tail) <= cap and blob.endswith(tail[len(first.data) :])
    # The whole entry is still a's to read.
    assert _read_all(a.archive, ref.ref, "s1") == blob


def test_where_holes_cannot_be_left_the_fetched_copy_keeps_its_tail(
    machines: tuple[State, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = machines
    _cap, blob, ref = _put_three_caps(a, monkeypatch)
    monkeypatch.setattr(capped, "holes_supported", lambda directory: False)
    page = b.archive.read(ref.ref, 0, 100, session_id="s1")
    assert page.dropped == (0, page.retained_from) and page.retained_from > 0
    assert page.data == blob[page.offset : page.offset + 100]
    assert _read_all(b.archive, ref.ref, "s1").endswith(blob[-1000:])


def test_a_sessions_copies_are_capped_oldest_first(
    machines: tuple[State, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = machines
    _cap(monkeypatch, "session", 250_000)
    refs = [a.archive.put(os.urandom(100_000), kind="image", session_id="s1").ref for _ in range(4)]
    other = a.archive.put(os.urandom(100_000), kind="image", session_id="s2").ref
    assert a.archive.flush_copies()
    for gone in refs[:2]:
        with pytest.raises(UnknownRefError):
            b.archive.read(gone, session_id="s1")
    for kept in refs[2:]:
        assert b.archive.read(kept, 0, 10, session_id="s1").data
    assert b.archive.read(other, 0, 10, session_id="s2").data  # another session's are its own


def test_copies_expire_with_the_archive(machines: tuple[State, State]) -> None:
    a, b = machines
    ref = a.archive.put("old", kind="output", session_id="s1")
    assert a.archive.flush_copies()
    with a.shared.connection() as conn:
        conn.execute(
            "INSERT INTO shared_processes (process_id, session_id, holder, command, state, started_at, ended_at,"
            " published_at) VALUES ('p_1', 's1', 'h', 'true', 'exited', 1, 2, 2)"
        )
    counts = a.maintain(now=2**40)
    assert counts["expired_copies"] == 1 and counts["expired_elsewhere"] == 1
    with pytest.raises(UnknownRefError):
        b.archive.read(ref.ref, session_id="s1")


def test_a_failing_shared_database_leaves_the_entry_readable_where_it_was_made(
    machines: tuple[State, State], database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = machines
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE shared_archive RENAME TO shared_archive_away")
    with caplog.at_level(logging.WARNING, logger="codemode.state"):
        ref = a.archive.put("still here", kind="output", session_id="s1")
        assert a.archive.flush_copies()
    assert a.archive.read(ref.ref, session_id="s1").data == b"still here"
    assert any(
        ref.ref in record.getMessage() and "not copied" in record.getMessage() for record in caplog.records
    )
    with pytest.raises(HostFault):  # another machine cannot look: never "no such reference"
        b.archive.read(ref.ref, session_id="s1")


def test_a_log_past_its_cap_is_copied_as_its_machine_kept_it(tmp_path: Path, database_url: str) -> None:
    cap = 1024 * 1024
    a = State(tmp_path / "a", database_url=database_url, holder="11t1@place-a", log_cap_bytes=cap)
    b = State(tmp_path / "b", database_url=database_url, holder="22t2@place-b")
    try:
        writer = a.archive.open_log(kind="log", session_id="s1", redact=False)
        lines = [f"{i:08d} {'x' * 90}\n".encode() for i in range(40_000)]  # 4 MB
        for line in lines:
            writer.write(line)
        result = writer.close()
        assert a.archive.flush_copies()
        assert result.dropped is not None
        for offset in (0, result.dropped[0] - 50, result.dropped[0] + 10, result.total_bytes - 300):
            here = a.archive.read(writer.ref, offset, 200, session_id="s1")
            there = b.archive.read(writer.ref, offset, 200, session_id="s1")
            assert (there.offset, there.data, there.dropped) == (here.offset, here.data, here.dropped)
        assert _read_all(b.archive, writer.ref, "s1") == _read_all(a.archive, writer.ref, "s1")
    finally:
        a.close()
        b.close()


def test_a_raw_logs_copy_masks_secrets_cut_by_its_edges_and_values_found_before_its_tail(
    machines: tuple[State, State], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy keeps a head and a tail of a big log: a token crossing the tail's first byte,
    and a password whose name is in the bytes the copy drops but whose value shows bare in the
    tail, are masked as a local read masks them."""
    a, b = machines
    cap = 1024 * 1024
    _cap(monkeypatch, "entry", cap)
    total = 3 * cap
    tail_start = total - cap // 2  # where the copy's tail begins (aligned already)
    password = "Kq8Wz3Lp5Rt7Ny2Vb4"
    writer = a.archive.open_log(kind="log", session_id="s1", redact=False)
    filler = b"x" * 99 + b"\n"
    written = 0

    def fill(up_to: int) -> None:
        nonlocal written
        while written + len(filler) <= up_to:
            writer.write(filler)
            written += len(filler)
        writer.write(b"y" * (up_to - written))
        written = up_to

    fill(2 * cap)
    line = f"\nexport DB_PASSWORD={password}\n".encode()
    writer.write(line)
    written += len(line)
    token_line = f"token: {SECRET}\n".encode()
    fill(tail_start - 20)  # the token crosses the tail's first byte
    writer.write(token_line)
    written += len(token_line)
    bare = f"connecting with {password}\n".encode()
    writer.write(bare)
    written += len(bare)
    fill(total)
    writer.close()
    assert a.archive.flush_copies()
    assert a.copies is not None
    copy = a.copies.fetch(writer.ref)  # what left the machine
    assert copy is not None and copy.tail_start == tail_start
    tail = copy.tail
    assert SECRET[-12:].encode() not in tail and password.encode() not in tail
    assert b"connecting with " in tail
    there = _read_all(b.archive, writer.ref, "s1")
    assert SECRET[-12:].encode() not in there and password.encode() not in there


def test_all_copies_are_capped_oldest_first(
    machines: tuple[State, State], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = machines
    _cap(monkeypatch, "total", 64 * 4096)  # checked every 4 KiB stored
    refs = [a.archive.put(os.urandom(100_000), kind="image", session_id=f"s{i}").ref for i in range(4)]
    assert a.archive.flush_copies()
    with pytest.raises(UnknownRefError):
        b.archive.read(refs[0], session_id="s0")
    assert b.archive.read(refs[3], 0, 10, session_id="s3").data


def test_copies_past_the_queue_are_not_made_and_say_so(
    machines: tuple[State, State], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    a, _b = machines
    monkeypatch.setattr(shared_archive.SharedArchive, "queue_bytes", 1000)
    with caplog.at_level(logging.WARNING, logger="codemode.state"):
        ref = a.archive.put(os.urandom(5000), kind="image", session_id="s1")
    assert a.copies is not None
    behind = f"archived text {ref.ref} is not copied to {a.copies.where}: {a.copies.where} is behind"
    assert any(record.getMessage().startswith(behind) for record in caplog.records), caplog.text
    assert len(a.archive.read(ref.ref, 0, 10_000, session_id="s1").data) == 5000


# With an object store: where the bytes are, what is read back, what goes when.


@pytest.fixture
def on_objects(tmp_path: Path, database_url: str, archive_url: str) -> Iterator[tuple[State, State]]:
    """Two machines whose copies' bytes are in an object store."""
    with _two_machines(tmp_path, database_url, archive_url) as both:
        yield both


def _keys(server: S3Server, store: str) -> list[str]:
    url = parse_object_store_url(store)
    answer = server.client().list_objects_v2(Bucket=url.bucket, Prefix=url.prefix)
    return sorted(item["Key"] for item in answer.get("Contents", []))


def _object_key(state: State, ref: str) -> str:
    with state.shared.connection() as conn:
        row = conn.execute("SELECT object_key FROM shared_archive WHERE ref = ?", (ref,)).fetchone()
    assert row is not None and row[0] is not None
    return str(row[0])


def test_an_object_stores_copy_that_was_changed_or_lost_is_refused_not_served(
    on_objects: tuple[State, State], archive_url: str, s3_server: S3Server
) -> None:
    a, b = on_objects
    refs = [a.archive.put(f"entry {i}\n" * 100, kind="output", session_id="s1").ref for i in range(2)]
    assert a.archive.flush_copies()
    bucket = parse_object_store_url(archive_url).bucket
    changed, lost = (_object_key(a, ref) for ref in refs)
    s3_server.client().put_object(Bucket=bucket, Key=changed, Body=b"entry 9\n" * 100)  # same size
    s3_server.client().delete_object(Bucket=bucket, Key=lost)
    with pytest.raises(HostFault, match=rf"holds a damaged copy of {refs[0]}"):
        b.archive.read(refs[0], session_id="s1")
    with pytest.raises(HostFault, match=rf"has lost the copy of {refs[1]}.*11t1@place-a"):
        b.archive.read(refs[1], session_id="s1")
    assert a.archive.read(refs[0], session_id="s1").data == b"entry 0\n" * 100  # its own, untouched


@pytest.mark.parametrize("prefix", ["archive", ""])
def test_copies_dropped_or_expired_take_their_objects_and_any_left_behind_but_nothing_else(
    tmp_path: Path, database_url: str, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, prefix: str
) -> None:
    """Only objects named as this store names them go, even in a bucket shared with others and
    named without a prefix."""
    bucket = s3_server.new_bucket()
    store = s3_server.url(bucket, prefix=prefix)
    a = State(tmp_path / "a", database_url=database_url, holder="11t1@place-a", archive_url=store)
    try:
        _cap(monkeypatch, "session", 250_000)
        refs = [a.archive.put(os.urandom(100_000), kind="image", session_id="s1").ref for _ in range(4)]
        assert a.archive.flush_copies()
        kept = sorted(_object_key(a, ref) for ref in refs[2:])
        assert _keys(s3_server, store) == kept  # the two oldest went with their rows
        folder = f"{prefix}/codemode-archive/" if prefix else "codemode-archive/"
        assert all(key.startswith(folder) for key in kept)
        client = s3_server.client()
        left = f"{folder}ar_{'L' * 20}.{'0' * 16}"  # as a write whose row failed would leave it
        others = [f"{folder}notes.txt", "backups/db.dump", "ar_xxxxxxxxxxxxxxxxxxxx.0000000000000000"]
        for key in (left, *others):
            client.put_object(Bucket=bucket, Key=key, Body=b"x")
        assert a.maintain(now=2**40)["expired_copies"] == 2
        assert a.archive.flush_copies()  # the objects go on the writer thread
        assert _keys(s3_server, store) == sorted(
            [key for key in others if key.startswith(parse_object_store_url(store).prefix)]
            + [f"{folder}last-sweep"]  # (when the last sweep began: see test_objects.py)
        )
        for key in others:
            assert client.head_object(Bucket=bucket, Key=key)["ContentLength"] == 1
    finally:
        a.close()


def test_a_server_without_the_store_keeps_its_own_copies_under_its_caps_and_no_others(
    on_objects: tuple[State, State], tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mid-way through turning a store on, servers of both kinds share the table: each kind of
    copy is capped apart, so one server's small caps do not drop the other's copies."""
    a, b = on_objects
    _cap(monkeypatch, "session", 250_000)
    monkeypatch.setattr(shared_archive, "OBJECT_SESSION_BYTES", 10**9)
    in_store = [a.archive.put(os.urandom(100_000), kind="image", session_id="s1").ref for _ in range(3)]
    assert a.archive.flush_copies()
    c = State(tmp_path / "c", database_url=database_url, holder="33t3@place-c")  # no store
    try:
        in_database = [
            c.archive.put(os.urandom(100_000), kind="image", session_id="s1").ref for _ in range(3)
        ]
        assert c.archive.flush_copies()
        for ref in in_store:  # none of the store's went for the database's cap
            assert len(b.archive.read(ref, 0, 10, session_id="s1").data) == 10
        with pytest.raises(UnknownRefError):  # its own oldest did
            b.archive.read(in_database[0], session_id="s1")
        assert len(b.archive.read(in_database[2], 0, 10, session_id="s1").data) == 10
    finally:
        c.close()


def test_a_strangers_read_reads_no_object_and_learns_nothing(
    on_objects: tuple[State, State], archive_url: str, s3_server: S3Server
) -> None:
    """Another session's reference is "no such text", whatever its object is like (damaged, or
    lost): the row's owner is checked before any byte is read."""
    a, b = on_objects
    ref = a.archive.put("s1's own\n" * 50, kind="output", session_id="s1").ref
    assert a.archive.flush_copies()
    bucket = parse_object_store_url(archive_url).bucket
    s3_server.client().put_object(Bucket=bucket, Key=_object_key(a, ref), Body=b"changed")
    never = "ar_" + "n" * 20
    for asked in (ref, never):
        with pytest.raises(UnknownRefError, match="no archived text") as refused:
            b.archive.read(asked, session_id="s2")
        assert "11t1" not in str(refused.value) and "codemode-archive" not in str(refused.value)
    with pytest.raises(HostFault, match="damaged"):  # its owner is told
        b.archive.read(ref, session_id="s1")


def test_a_failing_object_store_leaves_the_entry_readable_where_it_was_made(
    on_objects: tuple[State, State], archive_url: str, s3_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = on_objects
    before = a.archive.put("copied", kind="output", session_id="s1").ref
    assert a.archive.flush_copies()
    bucket = parse_object_store_url(archive_url).bucket
    client = s3_server.client()
    client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": k} for k in _keys(s3_server, archive_url)]}
    )
    client.delete_bucket(Bucket=bucket)  # the store fails every call from now on
    with caplog.at_level(logging.WARNING, logger="codemode.state"):
        ref = a.archive.put("still here", kind="output", session_id="s1")
        assert a.archive.flush_copies()
    assert a.archive.read(ref.ref, session_id="s1").data == b"still here"
    message = next(r.getMessage() for r in caplog.records if ref.ref in r.getMessage())
    assert "not copied" in message and "NoSuchBucket" in message and "codemode-test-secret" not in message
    with pytest.raises(UnknownRefError):  # no row was written: another machine has nothing
        b.archive.read(ref.ref, session_id="s1")
    with pytest.raises(HostFault, match=f"archive store s3://{bucket}/archive/ at http://127.0.0.1:"):
        b.archive.read(before, session_id="s1")  # its row is there, its object cannot be read


def test_a_copy_in_an_object_store_needs_the_store_to_be_read(
    on_objects: tuple[State, State], tmp_path: Path, database_url: str
) -> None:
    a, _b = on_objects
    ref = a.archive.put("where?", kind="output", session_id="s1").ref
    assert a.archive.flush_copies()
    c = State(tmp_path / "c", database_url=database_url, holder="33t3@place-c")  # no archive store
    try:
        with pytest.raises(HostFault, match=r"archive store this server was not given.*--archive-url-file"):
            c.archive.read(ref, session_id="s1")
    finally:
        c.close()
