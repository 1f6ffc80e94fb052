"""Run every benchmark in this directory, one after another, each in its own process.

    python bench/run_all.py [--quick]

Each script prints its numbers beside a baseline measured in the same run (machines are
noisy; ratios travel better than absolute times). ``--quick`` runs each on less work: the
scripts that take ``--quick`` themselves get it, the others the smaller sizes in `QUICK`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# What --quick means for the scripts that size their work with their own arguments.
QUICK: dict[str, list[str]] = {
    "bench_approval.py": ["10"],
    "bench_archive.py": ["--log-mb", "128", "--entry-mb", "20"],
    "bench_bash.py": ["--gb", "0.25", "--background", "20", "--true-runs", "100", "--read-rounds", "10"],
    "bench_capture.py": ["256"],
    "bench_cold.py": ["5"],
    "bench_redact.py": ["--mb", "20"],
    "bench_verification.py": ["64"],
}


def _arguments(script: str, quick: bool) -> list[str]:
    if not quick:
        return []
    return QUICK.get(script, ["--quick"])


def main() -> int:
    env = dict(os.environ)
    shared = HERE.parent.parent / "shared" / "tiktoken-cache"
    if "TIKTOKEN_CACHE_DIR" not in env and shared.is_dir():
        env["TIKTOKEN_CACHE_DIR"] = str(shared)
    quick = "--quick" in sys.argv[1:]
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"\n=== {script.name}", flush=True)
        command = [sys.executable, str(script), *_arguments(script.name, quick)]
        done = subprocess.run(command, env=env, check=False)
        if done.returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
