"""What the shared PostgreSQL database costs beside the state directory's SQLite, per operation a
call makes on the stores sessions share.

Run: ``python -m bench.bench_state [--rounds 5] [--ops 300]``. It starts a throw-away PostgreSQL
cluster (``initdb``/``pg_ctl``, a Unix socket, as `tests/postgres_support.py` does) or uses
``CODEMODE_DATABASE_URL``. Each round times every operation on both backends, in turn, the
order rotated round by round; it prints the median per operation of the rounds' medians, the
ratio, and the machine's load beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codemode.state import State

Operation = Callable[[State, int], object]

_OUTPUT = ("row " * 20 + "\n") * 120  # ~10 KB: an output cut and archived


def _store_set(state: State, i: int) -> object:
    state.values.set("s1", f"k{i % 50}", f'{{"n": {i}}}')
    return None


def _store_get(state: State, i: int) -> object:
    return state.values.get("s1", f"k{i % 50}")


def _run_record(state: State, i: int) -> object:
    state.runs.record("s1", f"c{i}-{time.monotonic_ns()}", '{"ok": true}', "0" * 64)
    return state.runs.get("s1", "missing")


def _archive_put(state: State, i: int) -> object:
    return state.archive.put(_OUTPUT, kind="output", session_id="s1")


OPERATIONS: dict[str, Operation] = {
    "store.set": _store_set,
    "store.get": _store_get,
    "run record + a miss": _run_record,
    "archive put 10 KB": _archive_put,
}


def _median_us(state: State, op: Operation, n: int) -> float:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        op(state, i)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=300)
    args = parser.parse_args()
    cluster = None
    url = os.environ.get("CODEMODE_DATABASE_URL")
    if url is None:
        from tests.postgres_support import start_cluster

        cluster = start_cluster()
        url = cluster.new_schema()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            backends = {
                "sqlite": State(Path(tmp) / "local"),
                "postgres": State(Path(tmp) / "shared", database_url=url, holder="bench"),
            }
            results: dict[str, dict[str, list[float]]] = {name: {} for name in OPERATIONS}
            for round_no in range(args.rounds):
                order = list(backends) if round_no % 2 == 0 else list(reversed(backends))
                for name, op in OPERATIONS.items():
                    for backend in order:
                        results[name].setdefault(backend, []).append(
                            _median_us(backends[backend], op, args.ops)
                        )
            for state in backends.values():
                state.close()
    finally:
        if cluster is not None:
            cluster.stop()
    load = os.getloadavg()
    print(f"The shared stores per operation, µs (median of {args.rounds} rotated rounds of {args.ops})")
    print(f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; PostgreSQL on a local Unix socket")
    print(f"{'operation':28} {'sqlite':>10} {'postgres':>10} {'ratio':>7}")
    for name, by_backend in results.items():
        sqlite_us = statistics.median(by_backend["sqlite"])
        pg_us = statistics.median(by_backend["postgres"])
        print(f"{name:28} {sqlite_us:10.0f} {pg_us:10.0f} {pg_us / sqlite_us:6.1f}x")


if __name__ == "__main__":
    main()
