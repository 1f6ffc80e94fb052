"""Engine modes side by side (issue 30): a program in a confined worker process vs in a thread.

    python bench/bench_engine_modes.py [--quick]

Each figure is a median over rounds that alternate the two modes (process, thread, thread,
process, ...), with the machine's load printed beside it. Targets for process mode:

1. ``print(1)`` through ``Host.run_code``: <= 1 ms.
2. A sequential async tool call (``await tools.echo``): <= 2x thread mode.
3. A sequential sync (``inline``) tool call: <= 50 us. Beside it, the floor under it on this
   machine in the same rounds: a bare round trip between two processes over a socketpair (an
   inline call is two cross-process wake-ups).
4. RSS of an idle worker: <= 15 MiB (PSS beside it: most pages are shared with the zygote).
5. Throughput of 200 concurrent programs (each awaits a 20 ms tool, then prints): >= 0.8x thread mode.
6. The worker's form: a worker forked by the zygote (to ready: its limits, threads, seal) vs a
   fresh interpreter importing the same modules (what a worker without a zygote would cost).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from codemode import Host

QUICK = "--quick" in sys.argv
ROUNDS = 3 if QUICK else 7
MODES = ("process", "thread")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def add_tools(host: Host) -> None:
    @host.tool()
    async def echo(value: Any = None) -> Any:
        "Return the value."
        return value

    @host.tool(inline=True)
    def echo_inline(value: Any = None) -> Any:
        "Return the value (inline)."
        return value

    @host.tool()
    async def nap(ms: int) -> int:
        "Sleep for ms milliseconds."
        await anyio.sleep(ms / 1000)
        return ms


async def print_one(host: Host) -> float:
    n = 50 if QUICK else 200
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        result = await host.run_code("print(1)")
        samples.append(time.perf_counter() - start)
        assert result.text == "1\n", result.text
    return statistics.median(samples)


def calls(tool: str) -> Callable[[Host], Awaitable[float]]:
    async def measure(host: Host) -> float:
        n = 1000 if QUICK else 5000
        program = f"let s = 0; for (let i = 0; i < {n}; i++) s += await tools.{tool}({{value: i}}); print(s)"
        start = time.perf_counter()
        result = await host.run_code(program)
        elapsed = time.perf_counter() - start
        assert result.ok and result.text.strip() == str(n * (n - 1) // 2), result.text
        return elapsed / n

    return measure


async def throughput(host: Host) -> float:
    """Programs per second, 200 at once, each awaiting a 20 ms tool."""
    n = 200
    done = 0

    async def one(i: int) -> None:
        nonlocal done
        result = await host.run_code(f"await tools.nap({{ms: 20}}); print({i})", session_id=f"s{i % 8}")
        assert result.text == f"{i}\n", result.text
        done += 1

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    assert done == n
    return n / (time.perf_counter() - start)


async def fork_start(host: Host) -> float:
    """Seconds from asking for a worker of a new session to its being ready (zygote fork)."""
    pool = host.engine.processes
    assert pool is not None
    start = time.perf_counter()
    worker = await pool.acquire(f"fresh-{time.perf_counter_ns()}")
    elapsed = time.perf_counter() - start
    pool.release(worker, ran=False)
    pool.forget_session(worker.session_id)
    return elapsed


def ping_pong() -> float:
    """Seconds per round trip of one byte between two processes over a socketpair, each
    sleeping in recv: the floor under an inline call (two cross-process wake-ups), this round."""
    import socket

    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the echo: no Python left to run after it
        ours.close()
        while data := theirs.recv(64):
            theirs.send(data)
        os._exit(0)
    theirs.close()
    n = 2000 if QUICK else 5000
    try:
        start = time.perf_counter()
        for _ in range(n):
            ours.send(b"x")
            ours.recv(64)
        return (time.perf_counter() - start) / n
    finally:
        ours.close()
        os.waitpid(pid, 0)


def fresh_interpreter() -> float:
    """Seconds for a fresh ``python -I -S`` to import what a worker holds (no zygote)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent / "codemode"
    code = (
        "import sys, types\n"
        f"root = {str(root)!r}\n"
        "for n, p in (('codemode', root), ('codemode.engine', root + '/engine'), "
        "('codemode.engine.worker', root + '/engine/worker'), ('codemode.sandbox', root + '/sandbox')):\n"
        "    m = types.ModuleType(n); m.__path__ = [p]; sys.modules[n] = m\n"
        "from codemode.engine.worker import _serve, _confine\n"
        "from codemode.engine import _text\n"
        "_text._set_prelude(1)\n"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-S", "-c", code], check=True)
    return time.perf_counter() - start


def worker_memory(host: Host) -> tuple[float, float]:
    """RSS and PSS (MiB) of an idle worker of ``host``."""
    pool = host.engine.processes
    assert pool is not None
    pid = pool.worker_pids()[0]
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0]) / 1024
    return fields["Rss"], fields["Pss"]


async def main() -> None:
    measures: dict[str, Callable[[Host], Awaitable[float]]] = {
        "print(1)": print_one,
        "async call": calls("echo"),
        "inline call": calls("echo_inline"),
        "200 programs/s": throughput,
    }
    results: dict[tuple[str, str], list[float]] = {}
    loads: list[str] = []
    memory: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        hosts: dict[str, Host] = {}
        for mode in MODES:
            host = Host(workspace=root / "ws", state_dir=root / f"state-{mode}", engine=mode)
            await host.__aenter__()
            add_tools(host)
            for _ in range(20):
                await host.run_code("print(1)")  # warm: the zygote, a worker, the keeper's contexts
            hosts[mode] = host
        try:
            for round_no in range(ROUNDS):
                order = MODES if round_no % 2 == 0 else tuple(reversed(MODES))
                for name, measure in measures.items():
                    for mode in order:
                        results.setdefault((name, mode), []).append(await measure(hosts[mode]))
                memory.append(worker_memory(hosts["process"]))
                results.setdefault(("fork", "process"), []).append(await fork_start(hosts["process"]))
                results.setdefault(("fresh", "process"), []).append(fresh_interpreter())
                results.setdefault(("ping-pong", "process"), []).append(ping_pong())
                loads.append(load())
        finally:
            for host in hosts.values():
                await host.__aexit__(None, None, None)

    def med(name: str, mode: str) -> float:
        return statistics.median(results[(name, mode)])

    print(f"engine modes, medians of {ROUNDS} rotated rounds; loads per round: {', '.join(loads)}")
    p, t = med("print(1)", "process"), med("print(1)", "thread")
    print(f"1. print(1)         process {p * 1e3:7.3f} ms   thread {t * 1e3:7.3f} ms   (target <= 1 ms)")
    p, t = med("async call", "process"), med("async call", "thread")
    print(
        f"2. async call       process {p * 1e6:7.1f} us   thread {t * 1e6:7.1f} us   ratio {p / t:4.2f}x (<= 2x)"
    )
    p, t = med("inline call", "process"), med("inline call", "thread")
    floor = med("ping-pong", "process")
    print(
        f"3. inline call      process {p * 1e6:7.1f} us   thread {t * 1e6:7.1f} us   (target <= 50 us;"
        f" two processes' bare ping-pong here: {floor * 1e6:.1f} us)"
    )
    rss = statistics.median(m[0] for m in memory)
    pss = statistics.median(m[1] for m in memory)
    print(f"4. idle worker      RSS {rss:5.1f} MiB, PSS {pss:5.1f} MiB   (target RSS <= 15 MiB)")
    p, t = med("200 programs/s", "process"), med("200 programs/s", "thread")
    print(f"5. 200 at once      process {p:7.0f}/s   thread {t:7.0f}/s   ratio {p / t:4.2f}x (>= 0.8x)")
    f, n = med("fork", "process"), med("fresh", "process")
    print(f"6. a new worker     forked {f * 1e3:6.1f} ms   fresh interpreter {n * 1e3:6.1f} ms")


if __name__ == "__main__":
    anyio.run(main)
