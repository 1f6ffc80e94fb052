"""The benchmarks' short mode for CI: every trick of bench/bench_tricks.py timed briefly on its
path, with the trick and the plain way, in the same run. Exits 1 when a guarded trick's path
is more than 2x slower than its plain path: the trick then costs instead of paying, whatever
the machine's speed (both sides ran on the same machine, in rotated order). Tricks not shown to
pay yet (bench/TRICKS.md) are printed, not gated. A trick over the limit is measured again,
longer, in the same run, and fails only if it is over the limit again.

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
RECHECK_ROUNDS = 5  # a trick over the limit is measured again this long before it fails CI
RECHECK_SCALE = 0.5


def main() -> int:
    results = asyncio.run(measure(ROUNDS, SCALE))
    report(results, ROUNDS)
    slow = [m for m in results if m.trick.guarded and m.on > LIMIT * m.off]
    if slow:
        # A few microseconds timed briefly on two busy shared cores can come out 2x either way
        # (the eager first step: -50% and +155% in two runs of one afternoon). A path is failed
        # only when a second, longer measurement in the same run says it too.
        print(f"smoke: {', '.join(m.trick.name for m in slow)} over {LIMIT:g}x; measured again, longer")
        again = asyncio.run(measure(RECHECK_ROUNDS, RECHECK_SCALE))
        report(again, RECHECK_ROUNDS)
        still = {m.trick.name for m in again if m.trick.guarded and m.on > LIMIT * m.off}
        slow = [m for m in again if m.trick.name in still and m.trick.name in {s.trick.name for s in slow}]
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
