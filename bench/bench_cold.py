"""Cold start: `codemode run` of print(1) as a fresh process, beside Python's own start and the
import of codemode, measured in the same run (medians, rotating order).

Target (issue 14): <= 250 ms.

    PYTHONPATH=. python bench/bench_cold.py [N]
"""

from __future__ import annotations

import compileall
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import codemode


def cases(tmp: Path) -> dict[str, list[str]]:
    """The commands timed: Python's own start, the import, and `codemode run` of print(1)."""
    program = Path(tmp, "p.js")
    program.write_text("print(1)\n")
    Path(tmp, "ws").mkdir(exist_ok=True)
    return {
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


def measure(commands: dict[str, list[str]], n: int, tmp: Path) -> dict[str, float]:
    """Median seconds of each command as a fresh process, in a shuffled order each round."""
    env = {**os.environ, "CODEMODE_HOME": str(Path(tmp, "state"))}
    # An installed package has its bytecode compiled (pip does it); an editable checkout run
    # with PYTHONDONTWRITEBYTECODE=1 (as CI and this machine set it) would otherwise compile
    # every module it edited since from source at each start.
    compileall.compile_dir(str(Path(codemode.__file__).parent), quiet=1)
    for command in commands.values():  # the state directory
        subprocess.run(command, env=env, check=True, capture_output=True)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(n):
        order = list(commands)
        random.shuffle(order)
        for name in order:
            start = time.perf_counter()
            subprocess.run(commands[name], env=env, check=True, capture_output=True)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(samples) for name, samples in times.items()}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.TemporaryDirectory() as tmp:
        medians = measure(cases(Path(tmp)), n, Path(tmp))
    base = medians["python -c pass"]
    for name, median in medians.items():
        print(f"{name:30s} {median * 1e3:7.0f} ms   {median / base:5.1f}x python's own start")
    print("target: codemode run print(1) <= 250 ms")


if __name__ == "__main__":
    main()
