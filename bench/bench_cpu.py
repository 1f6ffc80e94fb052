"""CPU-bound JS: a primes loop through `Host.run_code`, beside the same engine's bare context, the
QuickJS builds a user could install instead, and node, in the same run (rotating order, medians).

Target (issue 14): within 1.2x of the fastest QuickJS build from a maintained package. The
peers are measured when installed: the quickjs-ng binding's PyPI wheel (``pip install
quickjs-ng``; it builds the engine as a shared object whose internal calls go through the
PLT) and jsbox (``pip install jsbox``: QuickJS-ng through rquickjs, linked statically).
codemode links QuickJS-ng statically with hidden visibility (setup.py).

    python bench/bench_cpu.py [--quick]
"""

from __future__ import annotations

import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import settle_host_threads

from codemode import Host
from codemode.engine import _qjs

QUICK = "--quick" in sys.argv
PRIMES = (
    "function primes(n) { let c = 0; for (let i = 2; i < n; i++) { let p = true;"
    " for (let j = 2; j * j <= i; j++) { if (i % j === 0) { p = false; break; } } if (p) c++; } return c; }\n"
)
N = 200_000
EXPECTED = 17984


def _timed(evaluate: Callable[[str], Any]) -> float:
    start = time.perf_counter()
    assert evaluate(PRIMES + f"primes({N})") == EXPECTED
    return time.perf_counter() - start


def _peers() -> dict[str, Callable[[], float]]:
    """The evaluations measured beside the Host: this engine bare, and the peers installed."""
    runs: dict[str, Callable[[], float]] = {
        "codemode's engine, bare context": lambda: _timed(_qjs.Context(prelude=False).eval),
    }
    try:
        import quickjs

        runs["quickjs-ng wheel (PyPI)"] = lambda: _timed(quickjs.Context().eval)
    except ImportError:
        print("quickjs-ng is not installed: its line is left out (pip install quickjs-ng)")
    try:
        import jsbox

        runs["jsbox (rquickjs, static)"] = lambda: _timed(jsbox.Runtime().eval)
    except ImportError:
        print("jsbox is not installed: its line is left out (pip install jsbox)")
    return runs


def node() -> float | None:
    if shutil.which("node") is None:
        return None
    script = (
        PRIMES
        + f"const t = process.hrtime.bigint(); primes({N}); console.log(Number(process.hrtime.bigint() - t) / 1e9);"
    )
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True).stdout
    return float(out)


async def main() -> None:
    rounds = 3 if QUICK else 7
    peers = _peers()
    times: dict[str, list[float]] = {"Host.run_code": [], **{name: [] for name in peers}}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ws").mkdir()
        async with Host(workspace=Path(tmp) / "ws", state_dir=Path(tmp) / "state") as host:
            settle_host_threads()

            async def through_host() -> float:
                start = time.perf_counter()
                result = await host.run_code(PRIMES + f"print(primes({N}))")
                elapsed = time.perf_counter() - start
                assert result.text.strip() == str(EXPECTED), result.text
                return elapsed

            for _ in range(rounds):
                order = list(times)
                random.shuffle(order)
                for name in order:
                    times[name].append(await through_host() if name == "Host.run_code" else peers[name]())
    medians = {name: statistics.median(samples) for name, samples in times.items()}
    fastest_peer = min((m for name, m in medians.items() if name != "Host.run_code"), default=None)
    print(f"primes below {N:,} (median of {rounds}, rotating order)")
    for name, median in medians.items():
        ratio = f"   ratio to the fastest other {median / fastest_peer:4.2f}x" if fastest_peer else ""
        print(f"   {name:34s} {median * 1e3:6.0f} ms{ratio}")
    js = node()
    if js is not None:
        print(f"   {'node (a JIT, for scale)':34s} {js * 1e3:6.0f} ms")
    print("target: Host.run_code within 1.2x of the fastest QuickJS build")


if __name__ == "__main__":
    anyio.run(main)
