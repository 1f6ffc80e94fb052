"""One port served by one front process or by several (``codemode mcp --http --processes N``).

    python -m bench.bench_processes [--rounds 3] [--seconds 8] [--sessions 40] [--processes 1,2]

For each process count (rotated round by round) a server starts from the command line, opens
``--sessions`` MCP sessions over raw HTTP and has every one call ``run_code`` with ``print(1)``
back to back for ``--seconds``: the most calls the server answers per second on this machine.
Printed per count: calls/s, latency p50/p99, the CPU of the server's process tree (router, front
processes, engine workers) per call, and the load generator's CPU (it shares the two cores),
medians over rounds, the machine's load beside them.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKEN = "bench-token-0123456789abcdef"
_URL = re.compile(r"serving MCP over streamable HTTP at (\S+)")
_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
_INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "b", "version": "1"},
    },
}
_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "run_code", "arguments": {"code": "print(1)"}},
}


def _tree_cpu(pid: int) -> float:
    total = 0.0
    try:
        root = psutil.Process(pid)
        for member in [root, *root.children(recursive=True)]:
            with_children = member.cpu_times()
            total += with_children.user + with_children.system
    except psutil.NoSuchProcess:
        pass
    return total


async def _round(processes: int, sessions: int, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "ws").mkdir()
        errors = (work / "stderr").open("wb")
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "codemode",
                "mcp",
                "--http",
                "127.0.0.1:0",
                "--processes",
                str(processes),
                "--workspace",
                str(work / "ws"),
                "--state-dir",
                str(work / "state"),
                "--console",
                "off",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            env={**os.environ, "CODEMODE_MCP_TOKEN": TOKEN},
        )
        try:
            deadline = time.monotonic() + 120
            url = None
            while url is None:
                found = _URL.search((work / "stderr").read_text())
                url = found.group(1) if found else None
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start: {(work / 'stderr').read_text()}")
                await anyio.sleep(0.05)
            return await _load(url, server.pid, sessions, seconds)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
            errors.close()


async def _load(url: str, pid: int, sessions: int, seconds: float) -> dict[str, float]:
    auth = {**_ACCEPT, "Authorization": f"Bearer {TOKEN}"}
    latencies: list[float] = []
    failed = 0
    limits = httpx2.Limits(max_connections=sessions + 4, max_keepalive_connections=sessions + 4)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
        headers = []
        for _ in range(sessions):
            opened = await http.post(url, headers=auth, json=_INIT)
            session = {
                **auth,
                "Mcp-Session-Id": opened.headers["mcp-session-id"],
                "MCP-Protocol-Version": "2025-06-18",
            }
            await http.post(
                url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
            )
            await http.post(url, headers=session, json=_CALL)  # its first call starts its worker
            headers.append(session)
        me = psutil.Process()
        cpu_before, mine_before = _tree_cpu(pid), sum(me.cpu_times()[:2])
        stop = time.monotonic() + seconds

        async def caller(session: dict[str, str]) -> None:
            nonlocal failed
            while time.monotonic() < stop:
                started = time.perf_counter()
                answer = await http.post(url, headers=session, json=_CALL)
                if answer.status_code != 200 or '"isError":true' in answer.text:
                    failed += 1
                latencies.append(time.perf_counter() - started)

        started = time.monotonic()
        async with anyio.create_task_group() as group:
            for session in headers:
                group.start_soon(caller, session)
        elapsed = time.monotonic() - started
        cpu = _tree_cpu(pid) - cpu_before
        mine = sum(me.cpu_times()[:2]) - mine_before
    latencies.sort()
    calls = len(latencies)
    return {
        "calls/s": calls / elapsed,
        "p50 ms": latencies[calls // 2] * 1000,
        "p99 ms": latencies[min(calls - 1, int(calls * 0.99))] * 1000,
        "server CPU ms/call": cpu / calls * 1000,
        "generator CPU ms/call": mine / calls * 1000,
        "failed": failed,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--processes", default="1,2")
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]
    results: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    loads = []
    for round_no in range(args.rounds):
        order = counts[round_no % len(counts) :] + counts[: round_no % len(counts)]
        for n in order:
            results[n].append(await _round(n, args.sessions, args.seconds))
            loads.append(os.getloadavg()[0])
    print(
        f"One port, N front processes: {args.sessions} sessions calling back to back for {args.seconds:g} s, "
        f"medians of {args.rounds} rotated rounds; load {min(loads):.1f}-{max(loads):.1f} (2 cores, the "
        "load generator on them too)"
    )
    keys = list(results[counts[0]][0])
    print(f"{'processes':10}" + "".join(f"{key:>22}" for key in keys))
    for n in counts:
        row = [statistics.median(r[key] for r in results[n]) for key in keys]
        print(f"{n:<10}" + "".join(f"{value:22.1f}" for value in row))


if __name__ == "__main__":
    anyio.run(main)
