"""The benchmarks' short mode for CI: every trick of bench/bench_tricks.py timed briefly on its
path, with the trick and the plain way, in the same run. Exits 1 when a guarded trick's path
is more than 2x slower than its plain path: the trick then costs instead of paying, whatever
the machine's speed (both sides ran on the same machine, in rotated order). Tricks not shown to
pay yet (bench/TRICKS.md) are printed, not gated.

    PYTHONPATH=. python -m bench.smoke      (or: python bench/smoke.py)
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tricks import load, measure, report

LIMIT = 2.0  # a trick's path may take at most this many times its plain path
ROUNDS = 3
SCALE = 0.25


def main() -> int:
    results = asyncio.run(measure(ROUNDS, SCALE))
    report(results, ROUNDS)
    slow = [m for m in results if m.trick.guarded and m.on > LIMIT * m.off]
    for m in slow:
        print(
            f"smoke: {m.trick.name} ({m.trick.where}) made its path {m.on / m.off:.1f}x slower than the "
            f"plain way ({m.on * 1e6:.1f} us vs {m.off * 1e6:.1f} us, {load()})",
            file=sys.stderr,
        )
    return 1 if slow else 0


if __name__ == "__main__":
    os.environ.setdefault("CODEMODE_TIKTOKEN_DOWNLOAD", "0")
    sys.exit(main())
