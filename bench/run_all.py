"""Run every benchmark in this directory, one after another, each in its own process.

    python bench/run_all.py [--quick]

Each script prints its numbers beside a baseline measured in the same run (machines are
noisy; ratios travel better than absolute times).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    env = dict(os.environ)
    shared = HERE.parent.parent / "shared" / "tiktoken-cache"
    if "TIKTOKEN_CACHE_DIR" not in env and shared.is_dir():
        env["TIKTOKEN_CACHE_DIR"] = str(shared)
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"\n=== {script.name}", flush=True)
        done = subprocess.run([sys.executable, str(script), *sys.argv[1:]], env=env, check=False)
        if done.returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
