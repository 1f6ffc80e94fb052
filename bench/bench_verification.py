"""What reading a verification command's whole stream costs, against a plain capture in the same run.

A test command's output passes a :class:`ScannedCapture` (capture plus :class:`StreamScan`: failing
tests' names, and go/cargo tallies), every other command's a plain :class:`StreamCapture`. Feeds
``total_MiB`` of each runner's typical per-test lines (1 MiB chunks, as the pump reads them; one
line in 50 a failure, a worst case: most runs fail a handful) through both and prints MB/s and the ratio. Also times one
``parse_verification`` of a cut excerpt.

Run: ``PYTHONPATH=. python bench/bench_verification.py [total_MiB]``
"""

from __future__ import annotations

import sys
import time

from codemode.tools._capture import StreamCapture
from codemode.tools._verification import (
    Classification,
    ScannedCapture,
    classify_command,
    parse_verification,
    scan_for,
)

CHUNK = 1 << 20

LINES = {
    "pytest -v": (
        b"tests/test_mod.py::test_case_%d PASSED  [ 42%%]\n",
        b"tests/test_mod.py::test_case_%d FAILED  [ 42%%]\n",
    ),
    "cargo test": (b"test tests::case_%d ... ok\n", b"test tests::case_%d ... FAILED\n"),
    "go test -v ./...": (b"--- PASS: TestCase%d (0.00s)\n", b"    --- FAIL: TestCase%d/sub (0.00s)\n"),
    "go test -json ./...": (
        b'{"Time":"2026-12-03T12:00:00Z","Action":"output","Package":"p","Test":"T%d","Output":"x\\n"}\n',
        b'{"Time":"2026-12-03T12:00:00Z","Action":"fail","Package":"p","Test":"T%d","Elapsed":0}\n',
    ),
}


def _chunks(ok: bytes, bad: bytes, total: int) -> list[bytes]:
    data = bytearray()
    i = 0
    while len(data) < 8 * CHUNK:
        data += (bad if i % 50 == 7 else ok) % i
        i += 1
    base = bytes(data)
    # Distinct names per chunk would need fresh data; reuse eight chunks, so names repeat after
    # those (the scan's set stays small, as in a run that prints each failure once).
    return [base[(k % 8) * CHUNK : (k % 8 + 1) * CHUNK] for k in range(total // CHUNK)]


def _best(fn: object, repeat: int = 3) -> float:
    assert callable(fn)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    total = (int(sys.argv[1]) if len(sys.argv) > 1 else 256) * CHUNK
    print(f"{total // CHUNK} MiB per run, 1 MiB chunks; best of 3")
    for command, (ok, bad) in LINES.items():
        chunks = _chunks(ok, bad, total)
        cls = classify_command(command)

        def plain(chunks: list[bytes] = chunks) -> None:
            cap = StreamCapture()
            for c in chunks:
                cap.feed(c)

        def scanned(chunks: list[bytes] = chunks, cls: Classification | None = cls) -> None:
            scan = scan_for(cls)
            assert scan is not None
            cap = ScannedCapture(scan, 0)
            for c in chunks:
                cap.feed(c)
            assert cls is not None
            parse_verification(cls, cap.excerpt().text, 1, scan)

        t_plain, t_scan = _best(plain), _best(scanned)
        mb = total / 1e6
        print(
            f"{command:22} plain {mb / t_plain:8.0f} MB/s   scanned {mb / t_scan:6.0f} MB/s   "
            f"ratio {t_scan / t_plain:5.1f}x"
        )
    cap = StreamCapture()
    for c in _chunks(*LINES["cargo test"], 16 * CHUNK):
        cap.feed(c)
    text = cap.excerpt().text
    cls = classify_command("cargo test")
    assert cls is not None
    cargo = cls
    t = _best(lambda: parse_verification(cargo, text, 101), 20)
    print(f"parse_verification of a cut 32 KiB excerpt: {t * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
