"""Scale: 200 programs at once on one Host, each making 20 async tool calls; the event loop's
worst stall while 4 CPU-bound programs run; and memory: RSS per idle session and per running
program, and the host's RSS after programs hit their memory limit.

Targets (issue 14): all 200 complete correctly; the loop never stalls 10 ms or more (programs
run on their own threads, so one session's computing never blocks another's calls); RSS back
within 10 MiB of its baseline after a memory bomb. The stall is measured by a task that sleeps
1 ms in a loop and records how late it wakes; the same task alone, before the programs, is the
baseline.

    PYTHONPATH=. python bench/bench_scale.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import anyio
import psutil

from codemode import Host

PROGRAM = "let s = 0; for (let i = 0; i < 20; i++) { s += (await tools.work({n: i})).n; } print(s);"
CPU = "let x = 0; for (let i = 0; i < 3e7; i++) { x = (x + i) % 1000003; } print(x);"


async def _stalls(seconds: float) -> list[float]:
    lateness = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        await anyio.sleep(0.001)
        lateness.append(time.perf_counter() - start - 0.001)
    return lateness


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ws").mkdir()
        async with Host(
            workspace=Path(tmp) / "ws", state_dir=Path(tmp) / "state", max_output_tokens=256, memory_mb=64
        ) as host:

            @host.tool()
            async def work(n: int) -> dict[str, int]:
                """Wait a moment, give n back."""
                await anyio.sleep(0.001)
                return {"n": n}

            # Loading the tokenizer (preloaded on a thread at open) holds the GIL in tiktoken's
            # constructor: measured on its own, then the baseline once it has loaded.
            loading = await _stalls(0.5)
            assert host.counter.exact is not None
            baseline = await _stalls(1.0)
            results: list[str] = []

            async def one(i: int) -> None:
                result = await host.run_code(PROGRAM, session_id=f"s{i}")
                results.append(result.text.strip())

            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon(one, i)
            wall = time.perf_counter() - start
            ok = sum(1 for text in results if text == "190")
            print(
                f"200 programs x 20 async calls: {ok}/200 correct in {wall:.2f} s = {200 / wall:.0f} programs/s"
            )

            # Memory: an idle session costs what the state dir holds for it (nothing in RSS
            # beyond the host's caches); a running program holds a worker thread and its context.
            me = psutil.Process()
            before = me.memory_info().rss
            for i in range(200):
                await host.run_code("print(1)", session_id=f"idle{i}")
            idle = (me.memory_info().rss - before) / 200
            gate = anyio.Event()
            started = 0

            @host.tool()
            async def hold() -> str:
                """Wait until the bench lets go."""
                nonlocal started
                started += 1
                await gate.wait()
                return "ok"

            base = me.memory_info().rss
            async with anyio.create_task_group() as tg:
                for i in range(32):
                    tg.start_soon(
                        lambda i=i: host.run_code(
                            "const big = 'x'.repeat(1 << 20); await tools.hold(); print(big.length);",
                            session_id=f"run{i}",
                        )
                    )
                while started < 32:
                    await anyio.sleep(0.01)
                running = (me.memory_info().rss - base) / 32
                gate.set()
            print(
                f"RSS per idle session: {idle / 1024:.0f} KiB; per running program (holding a 1 MiB string): {running / 2**20:.1f} MiB"
            )

            # Memory bombs: each program grows its heap to its 64 MiB limit and is stopped.
            for _ in range(5):  # what a program usually leaves in the host's caches, before the baseline
                await host.run_code("print(1)", session_id="bomb")
            bombs = 3
            base = me.memory_info().rss
            for _ in range(bombs):
                result = await host.run_code(
                    "const a = []; for (;;) a.push('x'.repeat(1 << 16) + a.length);", session_id="bomb"
                )
                assert result.error is not None and result.error.kind == "out_of_memory", result.text
            after = me.memory_info().rss - base
            print(
                f"RSS after {bombs} programs hit their {host.config.memory_mb} MiB heap limit: {after / 2**20:+.1f} MiB "
                "(target: within 10 MiB of the baseline)"
            )

            stalls: list[float] = []

            async def watch() -> None:
                stalls.extend(await _stalls(1.5))

            cpu_wall = 0.0
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                t0 = time.perf_counter()
                async with anyio.create_task_group() as cpu:
                    for i in range(4):
                        cpu.start_soon(lambda i=i: host.run_code(CPU, session_id=f"cpu{i}"))
                cpu_wall = time.perf_counter() - t0
    print(f"event loop lateness while the tokenizer preloads at open: worst {max(loading) * 1e3:.1f} ms")
    print(
        f"event loop lateness with nothing running: median {statistics.median(baseline) * 1e3:.2f} ms, "
        f"worst {max(baseline) * 1e3:.1f} ms"
    )
    print(
        f"while 4 CPU-bound programs run ({cpu_wall:.1f} s): median {statistics.median(stalls) * 1e3:.2f} ms, "
        f"worst {max(stalls) * 1e3:.1f} ms   (target: worst < 10 ms)"
    )


if __name__ == "__main__":
    anyio.run(main)
