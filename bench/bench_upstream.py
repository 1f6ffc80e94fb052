"""Upstream MCP benchmarks (issue 11): every number beside a baseline from the same run.

    python bench/bench_upstream.py [--quick]

1. 1,000 sequential calls of an upstream stdio tool (``echo``) from one ``run_code`` program
   vs the SDK's ``ClientSession`` calling the same tool of the same server 1,000 times
   directly. Target: <= 1.3x.
2. 100 concurrent calls from one program (``Promise.all``) of a tool that sleeps 200 ms,
   against a server that handles them concurrently, vs one such call. Target: wall <= 1.5x.
   The Host runs with ``tool_concurrency=100`` (the default, 32, would run them in waves).
   Beside it, the SDK client making the same 100 calls at once directly: the floor the
   server and the SDK set (a Python MCP server parses and answers requests one at a time).

The machine is shared: each side runs in interleaved rounds and the best round counts.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from codemode import Host

QUICK = "--quick" in sys.argv
SERVER = Path(__file__).resolve().parent.parent / "tests" / "tools" / "upstream" / "upstream_server.py"
CALLS = 200 if QUICK else 1000
CONCURRENT = 100
SLOW = 0.2


async def direct(calls: int, concurrent: int = 0) -> tuple[float, float]:
    """Seconds for ``calls`` sequential SDK calls (after one warm-up call), and for
    ``concurrent`` slow calls at once (0: not measured)."""
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "stdio"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        await session.call_tool("echo", {"text": "warm"})
        start = time.perf_counter()
        for i in range(calls):
            await session.call_tool("echo", {"text": f"x{i}"})
        sequential = time.perf_counter() - start
        wide = 0.0
        if concurrent:
            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(concurrent):
                    tg.start_soon(session.call_tool, "slow", {"seconds": SLOW, "tag": f"d{i}"})
            wide = time.perf_counter() - start
        return sequential, wide


async def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-upstream-"))
    try:
        (tmp / "ws").mkdir()
        servers = {"mcpServers": {"up": {"command": sys.executable, "args": [str(SERVER), "stdio"]}}}
        async with Host(
            workspace=tmp / "ws", state_dir=tmp / "state", mcp_servers=servers, tool_concurrency=CONCURRENT
        ) as host:
            await host.run_code('await tools.up.echo({text: "warm"})')
            loop = f"for (let i = 0; i < {CALLS}; i++) await tools.up.echo({{text: 'x' + i}}); print('ok')"
            ours: list[float] = []
            theirs: list[float] = []
            sdk_wide: list[float] = []
            for _ in range(3 if QUICK else 5):  # interleaved rounds (a shared, busy machine)
                start = time.perf_counter()
                result = await host.run_code(loop)
                ours.append(time.perf_counter() - start)
                assert result.text.strip() == "ok", result.text
                sequential, wide_direct = await direct(CALLS, CONCURRENT)
                theirs.append(sequential)
                sdk_wide.append(wide_direct)
            best_ours, best_theirs = min(ours), min(theirs)
            print(f"1. {CALLS} sequential upstream stdio calls")
            print(
                f"   through run_code   {best_ours * 1000:8.1f} ms  ({best_ours / CALLS * 1e6:6.0f} us/call)"
            )
            print(
                f"   SDK client direct  {best_theirs * 1000:8.1f} ms  ({best_theirs / CALLS * 1e6:6.0f} us/call)"
            )
            print(f"   ratio {best_ours / best_theirs:.2f}x (target <= 1.3x)")

            single: list[float] = []
            for _ in range(5):
                start = time.perf_counter()
                await host.run_code(f'await tools.up.slow({{seconds: {SLOW}, tag: "one"}})')
                single.append(time.perf_counter() - start)
            wide: list[float] = []
            program = (
                f"const r = await Promise.all(Array.from({{length: {CONCURRENT}}}, (_, i) =>"
                f' tools.up.slow({{seconds: {SLOW}, tag: "c" + i}}))); print(r.length)'
            )
            for _ in range(3):
                start = time.perf_counter()
                result = await host.run_code(program)
                wide.append(time.perf_counter() - start)
                assert result.text.strip() == str(CONCURRENT), result.text
            slowest_single = max(single)
            print(
                f"2. {CONCURRENT} concurrent upstream calls of a {SLOW * 1000:.0f} ms tool from one program"
            )
            print(
                f"   one call: median {statistics.median(single) * 1000:.1f} ms, slowest {slowest_single * 1000:.1f} ms"
            )
            print(
                f"   {CONCURRENT} at once: median {statistics.median(wide) * 1000:.1f} ms, best {min(wide) * 1000:.1f} ms"
            )
            print(
                f"   SDK client direct, {CONCURRENT} at once: median {statistics.median(sdk_wide) * 1000:.1f} ms "
                f"({statistics.median(sdk_wide) / slowest_single:.2f}x)"
            )
            print(
                f"   ratio {statistics.median(wide) / slowest_single:.2f}x the slowest single call (target <= 1.5x)"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    anyio.run(main)
