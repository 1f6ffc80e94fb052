"""Cold start: `codemode run` of print(1) as a fresh process, beside Python's own start and the
import of codemode, measured in the same run (medians, rotating order).

Target (issue 14): <= 250 ms.

    PYTHONPATH=. python bench/bench_cold.py [N]
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp, "p.js")
        program.write_text("print(1)\n")
        (Path(tmp) / "ws").mkdir()
        env = {**os.environ, "CODEMODE_HOME": str(Path(tmp, "state"))}
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import codemode'": [sys.executable, "-c", "import codemode"],
            "codemode run print(1)": [
                sys.executable,
                "-m",
                "codemode",
                "run",
                str(program),
                "--workspace",
                str(Path(tmp, "ws")),
            ],
        }
        subprocess.run(
            cases["codemode run print(1)"], env=env, check=True, capture_output=True
        )  # state dir, pycs
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(n):
            order = list(cases)
            random.shuffle(order)
            for name in order:
                start = time.perf_counter()
                subprocess.run(cases[name], env=env, check=True, capture_output=True)
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["python -c pass"])
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:30s} {median * 1e3:7.0f} ms   {median / base:5.1f}x python's own start")
    print("target: codemode run print(1) <= 250 ms")


if __name__ == "__main__":
    main()
