"""``print(1)`` through the MCP fronts: streamable HTTP vs stdio, median round trip, same run.

    python bench/bench_mcp.py [--quick]

Starts a real ``codemode mcp`` (stdio) and a real ``codemode mcp --http 127.0.0.1:0``, each
with its own state directory, connects the MCP SDK's client to both and calls ``run_code``
with ``print(1)`` in alternating rounds (so drift on a shared machine hits both alike). Also
times ``ping`` on both: the transport alone, without a program.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

QUICK = "--quick" in sys.argv
ROUNDS = 10 if QUICK else 40
PER_ROUND = 10
TOKEN = "bench-token"


async def _time(call: Callable[[], Awaitable[object]], n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return times


def _start_http(tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    (tmp / "http-ws").mkdir()
    log = tmp / "http.stderr"
    args = ["--workspace", str(tmp / "http-ws"), "--state-dir", str(tmp / "http-state")]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "codemode", "mcp", "--http", "127.0.0.1:0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env={**env, "CODEMODE_MCP_TOKEN": TOKEN},
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"streamable HTTP at (\S+)", log.read_text())
        if found:
            return process, found.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise SystemExit(f"the HTTP server did not start: {log.read_text()}")


async def main() -> None:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "stdio-ws").mkdir()
        stdio = StdioServerParameters(
            command=sys.executable,
            args=["-m", "codemode", "mcp", "--workspace", str(tmp / "stdio-ws")],
            env={**env, "CODEMODE_HOME": str(tmp / "stdio-state")},
        )
        process, url = _start_http(tmp, env)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        try:
            async with (
                stdio_client(stdio) as (s_read, s_write),
                ClientSession(s_read, s_write) as over_stdio,
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
                streamable_http_client(url, http_client=http) as (h_read, h_write),
                ClientSession(h_read, h_write) as over_http,
            ):
                await over_stdio.initialize()
                await over_http.initialize()
                samples: dict[str, list[float]] = {"stdio": [], "http": [], "stdio ping": [], "http ping": []}
                sessions = {"stdio": over_stdio, "http": over_http}
                for client in sessions.values():  # warm both (tokenizer, workers, connections)
                    for _ in range(5):
                        result = await client.call_tool("run_code", {"code": "print(1)"})
                        assert not result.is_error
                for _ in range(ROUNDS):
                    for front, client in sessions.items():

                        async def run(client: ClientSession = client) -> object:
                            return await client.call_tool("run_code", {"code": "print(1)"})

                        samples[front] += await _time(run, PER_ROUND)
                        samples[f"{front} ping"] += await _time(client.send_ping, PER_ROUND)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)

    def ms(key: str) -> float:
        return statistics.median(samples[key]) * 1000

    n = ROUNDS * PER_ROUND
    print(f"run_code print(1), median of {n} round trips each (alternating rounds, same run):")
    print(f"   stdio                 {ms('stdio'):8.3f} ms")
    print(f"   streamable HTTP       {ms('http'):8.3f} ms   ratio {ms('http') / ms('stdio'):5.2f}x stdio")
    print("ping (the transport alone):")
    print(f"   stdio                 {ms('stdio ping'):8.3f} ms")
    ratio = ms("http ping") / ms("stdio ping")
    print(f"   streamable HTTP       {ms('http ping'):8.3f} ms   ratio {ratio:5.2f}x stdio")


if __name__ == "__main__":
    anyio.run(main)
