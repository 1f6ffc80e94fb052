"""codemode beside an embedded JS sandbox a user could pick instead, in the same run (issue 14).

    python bench/bench_peers.py [--quick]

The peer is jsbox (QuickJS through rquickjs, PyPI ``jsbox``), the fastest of the peers the issue
measured; when it is not installed its lines say so (``pip install jsbox``). The floor of a fresh
context is codemode's own engine with no prelude (and, when installed, the quickjs-ng binding's
PyPI wheel). Every line is a median (or best of, where it says) of runs alternating between them
in the same minutes.

What differs by design: jsbox runs JavaScript on the calling thread (a program that computes
blocks the event loop; codemode's run on worker threads, and no program may block the loop for
more than 10 ms), and its host functions return plain values where codemode's tools return
promises a program awaits.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cold import cases, measure
from bench_engine import add_bench_tools, settle_host_threads

from codemode import Host
from codemode.engine import _qjs

QUICK = "--quick" in sys.argv

try:
    import jsbox
except ImportError:
    jsbox = None
try:
    import quickjs
except ImportError:
    quickjs = None


def _ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def _trivial(host: Host, runs: int) -> None:
    ours: list[float] = []
    peer: list[float] = []
    bare: list[float] = []
    wheel: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        await host.run_code("print(1)")
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        _qjs.Context(prelude=False).eval("1")
        bare.append(time.perf_counter() - start)
        if quickjs is not None:
            start = time.perf_counter()
            quickjs.Context().eval("1")
            wheel.append(time.perf_counter() - start)
        if jsbox is not None:
            start = time.perf_counter()
            jsbox.Runtime().eval("1")
            peer.append(time.perf_counter() - start)
    print("1. a trivial program on a fresh context (median)")
    print(f"   codemode Host.run_code('print(1)')   {_ms(ours):7.3f} ms   (target <= 0.3 ms)")
    print(f"   codemode's engine, bare context      {_ms(bare):7.3f} ms   (the floor)")
    if wheel:
        print(f"   quickjs-ng wheel Context().eval      {_ms(wheel):7.3f} ms")
    if peer:
        print(
            f"   jsbox Runtime().eval                 {_ms(peer):7.3f} ms   codemode / jsbox {_ms(ours) / _ms(peer):.1f}x"
        )


async def _calls(host: Host, n: int) -> None:
    async def timed(source: str) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            result = await host.run_code(source)
            assert result.ok, result.text
            best = min(best, time.perf_counter() - start)
        return best / n * 1e6

    loop = f"let s = 0; for (let i = 0; i < {n}; i++) s += await tools.NAME({{value: i}}); print(s)"
    inline = await timed(loop.replace("NAME", "echo_inline"))
    awaited = await timed(loop.replace("NAME", "echo"))
    print(f"2. sequential host calls x {n:,} (best of 3, per call)")
    print(f"   codemode inline=True tool             {inline:7.1f} us")
    print(f"   codemode async def tool               {awaited:7.1f} us")
    if jsbox is None:
        print("   jsbox: not installed (pip install jsbox)")
        return
    rt = jsbox.Runtime()
    rt.bind_function("echo", lambda v: v)

    async def echo_async(v: Any) -> Any:
        return v

    rt_async = jsbox.Runtime()
    rt_async.bind_function("echo", echo_async)
    sync_best = async_best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        rt.eval(f"(() => {{ let s = 0; for (let i = 0; i < {n}; i++) s += echo(i); return s }})()")
        sync_best = min(sync_best, time.perf_counter() - start)
        start = time.perf_counter()
        await rt_async.eval_async(
            f"(async () => {{ let s = 0; for (let i = 0; i < {n}; i++) s += await echo(i); return s }})()"
        )
        async_best = min(async_best, time.perf_counter() - start)
    print(f"   jsbox sync function                   {sync_best / n * 1e6:7.1f} us   (on the calling thread)")
    print(
        f"   jsbox async function, awaited          {async_best / n * 1e6:7.1f} us   (on the event loop's thread)"
    )


async def _gather(host: Host) -> None:
    source = (
        "const r = await Promise.all(Array.from({length: 32}, () => tools.nap({ms: 100}))); print(r.length)"
    )
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        await host.run_code(source)
        walls.append(time.perf_counter() - start)
    print("3. Promise.all of 32 host calls sleeping 100 ms (median wall)")
    print(f"   codemode                              {_ms(walls):7.1f} ms")
    if jsbox is None:
        return
    rt = jsbox.Runtime()

    async def nap(ms: int) -> int:
        await asyncio.sleep(ms / 1000)
        return ms

    rt.bind_function("nap", nap)
    peer = []
    for _ in range(3):
        start = time.perf_counter()
        await rt.eval_async("Promise.all(Array.from({length: 32}, () => nap(100))).then((r) => r.length)")
        peer.append(time.perf_counter() - start)
    print(f"   jsbox                                 {_ms(peer):7.1f} ms")


def _cold(runs: int, tmp: Path) -> None:
    commands = cases(tmp)
    del commands["python -c 'import codemode'"]
    if jsbox is not None:
        commands["jsbox: import, Runtime().eval"] = [
            sys.executable,
            "-c",
            "import jsbox; jsbox.Runtime().eval('1')",
        ]
    medians = measure(commands, runs, tmp)
    print("4. cold start: a fresh process runs a trivial program (median)")
    base = medians["python -c pass"]
    for name, median in medians.items():
        print(
            f"   {name:36s} {median * 1e3:7.0f} ms   ({(median - base) * 1e3:5.0f} ms over python's own start)"
        )


async def main() -> None:
    if jsbox is None:
        print("jsbox is not installed: its lines are left out (pip install jsbox)")
    with tempfile.TemporaryDirectory(prefix="codemode-peers-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        async with Host(workspace=workspace, state_dir=Path(tmp) / "state", builtin_tools=True) as host:
            add_bench_tools(host)
            _ = host.counter.exact
            settle_host_threads()
            for _ in range(50):
                await host.run_code("print(1)")
            await _trivial(host, 200 if QUICK else 1000)
            await _calls(host, 2000 if QUICK else 10_000)
            await _gather(host)
        _cold(5 if QUICK else 10, Path(tmp))


if __name__ == "__main__":
    anyio.run(main)
