"""What a program can make the host hold or spend: memory of printed output, CPU of searchTools
and describeTool on huge inputs, and 100,000 unawaited calls.

    python bench/bench_host_bounds.py [--quick]

1. A program that prints 200 MB (1,000 characters a line) in a fresh process: the host's peak
   RSS (ru_maxrss), and the characters the output kept (the engine keeps the first and last
   part, `EngineLimits.output_bytes_in_memory`, and drops the middle, saying how much).
2. searchTools / describeTool with a 1 MB argument through Host.run_code (refused at once: the
   caps are in codemode/tools/_search.py), and the search index itself on 0.25, 0.5 and 1 MB
   queries with the cap bypassed: its cost grows linearly (it was quadratic: 120 s at 1 MB).
3. 100,000 calls started without awaiting, of an inline tool and of an async one: wall time and
   how they ended (the async ones beyond 10,000 in flight fail with tool_data_limit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from codemode import Host
from codemode.tools._search import SearchIndex

QUICK = "--quick" in sys.argv

_PRINT_CHILD = """
import anyio, json, resource, sys, tempfile, pathlib
from codemode import Host
async def main():
    d = pathlib.Path(tempfile.mkdtemp())
    (d / "ws").mkdir()
    async with Host(workspace=d / "ws", state_dir=d / "st") as host:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        src = "const line = 'x'.repeat(999); for (let i = 0; i < %d; i++) print(line)"
        r = await host.run_code(src % int(sys.argv[1]), timeout_seconds=120, max_output_tokens=2000)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps([before / 1024, after / 1024, r.ok]))
anyio.run(main)
"""


def print_loop(lines: int) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PRINT_CHILD, str(lines)], capture_output=True, text=True, check=True
    ).stdout
    before, after, ok = json.loads(out.strip().splitlines()[-1])
    print(
        f"   printing {lines * 1000 / 1e6:.0f} MB     peak RSS {after:.0f} MB (host at start {before:.0f} MB), ok={ok}"
    )


async def huge_arguments(host: Host) -> None:
    for call in ("searchTools", "describeTool"):
        started = time.perf_counter()
        result = await host.run_code(f'try {{ await {call}("a".repeat(1e6)) }} catch (e) {{ print(e.code) }}')
        took = (time.perf_counter() - started) * 1000
        print(f"   {call}(1 MB)     {took:8.1f} ms   -> {result.text.strip()}")
    index = SearchIndex(list(host.registry))
    for size in (250_000, 500_000, 1_000_000):
        for query in ("a" * size, "read file " * (size // 10)):
            started = time.perf_counter()
            index.search(query, 10)
            took = (time.perf_counter() - started) * 1000
            kind = "one word " if query[0] == "a" and query[1] == "a" else "many words"
            print(f"   index.search {kind} {size / 1e6:.2f} MB {took:8.1f} ms")


async def unawaited(host: Host) -> None:
    @host.tool(inline=True)
    def quick(value: int) -> int:
        """Return the value (inline)."""
        return value

    @host.tool()
    async def later(value: int) -> int:
        """Return the value after a while (async)."""
        await anyio.sleep(0.2)
        return value

    for name in ("quick", "later"):
        source = (
            "const codes = {};\n"
            f"for (let i = 0; i < 100000; i++) tools.{name}({{value: i}})"
            ".catch((e) => { codes[e.code] = (codes[e.code] || 0) + 1 });\n"
            "await new Promise((r) => setTimeout(r, 10));\nprint(JSON.stringify(codes));"
        )
        started = time.perf_counter()
        result = await host.run_code(source, timeout_seconds=60, max_output_tokens=300)
        took = time.perf_counter() - started
        print(
            f"   100,000 unawaited {name:5}  {took:6.2f} s   ok={result.ok} {result.text.splitlines()[0][:60]}"
        )


async def main() -> None:
    print(f"load {os.getloadavg()}")
    print("1. printed output held by the host")
    print_loop(50_000 if QUICK else 200_000)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ws").mkdir()
        async with Host(workspace=Path(tmp) / "ws", state_dir=Path(tmp) / "st") as host:
            print("2. searchTools / describeTool on 1 MB")
            await huge_arguments(host)
            print("3. calls started and never awaited")
            await unawaited(host)
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    anyio.run(main)
