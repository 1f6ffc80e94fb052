"""CPU-bound JS: a primes loop through `Host.run_code`, the raw quickjs-ng binding and node.

The issue-14 target is within 1.2x of the fastest QuickJS build from a maintained package. The
quickjs-ng wheel from PyPI is built with interposable exports (every JS_FreeValue from the
interpreter loop goes through the PLT, nothing inlines): ~2.9x slower than the same source
built with ``-fvisibility=hidden -fno-semantic-interposition`` (``scripts/build_quickjs.py``
rebuilds it in place), which is as fast as jsbox's statically linked QuickJS-ng. The line
"build" says which one is installed.

    PYTHONPATH=. python bench/bench_cpu.py
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import quickjs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from build_quickjs import installed_so, interposable

from codemode import Host

PRIMES = (
    "function primes(n) { let c = 0; for (let i = 2; i < n; i++) { let p = true;"
    " for (let j = 2; j * j <= i; j++) { if (i % j === 0) { p = false; break; } } if (p) c++; } return c; }\n"
)
N = 200_000


def raw() -> float:
    ctx = quickjs.Context()
    start = time.perf_counter()
    assert ctx.eval(PRIMES + f"primes({N})") == 17984
    return time.perf_counter() - start


async def through_host(rounds: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ws").mkdir()
        async with Host(workspace=Path(tmp) / "ws", state_dir=Path(tmp) / "state") as host:
            for _ in range(rounds):
                start = time.perf_counter()
                result = await host.run_code(PRIMES + f"print(primes({N}))")
                times.append(time.perf_counter() - start)
                assert result.text.strip() == "17984", result.text
    return times


def node() -> float | None:
    if shutil.which("node") is None:
        return None
    script = (
        PRIMES
        + f"const t = process.hrtime.bigint(); primes({N}); console.log(Number(process.hrtime.bigint() - t) / 1e9);"
    )
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True).stdout
    return float(out)


def main() -> None:
    rounds = 5
    slow = interposable(installed_so())
    build = {
        True: "PyPI wheel (interposable exports)",
        False: "rebuilt (hidden visibility)",
        None: "unknown",
    }[slow]
    print(f"quickjs-ng build: {build}")
    host_times = anyio.run(through_host, rounds)
    raw_times = [raw() for _ in range(rounds)]
    base = statistics.median(raw_times)
    print(f"primes below {N:,}: raw binding {base * 1e3:6.0f} ms")
    print(
        f"                    Host.run_code {statistics.median(host_times) * 1e3:6.0f} ms   ratio {statistics.median(host_times) / base:4.2f}x"
    )
    js = node()
    if js is not None:
        print(f"                    node (JIT)    {js * 1e3:6.0f} ms   ratio {js / base:4.2f}x")
    if slow:
        print("a rebuilt binding (scripts/build_quickjs.py) runs this ~2.9x faster on the reference machine")


if __name__ == "__main__":
    main()
