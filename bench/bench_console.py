"""The console under load: the HTTP server's event-loop stall with 200 MCP sessions and 50 live
terminals open in the console, beside the same server with the console off.

    python -m bench.bench_console [--quick] [--profile]

Each run starts its own server (this file, ``--serve``: `serve_http` in a child process, plus a
task that sleeps 5 ms in a loop and records how late it wakes), opens 200 MCP sessions over raw
HTTP and starts 50 background processes across them that print 20 lines a second. With the
console on, the load generator logs in and reads each process's terminal stream and the
``/console/api/events`` stream for the whole run; the baseline (``console=OFF``) has the same
sessions, processes and calls but no console. During the measured window every session calls
``run_code`` with ``print(1)`` every 10 s (the sessions spread over the period). The two modes
alternate over 3 rounds (1 with ``--quick``); each figure is the median over rounds, with the
machine's load beside it. ``--profile`` runs cProfile on the server's loop thread during each
window and prints the console run's top functions.

Target (the scale issue's figures): the loop's stall p99 < 10 ms and max < 50 ms with the console.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import io
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil

from codemode.sandbox._tmpfs import sweep_stale_tmp

ROOT = Path(__file__).resolve().parent.parent
QUICK = "--quick" in sys.argv
PROFILE = "--profile" in sys.argv
ROUNDS = 1 if QUICK else 3
WINDOW_SECONDS = 10.0 if QUICK else 20.0
WARMUP_SECONDS = 3.0  # after the streams open, before the window (their backlog read)
SESSIONS = 200
TERMINALS = 50
CALL_PERIOD = 10.0  # each session calls run_code this often
TICK = 0.005  # the stall monitor's sleep
P99_TARGET, MAX_TARGET = 0.010, 0.050
TOKEN = "bench-console-token-0123456789abcdef"
# 20 lines a second; `read -t` on a pipe nobody writes is bash's own sleep (no fork per line).
COMMAND = "exec 3<> <(:); while true; do echo line $RANDOM; read -t 0.05 -u 3; done"
PROTOCOL = "2025-06-18"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MODES = ("console", "baseline")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


# ---- the server (a child process) --------------------------------------------------------------


@dataclass
class Window:
    on: bool = False
    samples: list[float] = field(default_factory=list)
    profiler: cProfile.Profile | None = None


async def _monitor(window: Window) -> None:
    while True:
        start = time.perf_counter()
        await anyio.sleep(TICK)
        if window.on:
            window.samples.append(time.perf_counter() - start - TICK)


async def _control(window: Window, directory: Path) -> None:
    """SIGUSR1 opens the measured window, SIGUSR2 closes it and writes its figures."""
    with anyio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2) as received:
        async for signum in received:
            if signum == signal.SIGUSR1:
                window.samples.clear()
                window.on = True
                if PROFILE:
                    window.profiler = cProfile.Profile()
                    window.profiler.enable()
                continue
            window.on = False
            if window.profiler is not None:
                window.profiler.disable()
                text = io.StringIO()
                pstats.Stats(window.profiler, stream=text).sort_stats("tottime").print_stats(25)
                (directory / "profile.txt").write_text(text.getvalue())
            lateness = sorted(window.samples) or [0.0]
            figures = {
                "samples": len(window.samples),
                "p50": statistics.median(lateness),
                "p99": lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))],
                "max": lateness[-1],
            }
            (directory / "stall.tmp").write_text(json.dumps(figures))
            (directory / "stall.tmp").rename(directory / "stall.json")


async def serve(directory: Path, console: str) -> None:
    from codemode import Host
    from codemode.console import ConsoleMode
    from codemode.mcp import HttpOptions, serve_http

    (directory / "ws").mkdir(exist_ok=True)
    host = Host(workspace=directory / "ws", state_dir=directory / "state")
    options = HttpOptions(token=TOKEN, port=0, console=ConsoleMode(console))

    def announce(url: str) -> None:
        (directory / "url.tmp").write_text(url)
        (directory / "url.tmp").rename(directory / "url")

    window = Window()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_monitor, window)
        tg.start_soon(_control, window, directory)
        await serve_http(host, options, announce=announce)
        tg.cancel_scope.cancel()


# ---- the load generator ----------------------------------------------------------------------


@dataclass
class Child:
    url: str
    process: psutil.Process
    directory: Path
    spawned: list[psutil.Process] = field(default_factory=list)  # background commands, supervisors


@contextlib.contextmanager
def server(directory: Path, console: str) -> Iterator[Child]:
    """Start the server child; stop it and whatever it left running after, whatever happened."""
    env = dict(os.environ)
    shared = ROOT.parent / "shared" / "tiktoken-cache"
    if "TIKTOKEN_CACHE_DIR" not in env and shared.is_dir():
        env["TIKTOKEN_CACHE_DIR"] = str(shared)
    command = [sys.executable, "-m", "bench.bench_console", "--serve", str(directory), console]
    if PROFILE:
        command.append("--profile")
    with (directory / "server.stderr").open("wb") as sink:
        popen = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stderr=sink)
    child = Child("", psutil.Process(popen.pid), directory)
    try:
        deadline = time.monotonic() + 60
        while not (directory / "url").exists():
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {(directory / 'server.stderr').read_text()}")
            time.sleep(0.05)
        child.url = (directory / "url").read_text()
        yield child
    finally:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
        _, alive = psutil.wait_procs(child.spawned, timeout=5)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(alive, timeout=5)
        sweep_stale_tmp(directory / "state" / "tmp")  # session tmpfs mounts a stopped host left


@dataclass
class Figures:
    stall: dict[str, float]
    window: float
    calls: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    server_cpu: float = 0.0
    client_cpu: float = 0.0
    stream_lines: int = 0
    stream_bytes: int = 0
    streams_ended: int = 0
    events: int = 0


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def answer_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer (a JSON body, or the last ``data:`` of an SSE stream)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        parsed: dict[str, Any] = json.loads(data[-1])
        return parsed
    body: dict[str, Any] = response.json()
    return body


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


async def open_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """Initialize and initialized, by hand; the headers of the session's requests."""
    auth = {**ACCEPT, "Authorization": f"Bearer {TOKEN}"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    opened = await http.post(url, headers=auth, json=initialize)
    opened.raise_for_status()
    headers = {**auth, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": PROTOCOL}
    await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


async def read_stream(http: httpx2.AsyncClient, path: str, figures: Figures) -> None:
    """Read a server-sent event stream until cancelled, counting what came."""
    async with http.stream("GET", path, timeout=httpx2.Timeout(30, read=None)) as stream:
        stream.raise_for_status()
        async for line in stream.aiter_lines():
            figures.stream_lines += 1
            figures.stream_bytes += len(line)
            if path.endswith("/events") and line.startswith("event:"):
                figures.events += 1
    figures.streams_ended += 1


async def run_once(mode: str) -> Figures:
    with (
        tempfile.TemporaryDirectory(prefix="bench-console-") as tmp,
        server(Path(tmp), "on" if mode == "console" else "off") as child,
    ):
        url, base = child.url, child.url.removesuffix("/mcp")
        limits = httpx2.Limits(max_connections=SESSIONS + TERMINALS + 64, max_keepalive_connections=SESSIONS)
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(60), limits=limits) as http:
            gate = anyio.Semaphore(16)
            sessions: list[dict[str, str]] = []

            async def one(i: int) -> None:
                async with gate:
                    sessions.append(await open_session(http, url))

            async with anyio.create_task_group() as tg:
                for i in range(SESSIONS):
                    tg.start_soon(one, i)
            terminals: list[tuple[dict[str, str], str]] = []
            for i in range(TERMINALS):
                headers = sessions[i * SESSIONS // TERMINALS]
                started = answer_of(
                    await http.post(
                        url,
                        headers=headers,
                        json=call("bash", {"command": COMMAND, "run_in_background": True}),
                    )
                )
                found = started["result"]["structuredContent"]
                terminals.append((headers, found["process_id"]))
                with contextlib.suppress(psutil.Error):
                    command = psutil.Process(found["pid"])
                    child.spawned += [command, *([command.parent()] if command.parent() is not None else [])]
            figures = Figures({}, 0.0)
            try:
                async with anyio.create_task_group() as streams:
                    if mode == "console":
                        login = await http.post(
                            f"{base}/console/login",
                            json={"token": TOKEN},
                            headers={"Origin": base, "Content-Type": "application/json"},
                        )
                        login.raise_for_status()
                        streams.start_soon(read_stream, http, f"{base}/console/api/events", figures)
                        for headers, pid in terminals:
                            sid = "mcp-" + headers["Mcp-Session-Id"]
                            path = f"{base}/console/api/sessions/{sid}/processes/{pid}/stream?offset=0"
                            streams.start_soon(read_stream, http, path, figures)
                    await anyio.sleep(WARMUP_SECONDS)
                    await measure(http, url, sessions, child, figures)
                    streams.cancel_scope.cancel()
            finally:
                with anyio.move_on_after(30):
                    async with anyio.create_task_group() as tg:
                        for headers, pid in terminals:
                            stop = call("bash", {"action": "stop", "process_id": pid})
                            tg.start_soon(functools.partial(http.post, url, headers=headers, json=stop))
            profile = child.directory / "profile.txt"
            if PROFILE and mode == "console" and profile.exists():
                print(profile.read_text())
    return figures


async def measure(
    http: httpx2.AsyncClient, url: str, sessions: list[dict[str, str]], child: Child, figures: Figures
) -> None:
    """The window: every session calls run_code every `CALL_PERIOD`, the calls spread over it."""
    me = psutil.Process()
    server_cpu, client_cpu = cpu(child.process), cpu(me)
    child.process.send_signal(signal.SIGUSR1)
    start = time.perf_counter()
    deadline = start + WINDOW_SECONDS

    async def caller(i: int, headers: dict[str, str]) -> None:
        at = start + i * CALL_PERIOD / len(sessions)
        while at < deadline:
            await anyio.sleep(max(0.0, at - time.perf_counter()))
            began = time.perf_counter()
            figures.calls += 1
            try:
                answer = answer_of(
                    await http.post(url, headers=headers, json=call("run_code", {"code": "print(1)"}))
                )
                ok = answer["result"]["structuredContent"]["text"] == "1\n"
            except (httpx2.HTTPError, KeyError, ValueError):
                ok = False
            figures.failed += not ok
            figures.latencies.append(time.perf_counter() - began)
            at += CALL_PERIOD

    async with anyio.create_task_group() as tg:
        for i, headers in enumerate(sessions):
            tg.start_soon(caller, i, headers)
    child.process.send_signal(signal.SIGUSR2)
    figures.window = time.perf_counter() - start
    figures.server_cpu, figures.client_cpu = cpu(child.process) - server_cpu, cpu(me) - client_cpu
    result = child.directory / "stall.json"
    with anyio.fail_after(30):
        while not result.exists():
            await anyio.sleep(0.05)
    figures.stall = json.loads(result.read_text())


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:6.2f} ms"


async def main() -> None:
    results: dict[str, list[Figures]] = {mode: [] for mode in MODES}
    loads: list[str] = []
    for round_no in range(ROUNDS):
        order = MODES if round_no % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            results[mode].append(await run_once(mode))
        loads.append(load())

    def med(mode: str, value: str) -> float:
        return statistics.median(
            f.stall[value] if value in f.stall else getattr(f, value) for f in results[mode]
        )

    print(
        f"console under load: {SESSIONS} sessions, {TERMINALS} terminals, run_code every {CALL_PERIOD:g} s per session, "
        f"{WINDOW_SECONDS:g} s window; medians of {ROUNDS} rotated round(s); {os.cpu_count()} CPUs; loads per round: {', '.join(loads)}"
    )
    for mode in MODES:
        runs = results[mode]
        latency = statistics.median(statistics.median(f.latencies) for f in runs)
        streams = (
            f"streams: {statistics.median(f.stream_bytes for f in runs) / 1024:.0f} KiB, "
            f"{statistics.median(f.events for f in runs):.0f} console events, "
            f"{max(f.streams_ended for f in runs)} ended early"
            if mode == "console"
            else "no console streams"
        )
        print(
            f"{mode:8}  calls {statistics.median(f.calls for f in runs):.0f} made, {max(f.failed for f in runs)} failed "
            f"(run_code median {latency * 1e3:.0f} ms); {streams}"
        )
        print(
            f"          loop stall p50 {ms(med(mode, 'p50'))}  p99 {ms(med(mode, 'p99'))} (target < 10 ms)  "
            f"max {ms(med(mode, 'max'))} (target < 50 ms); worst max of the rounds {ms(max(f.stall['max'] for f in runs))}"
        )
        print(
            f"          CPU seconds in the window: server {med(mode, 'server_cpu'):.2f}, load generator {med(mode, 'client_cpu'):.2f}"
        )
    passed = med("console", "p99") < P99_TARGET and med("console", "max") < MAX_TARGET
    print(
        f"{'PASS' if passed else 'FAIL'}: with the console, loop stall p99 {ms(med('console', 'p99'))} (< 10 ms), "
        f"max {ms(med('console', 'max'))} (< 50 ms)"
    )


if __name__ == "__main__":
    if "--serve" in sys.argv:
        at = sys.argv.index("--serve")
        anyio.run(serve, Path(sys.argv[at + 1]), sys.argv[at + 2])
    else:
        anyio.run(main)
