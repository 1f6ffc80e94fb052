"""StreamCapture: exact head/tail, honest counts, bounded memory; shape_output."""

from __future__ import annotations

import io
import random
import subprocess
import tracemalloc

import pytest

from codemode.tools._capture import OMITTED_MARKER_RE, Excerpt, StreamCapture, shape_output


def _feed(cap: StreamCapture, data: bytes, sizes: list[int]) -> None:
    i = 0
    k = 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        cap.feed(data[i : i + n])
        i += n
        k += 1


def _numbered_lines(count: int) -> bytes:
    # Varying lengths, so the head and tail windows fall at different places within lines.
    return b"".join(b"line %d of the source%s\n" % (i, b"." * (i % 7)) for i in range(count))


@pytest.mark.parametrize(
    "sizes",
    [[1], [7, 13, 1], [4096], [65536], [1 << 20], [3, 50_000, 17, 9000]],
    ids=["1B", "mixed-small", "4KiB", "64KiB", "1MiB", "irregular"],
)
def test_head_and_tail_are_exact_slices_of_the_source(sizes: list[int]) -> None:
    source = _numbered_lines(20_000)  # about 570 KB
    cap = StreamCapture(head_bytes=1000, tail_bytes=2000)
    _feed(cap, source[:60_000] if sizes == [1] else source, sizes)
    if sizes == [1]:
        source = source[:60_000]
    ex = cap.excerpt()
    assert ex.truncated and cap.truncated
    assert ex.total_bytes == cap.total_bytes == len(source)
    # Head cut after the last newline within 1000 bytes; tail starts after a newline.
    head_len = source.rfind(b"\n", 0, 1000) + 1
    tail_start = source.find(b"\n", len(source) - 2000) + 1
    if source[len(source) - 2001 : len(source) - 2000] == b"\n":
        tail_start = len(source) - 2000
    assert ex.head_text == source[:head_len].decode()
    assert ex.tail_text == source[tail_start:].decode()
    assert ex.shown_bytes == head_len + (len(source) - tail_start)
    assert ex.omitted_bytes == tail_start - head_len == ex.total_bytes - ex.shown_bytes
    assert ex.omitted_lines == source[head_len:tail_start].count(b"\n")
    assert ex.text == f"{ex.head_text}{ex.marker}\n{ex.tail_text}"
    assert ex.marker == f"[... {ex.omitted_bytes:,} bytes ({ex.omitted_lines:,} lines) omitted ...]"
    # Lines are whole on both sides of the marker.
    assert ex.head_text.endswith("\n") and ex.head_text.split("\n")[-2].startswith("line ")
    assert ex.tail_text.startswith("line ")


def test_tail_aligned_on_a_line_start_keeps_its_first_line() -> None:
    source = b"a" * 99 + b"\n" + (b"b" * 99 + b"\n") * 30  # tail window starts exactly at a line
    cap = StreamCapture(head_bytes=100, tail_bytes=200)
    _feed(cap, source, [37])
    ex = cap.excerpt()
    assert ex.tail_text == ("b" * 99 + "\n") * 2
    assert ex.head_text == "a" * 99 + "\n"


def test_not_truncated_is_the_whole_text() -> None:
    source = b"\x1b[32mgreen\x1b[0m\n" + b"x" * 500 + b"\n"
    for total_limit in (len(source), len(source) + 1):
        cap = StreamCapture(head_bytes=total_limit // 2, tail_bytes=total_limit - total_limit // 2)
        _feed(cap, source, [5])
        ex = cap.excerpt()
        assert not ex.truncated and not cap.truncated
        assert ex.text == ex.head_text == "green\n" + "x" * 500 + "\n"
        assert ex.tail_text == "" and ex.marker == ""
        assert ex.shown_bytes == ex.total_bytes == len(source) and ex.omitted_bytes == 0


def test_one_byte_over_is_truncated() -> None:
    cap = StreamCapture(head_bytes=10, tail_bytes=10)
    cap.feed(b"0123456789abcdefghijK")
    ex = cap.excerpt()
    assert ex.truncated and ex.omitted_bytes == 1
    assert ex.head_text == "0123456789" and ex.tail_text == "bcdefghijK"
    assert ex.marker == "[... 1 bytes omitted ...]"


def test_empty_stream() -> None:
    ex = StreamCapture().excerpt()
    assert ex == Excerpt(
        text="", total_bytes=0, shown_bytes=0, omitted_bytes=0, truncated=False, head_text="", tail_text=""
    )


def test_marker_note_and_regex() -> None:
    cap = StreamCapture(head_bytes=100, tail_bytes=100)
    cap.feed(_numbered_lines(1000))
    ex = cap.excerpt(note="full log: read_archive ref log-1")
    assert ex.marker.endswith("omitted; full log: read_archive ref log-1 ...]")
    assert OMITTED_MARKER_RE.search(ex.text)
    assert OMITTED_MARKER_RE.search(cap.excerpt().text)
    assert not OMITTED_MARKER_RE.search("[... not a marker ...]")


def test_real_process_output_through_a_pipe() -> None:
    cap = StreamCapture()
    with subprocess.Popen(["seq", "1", "1000000"], stdout=subprocess.PIPE) as proc:
        assert isinstance(proc.stdout, io.BufferedReader)  # buffered: read1 returns what is there
        while chunk := proc.stdout.read1(65536):
            cap.feed(chunk)
    assert proc.returncode == 0
    ex = cap.excerpt()
    assert ex.total_bytes == len(b"".join(b"%d\n" % i for i in range(1, 1_000_001)))
    head_lines = ex.head_text.splitlines()
    tail_lines = ex.tail_text.splitlines()
    assert head_lines[:3] == ["1", "2", "3"]
    assert tail_lines[-1] == "1000000"
    # Every line is either shown or counted as omitted, none twice.
    assert int(tail_lines[0]) == int(head_lines[-1]) + ex.omitted_lines + 1
    assert len(head_lines) + len(tail_lines) + ex.omitted_lines == 1_000_000


def test_100mb_single_line_bounded_memory() -> None:
    block = b"x" * 65536
    cap = StreamCapture()
    tracemalloc.start()
    try:
        cap.feed(b"START")
        for _ in range(100 * 1024 * 1024 // len(block)):
            cap.feed(block)
        cap.feed(b"END")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024  # the 16 KiB head and at most 2 x 16 KiB of tail, plus chunk copies
    assert len(cap._head) == 16384 and len(cap._tail) <= 2 * 16384
    ex = cap.excerpt()
    assert ex.head_text == "START" + "x" * (16384 - 5)
    assert ex.tail_text == "x" * (16384 - 3) + "END"
    assert ex.total_bytes == 100 * 1024 * 1024 + 8
    assert ex.omitted_lines == 0
    assert ex.marker == f"[... {ex.total_bytes - 32768:,} bytes omitted ...]"


def test_cjk_cut_mid_character_never_shows_replacement() -> None:
    text = "漢字かな交じり文" * 3000  # 3-byte UTF-8 characters, no newline
    source = text.encode()
    for head, tail in ((1000, 1000), (1001, 1001), (1002, 1003)):
        cap = StreamCapture(head_bytes=head, tail_bytes=tail)
        _feed(cap, source, [4097])
        ex = cap.excerpt()
        assert "\ufffd" not in ex.text
        assert text.startswith(ex.head_text) and text.endswith(ex.tail_text)
        assert len(ex.head_text) == head // 3 and len(ex.tail_text) == tail // 3
        assert ex.shown_bytes == len(ex.head_text.encode()) + len(ex.tail_text.encode())
        assert ex.omitted_bytes == len(source) - ex.shown_bytes


def test_four_byte_characters_at_the_cut() -> None:
    source = "🙂".encode() * 1000
    cap = StreamCapture(head_bytes=102, tail_bytes=101)
    cap.feed(source)
    ex = cap.excerpt()
    assert ex.head_text == "🙂" * 25 and ex.tail_text == "🙂" * 25


def test_random_binary_and_progress_through_capture() -> None:
    rng = random.Random(7)
    blob = bytes(rng.randrange(256) for _ in range(200_000))
    cap = StreamCapture(head_bytes=4096, tail_bytes=4096)
    _feed(cap, blob, [1000, 3333])
    ex = cap.excerpt()
    assert ex.truncated and ex.omitted_bytes + ex.shown_bytes == len(blob)
    assert all(ch in "\n\t" or ord(ch) >= 0x20 for ch in ex.head_text + ex.tail_text)

    progress = b"".join(b"\rfetching %3d%%" % i for i in range(101)) + b"\ndone\n"
    cap = StreamCapture()
    cap.feed(progress)
    assert cap.excerpt().text == "fetching 100%\ndone\n"


def test_negative_sizes_rejected() -> None:
    with pytest.raises(ValueError, match="head_bytes and tail_bytes"):
        StreamCapture(head_bytes=-1)


def _ex(raw: bytes) -> Excerpt:
    cap = StreamCapture()
    cap.feed(raw)
    return cap.excerpt()


def test_shape_output() -> None:
    def shape(out: bytes, err: bytes) -> list[str]:
        return shape_output(_ex(out).text, _ex(err).text)

    assert shape(b"out\n", b"err\n") == ["out", "err"]  # one block per stream
    assert shape(b"", b"only err\n\n") == ["only err"]
    assert shape(b"  indented\n", b"") == ["  indented"]
    assert shape(b"", b"") == []
    assert shape(b"\n\n", b"\x1b[31merror\x1b[0m\n") == ["error"]
