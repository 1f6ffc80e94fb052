"""Shaping throughput of clean_terminal_text, before and after, measured in the same run.

"Before" is the module as it was before the virtual screen (``git show REV:codemode/tools/
_terminal.py`` loaded from a temporary file; REV defaults to the last commit with the
line-level-only module); "after" is the one in this tree. Each kind of output is cut into
32 KiB pieces, the size of a ``bash`` excerpt or ``read`` page, and every piece is shaped:

* plain: build-log lines, no escapes;
* colour: the same with SGR colour on every line (pytest/cargo style);
* cr-progress: a progress bar redrawn with carriage returns and ``ESC[K`` (pip/curl style);
* spinner: a backspace spinner after a status word (``|/-\\`` redrawn in place);
* redraw: a docker-pull style display of 8 layers, each frame moving up with ``ESC[8A`` and
  rewriting every line (the screen path after; dropped motion, every frame kept, before);
* tui: a full-screen program on the alternate screen (CUP, ED, scroll region).

When pyte is importable (it is not a dependency: ``pip install pyte`` to compare), its
HistoryScreen of the same size is timed on the same pieces too, as the library alternative.

Run: ``PYTHONPATH=. python bench/bench_terminal.py [total_MiB] [--before REV] [--quick]``
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from codemode.tools import _terminal as after

BEFORE_REV = "323c9b8"  # main before the virtual screen
PIECE = 32 * 1024


def _load_before(rev: str) -> ModuleType:
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(
        ["git", "show", f"{rev}:codemode/tools/_terminal.py"], cwd=root, capture_output=True, check=True
    ).stdout
    with tempfile.NamedTemporaryFile("wb", suffix="_terminal_before.py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("_terminal_before", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    Path(f.name).unlink()
    return module


def _plain(total: int) -> bytes:
    lines = [
        f"2026-12-02 14:00:{i % 60:02d} INFO worker[{i % 32}] processed item {i} in 0.{i % 97:02d} ms status=ok\n"
        for i in range(2000)
    ]
    block = "".join(lines).encode()
    return (block * (total // len(block) + 1))[:total]


def _colour(total: int) -> bytes:
    lines = [
        f"\x1b[32mPASSED\x1b[0m tests/test_mod{i % 50}.py::test_case_{i} \x1b[2m[{i % 100:3d}%]\x1b[0m\n"
        if i % 7
        else f"\x1b[1;31mFAILED\x1b[0m tests/test_mod{i % 50}.py::test_case_{i} - \x1b[31mAssertionError\x1b[0m\n"
        for i in range(2000)
    ]
    block = "".join(lines).encode()
    return (block * (total // len(block) + 1))[:total]


def _cr_progress(total: int) -> bytes:
    parts = []
    for n in range(200):
        for i in range(0, 101, 2):
            bar = "#" * (i // 4)
            parts.append(f"\r\x1b[Kpkg-{n} [{bar:<25}] {i:3d}% {i * 37 % 1000} kB/s")
        parts.append("\n")
    block = "".join(parts).encode()
    return (block * (total // len(block) + 1))[:total]


def _spinner(total: int) -> bytes:
    parts = []
    spinner = "|/-\\"
    for n in range(200):
        parts.append(f"building crate-{n} ")
        for i in range(40):
            parts.append(f"{spinner[i % 4]}\x08")
        parts.append("done\n")
    block = "".join(parts).encode()
    return (block * (total // len(block) + 1))[:total]


def _redraw(total: int) -> bytes:
    layers = 8
    parts = [f"{k:012x}: Waiting\n" for k in range(layers)]
    for frame in range(400):
        parts.append(f"\x1b[{layers}A")
        for k in range(layers):
            done = min(100, frame * (k + 1) % 101)
            bar = "=" * (done // 4) + ">"
            parts.append(f"\x1b[2K\r{k:012x}: Downloading [{bar:<26}] {done}MB/100MB\n")
    block = "".join(parts).encode()
    return (block * (total // len(block) + 1))[:total]


def _tui(total: int) -> bytes:
    parts = ["\x1b[?1049h\x1b[H\x1b[2J\x1b[2;23r"]
    for frame in range(300):
        parts.append(
            f"\x1b[1;1H\x1b[7m top - {frame:05d} up 3 days, load average: 0.{frame % 100:02d}\x1b[K\x1b[m"
        )
        parts.append("\x1b[23;1H\n")  # scroll the region by one
        parts.append(
            f"\x1b[22;1H  {frame:5d} user  20   0  {frame * 13 % 9999:6d}  S  0.{frame % 10}  python3\x1b[K"
        )
        parts.append(f"\x1b[24;1H\x1b[1mq\x1b[m quit  \x1b[1mh\x1b[m help  frame {frame}\x1b[K")
    parts.append("\x1b[r\x1b[?1049l")
    block = "".join(parts).encode()
    return (block * (total // len(block) + 1))[:total]


def _pyte() -> ModuleType | None:
    try:
        return importlib.import_module("pyte")
    except ImportError:
        return None


def _feed_pyte(pyte: ModuleType, pieces: list[bytes]) -> None:
    for p in pieces:
        screen = pyte.HistoryScreen(80, 24, history=100_000)
        pyte.Stream(screen).feed(p.decode("utf-8", errors="replace"))


def _pieces(data: bytes) -> list[bytes]:
    return [data[i : i + PIECE] for i in range(0, len(data), PIECE)]


def _screen_count(pieces: list[bytes], view: after.TerminalView) -> int:
    """How many pieces took the screen path (counted by wrapping the module's renderer)."""
    render = after._render_screen
    count = 0

    def counting(data: bytes, view: after.TerminalView) -> str:
        nonlocal count
        count += 1
        return render(data, view)

    after._render_screen = counting
    try:
        for p in pieces:
            after.clean_terminal_text(p, view)
    finally:
        after._render_screen = render
    return count


def _best_pair(first: Callable[[], object], second: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best times of two functions, run in turns so that load from elsewhere hits both alike."""
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for i, fn in enumerate((first, second)):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best[0], best[1]


def main() -> None:
    args = sys.argv[1:]
    rev = BEFORE_REV
    if "--before" in args:
        i = args.index("--before")
        rev = args[i + 1]
        del args[i : i + 2]
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    total_mib = int(args[0]) if args else (4 if quick else 32)
    total = total_mib * 1024 * 1024
    before = _load_before(rev)
    kinds = {
        "plain": _plain(total),
        "colour": _colour(total),
        "cr-progress": _cr_progress(total),
        "spinner": _spinner(total // 4),
        "redraw": _redraw(total // 4),
        "tui": _tui(total // 4),
    }
    repeat = 3 if quick else 5
    pyte = _pyte()
    print(
        f"pieces of {PIECE // 1024} KiB; before = {rev}:codemode/tools/_terminal.py; best of {repeat}, run in turns"
    )
    print(
        f"{'output':<12} {'MiB':>5} {'before MB/s':>12} {'after MB/s':>11} {'after/before':>13}  path after"
    )
    for name, data in kinds.items():
        pieces = _pieces(data)
        view = after.TerminalView()
        screen = _screen_count(pieces, view)

        def run_before(pieces: list[bytes] = pieces) -> None:
            for p in pieces:
                before.clean_terminal_text(p)

        def run_after(pieces: list[bytes] = pieces, view: after.TerminalView = view) -> None:
            for p in pieces:
                after.clean_terminal_text(p, view)

        t_before, t_after = _best_pair(run_before, run_after, repeat)
        mb = len(data) / 1e6
        path = (
            "screen" if screen == len(pieces) else "line" if not screen else f"screen {screen}/{len(pieces)}"
        )
        print(
            f"{name:<12} {len(data) / 2**20:5.0f} {mb / t_before:12.1f} {mb / t_after:11.1f} "
            f"{t_before / t_after:12.2f}x  {path}"
        )
        if pyte is not None:
            sample = pieces[: max(1, len(pieces) // 16)]  # pyte is slow: a sixteenth is enough
            t_pyte = _best_pair(lambda s=sample: _feed_pyte(pyte, s), lambda: None, 1)[0]
            size = sum(map(len, sample)) / 1e6
            print(f"{'':<12} {'':>5} {'pyte':>12} {size / t_pyte:11.2f}")


if __name__ == "__main__":
    main()
