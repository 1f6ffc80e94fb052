"""Throughput of StreamCapture.feed against baselines measured in the same run.

Feeds 1 GiB (64 KiB chunks of newline-rich text) through a StreamCapture with the default
head/tail sizes, and compares with (a) just iterating the same chunks and (b) writing them to a
file. Also feeds the same volume in 4 KiB chunks, as pipes often deliver, and reports the
tracemalloc peak during a capture run and the cost of one excerpt().

Run: ``PYTHONPATH=. python bench/bench_capture.py [total_MiB]``
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import tracemalloc

from codemode.tools._capture import StreamCapture

CHUNK = 64 * 1024


def _chunks(total: int) -> list[bytes]:
    # A handful of distinct chunks, reused, so the data set itself does not dominate memory.
    line = b"2026-12-02 14:00:00 INFO worker[17] processed item 123456 in 0.42 ms status=ok\n"
    block = (line * (CHUNK // len(line) + 1))[:CHUNK]
    variants = [block[i:] + block[:i] for i in range(0, 64 * 16, 16)]
    count = total // CHUNK
    return [variants[i % len(variants)] for i in range(count)]


def _best(fn: object, repeat: int) -> float:
    assert callable(fn)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    total_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    chunks = _chunks(total_mib * 1024 * 1024)
    nbytes = len(chunks) * CHUNK

    def iterate() -> None:
        n = 0
        for c in chunks:
            n += len(c)

    def capture() -> None:
        cap = StreamCapture()
        feed = cap.feed
        for c in chunks:
            feed(c)
        assert cap.total_bytes == nbytes

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "log")

        def write_file() -> None:
            with open(path, "wb") as f:
                for c in chunks:
                    f.write(c)

        small = [c[i : i + 4096] for c in chunks[:64] for i in range(0, CHUNK, 4096)]
        small_chunks = [small[i % len(small)] for i in range(nbytes // 4096)]

        def capture_small() -> None:
            cap = StreamCapture()
            feed = cap.feed
            for c in small_chunks:
                feed(c)

        t_iter = _best(iterate, 3)
        t_cap = _best(capture, 3)
        t_file = _best(write_file, 2)
        t_small = _best(capture_small, 2)

    tracemalloc.start()
    cap = StreamCapture()
    for c in chunks:
        cap.feed(c)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    start = time.perf_counter()
    ex = cap.excerpt()
    t_excerpt = time.perf_counter() - start

    mb = nbytes / 1e6
    print(f"data: {nbytes / 2**20:.0f} MiB in {len(chunks)} chunks of {CHUNK // 1024} KiB")
    print(f"iterate only : {mb / t_iter:10.0f} MB/s  ({t_iter * 1000:.1f} ms)")
    print(f"StreamCapture: {mb / t_cap:10.0f} MB/s  ({t_cap * 1000:.1f} ms)")
    print(f"write to file: {mb / t_file:10.0f} MB/s  ({t_file * 1000:.1f} ms)")
    print(f"StreamCapture, 4 KiB chunks: {mb / t_small:10.0f} MB/s  ({t_small * 1000:.1f} ms)")
    print(f"capture / iterate time ratio: {t_cap / t_iter:.1f}x")
    print(f"capture / file-write time ratio: {t_cap / t_file:.2f}x")
    print(f"tracemalloc peak while feeding: {peak / 1024:.0f} KiB")
    print(f"excerpt(): {t_excerpt * 1000:.2f} ms, {len(ex.text)} chars, marker {ex.marker}")


if __name__ == "__main__":
    main()
