"""The console under load: the HTTP server's event-loop stall with 200 MCP sessions and 50 live
terminals open in the console, beside the same server with the console off.

    python -m bench.bench_console [--quick] [--profile]

Each run starts a server (this file with ``--serve``: `serve_http` in a child process, and a task
that sleeps 5 ms in a loop and records how late it wakes; garbage collections are timed too),
opens 200 MCP sessions over raw HTTP and starts 50 background processes across them, each
printing 20 lines a second. With the console, the load generator logs in and reads every
process's terminal stream and the event stream throughout; the baseline (``console=OFF``) has the
same sessions, processes and calls. In the measured window every session calls ``run_code``
``print(1)`` every 10 s (spread out). The modes alternate over 3 rounds (1 with ``--quick``);
figures are medians over rounds, the load beside them. ``--profile``: cProfile on the server's
loop thread in each window. Target (the scale issue's): with the console, stall p99 < 10 ms and
max < 50 ms."""

from __future__ import annotations

import contextlib
import cProfile
import functools
import gc
import json
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
from anyio.abc import TaskGroup

from codemode.sandbox._tmpfs import sweep_stale_tmp

ROOT = Path(__file__).resolve().parent.parent
QUICK = "--quick" in sys.argv
PROFILE = "--profile" in sys.argv
WHERE = "--where" in sys.argv  # sample the loop thread's stack while it is stalled past WHERE_AFTER
WHERE_AFTER = 0.020
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
CLIENT = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MODES = ("console", "baseline")


def load() -> str:
    return "load {:.2f}/{:.2f}".format(*os.getloadavg()[:2])


# ---- the server (a child process) --------------------------------------------------------------


@dataclass
class Window:
    on: bool = False
    samples: list[float] = field(default_factory=list)  # how late each wake-up was
    on_cpu: list[float] = field(default_factory=list)  # each lateness less the loop thread's run-queue wait
    beat: float = 0.0  # when the monitor last woke
    where: dict[str, int] = field(default_factory=dict)  # with --where: stalled stacks, sampled
    gc_max: float = 0.0  # the longest garbage collection (its pause stops the loop too)
    gc_started: float = 0.0
    gc_full: int = 0  # full (generation 2) collections in the window
    gc_seconds: float = 0.0  # all collections' time in the window
    profiler: cProfile.Profile | None = None

    def time_gc(self, phase: str, info: dict[str, int]) -> None:  # (a `gc.callbacks` entry)
        if phase == "start":
            self.gc_started = time.perf_counter()
        elif self.on:
            took = time.perf_counter() - self.gc_started
            self.gc_max = max(self.gc_max, took)
            self.gc_seconds += took
            self.gc_full += info["generation"] == 2


def _run_queue_wait() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (the kernel's schedstat), so
    a stall can be told apart from the loop waiting its turn on two shared cores."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stat:
            return int(stat.read().split()[1]) / 1e9
    except OSError:  # a kernel without schedstats: every stall then counts as the loop's own
        return 0.0


async def _monitor(window: Window) -> None:
    if WHERE:
        threading.Thread(target=_where, args=(window, threading.get_ident()), daemon=True).start()
    while True:
        start, waited = time.perf_counter(), _run_queue_wait()
        await anyio.sleep(TICK)
        window.beat = time.perf_counter()
        if window.on:
            late = window.beat - start - TICK
            window.samples.append(late)
            window.on_cpu.append(max(0.0, late - (_run_queue_wait() - waited)))


def _where(window: Window, loop_thread: int) -> None:
    """(--where) Every 5 ms: when the loop has not woken for WHERE_AFTER, count where its thread
    is (its innermost frames); the window's figures name the most frequent places."""
    while True:
        time.sleep(0.005)
        if not window.on or time.perf_counter() - window.beat < WHERE_AFTER:
            continue
        frame = sys._current_frames().get(loop_thread)
        stack = traceback.extract_stack(frame, limit=None)[-6:] if frame is not None else []
        place = " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(stack))
        window.where[place] = window.where.get(place, 0) + 1


async def _control(window: Window, directory: Path) -> None:
    """SIGUSR1 opens the measured window, SIGUSR2 closes it and writes its figures."""
    with anyio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2) as received:
        async for signum in received:
            if signum == signal.SIGUSR1:
                window.samples, window.on_cpu, window.where, window.gc_max = [], [], {}, 0.0
                window.on = True
                window.gc_full, window.gc_seconds = 0, 0.0
                if PROFILE:
                    window.profiler = cProfile.Profile()
                    window.profiler.enable()
                continue
            window.on = False
            if window.profiler is not None:
                window.profiler.disable()
                window.profiler.dump_stats(directory / "profile.pstats")
            late = window.samples or [0.0, 0.0]
            p50, p99 = statistics.median(late), statistics.quantiles(late, n=100)[98]
            stall = {
                "p50": p50,
                "p99": p99,
                "max": max(late),
                "max_on_cpu": max(window.on_cpu or [0.0]),
                "where": sorted(window.where.items(), key=lambda kv: -kv[1])[:8],
                "gc": window.gc_max,
                "gc_full": window.gc_full,
                "gc_seconds": window.gc_seconds,
            }
            write_at_once(directory / "stall.json", json.dumps(stall))


def write_at_once(path: Path, text: str) -> None:  # (a reader sees all of it or nothing)
    path.with_suffix(".tmp").write_text(text)
    path.with_suffix(".tmp").rename(path)


async def serve(directory: Path, console: str) -> None:
    from codemode import Host
    from codemode.console import ConsoleMode
    from codemode.mcp import HttpOptions, serve_http

    (directory / "ws").mkdir(exist_ok=True)
    host = Host(workspace=directory / "ws", state_dir=directory / "state")
    options = HttpOptions(token=TOKEN, port=0, console=ConsoleMode(console))

    window = Window()
    gc.callbacks.append(window.time_gc)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_monitor, window)
        tg.start_soon(_control, window, directory)
        await serve_http(host, options, announce=lambda url: write_at_once(directory / "url.txt", url))
        tg.cancel_scope.cancel()


# ---- the load generator ----------------------------------------------------------------------


@dataclass
class Child:
    url: str
    process: psutil.Process
    directory: Path
    spawned: list[psutil.Process] = field(default_factory=list)  # background commands, supervisors


@contextlib.contextmanager
def server(directory: Path, console: str, module: str = "bench.bench_console") -> Iterator[Child]:
    """Start the server child (``module`` with ``--serve DIRECTORY console``); stop it and
    whatever it left running after, whatever happened."""
    shared = ROOT.parent / "shared" / "tiktoken-cache"  # (as run_all.py: the tokenizer offline)
    env = {**({"TIKTOKEN_CACHE_DIR": str(shared)} if shared.is_dir() else {}), **os.environ}
    command = [sys.executable, "-m", module, "--serve", str(directory), console]
    command += sys.argv[1:]  # (--profile)
    with (directory / "server.stderr").open("wb") as sink:
        popen = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stderr=sink)
    child = Child("", psutil.Process(popen.pid), directory)
    try:
        deadline = time.monotonic() + 60
        while not (directory / "url.txt").exists():
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {(directory / 'server.stderr').read_text()}")
            time.sleep(0.05)
        child.url = (directory / "url.txt").read_text()
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
        with contextlib.suppress(OSError):
            sweep_stale_tmp(directory / "state" / "tmp")  # session tmpfs mounts a stopped host left


@dataclass
class Terminal:
    headers: dict[str, str]  # of its MCP session's requests
    process_id: str


@dataclass
class Figures:
    p50: float = 0.0  # the server loop's stall: median, 99th percentile, worst
    p99: float = 0.0
    max: float = 0.0
    gc: float = 0.0  # the server's longest garbage collection in the window
    calls: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    server_cpu: float = 0.0
    client_cpu: float = 0.0
    stream_bytes: int = 0
    streams_ended: int = 0
    events: int = 0


def answer_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer (a JSON body, or the last ``data:`` of an SSE stream)."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    answer: dict[str, Any] = json.loads(text)
    return answer


def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}


async def open_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """Initialize and initialized, by hand; the headers of the session's requests."""
    auth = {**ACCEPT, "Authorization": f"Bearer {TOKEN}"}
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": CLIENT}
    opened = await http.post(url, headers=auth, json=initialize)
    opened.raise_for_status()
    headers = {**auth, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": PROTOCOL}
    ready = await http.post(
        url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    ready.raise_for_status()
    return headers


def own_cpu(process: psutil.Process) -> float:
    """User and system seconds of ``process`` (not of its children)."""
    times = process.cpu_times()
    return float(times.user + times.system)


def start_callers(
    tg: TaskGroup,
    sessions: list[dict[str, str]],
    start: float,
    deadline: float,
    period: float,
    call_once: Callable[[dict[str, str]], Awaitable[None]],
) -> None:
    """In ``tg``: every session's ``call_once`` every ``period`` until ``deadline``, the
    sessions' calls spread evenly over the period."""

    async def caller(i: int, headers: dict[str, str]) -> None:
        at = start + i * period / len(sessions)
        while at < deadline:
            await anyio.sleep(max(0.0, at - time.perf_counter()))
            await call_once(headers)
            at += period

    for i, headers in enumerate(sessions):
        tg.start_soon(caller, i, headers)


async def read_stall(directory: Path) -> dict[str, Any]:
    """The server's figures of the window it closed on SIGUSR2 (its `_control` writes them)."""
    result = directory / "stall.json"
    with anyio.fail_after(30):
        while not result.exists():
            await anyio.sleep(0.05)
    found: dict[str, Any] = json.loads(result.read_text())
    return found


async def read_stream(http: httpx2.AsyncClient, path: str, params: dict[str, str], figures: Figures) -> None:
    """Read a server-sent event stream until cancelled, counting what came."""
    async with http.stream("GET", path, params=params, timeout=httpx2.Timeout(30, read=None)) as stream:
        stream.raise_for_status()
        async for line in stream.aiter_lines():
            figures.stream_bytes += len(line)
            if path.endswith("/events") and line.startswith("event:"):
                figures.events += 1
    figures.streams_ended += 1


async def start_terminals(
    http: httpx2.AsyncClient, child: Child, sessions: list[dict[str, str]], terminals: list[Terminal]
) -> None:
    """`TERMINALS` background processes, spread over the sessions; their pids kept to clean up."""
    request = call("bash", {"command": COMMAND, "run_in_background": True})
    for i in range(TERMINALS):
        headers = sessions[i * SESSIONS // TERMINALS]
        found = answer_of(await http.post(child.url, headers=headers, json=request))
        process = found["result"]["structuredContent"]
        terminals.append(Terminal(headers, process["process_id"]))
        with contextlib.suppress(psutil.Error):
            command = psutil.Process(process["pid"])
            child.spawned += [command, *filter(None, [command.parent()])]  # and its supervisor


async def watch_console(
    http: httpx2.AsyncClient, base: str, terminals: list[Terminal], figures: Figures, tg: TaskGroup
) -> None:
    """Log in to the console, read its event stream and every terminal's, in ``tg``."""
    same_origin = {"Origin": base, "Content-Type": "application/json"}
    login = await http.post(f"{base}/console/login", json={"token": TOKEN}, headers=same_origin)
    login.raise_for_status()
    key = login.json().get("key")  # the login's second half, where the console has one: ?key= on streams
    params = {"key": key} if key else {}
    tg.start_soon(read_stream, http, f"{base}/console/api/events", params, figures)
    for t in terminals:
        session_id = "mcp-" + t.headers["Mcp-Session-Id"]  # (the front's name for an MCP session)
        at = f"{base}/console/api/sessions/{session_id}/processes/{t.process_id}"
        tg.start_soon(read_stream, http, f"{at}/stream", {"offset": "0", **params}, figures)


async def run_once(mode: str) -> Figures:
    figures = Figures()
    with (
        tempfile.TemporaryDirectory(prefix="bench-console-") as tmp,
        server(Path(tmp), "on" if mode == "console" else "off") as child,
    ):
        limits = httpx2.Limits(max_connections=SESSIONS + TERMINALS + 64, max_keepalive_connections=SESSIONS)
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(60), limits=limits) as http:
            sessions: list[dict[str, str]] = []

            async def opener() -> None:
                sessions.append(await open_session(http, child.url))

            for _ in range(0, SESSIONS, 20):  # 20 at a time
                async with anyio.create_task_group() as tg:
                    for _ in range(20):
                        tg.start_soon(opener)
            terminals: list[Terminal] = []
            try:
                await start_terminals(http, child, sessions, terminals)
                async with anyio.create_task_group() as streams:
                    if mode == "console":
                        await watch_console(http, child.url.removesuffix("/mcp"), terminals, figures, streams)
                    await anyio.sleep(WARMUP_SECONDS)
                    await measure(http, sessions, child, figures)
                    streams.cancel_scope.cancel()
            finally:  # (the server's stop ends them too; `server` kills what is left)
                with anyio.move_on_after(30):
                    async with anyio.create_task_group() as tg:
                        for t in terminals:
                            stop = call("bash", {"action": "stop", "process_id": t.process_id})
                            tg.start_soon(
                                functools.partial(http.post, child.url, headers=t.headers, json=stop)
                            )
        keep_profile(child, f"bench_console.{mode}", "the window", "tottime", 15)
    return figures


def keep_profile(child: Child, name: str, what: str, sort: str, top: int) -> None:
    """With ``--profile``: keep the server loop's profile (as ``$TMPDIR/<name>.pstats``) and
    print its ``top`` entries by ``sort``."""
    if PROFILE and (child.directory / "profile.pstats").exists():
        kept = Path(tempfile.gettempdir()) / f"{name}.pstats"
        shutil.copy(child.directory / "profile.pstats", kept)
        print(f"{name.rpartition('.')[2]}: the server loop's profile of {what} is in {kept}; its top:")
        pstats.Stats(str(kept)).sort_stats(sort).print_stats(top)


async def measure(
    http: httpx2.AsyncClient, sessions: list[dict[str, str]], child: Child, figures: Figures
) -> None:
    """The window: every session calls run_code every `CALL_PERIOD`, the calls spread over it."""
    me = psutil.Process()
    server_cpu, client_cpu = own_cpu(child.process), own_cpu(me)
    (child.directory / "stall.json").unlink(missing_ok=True)
    child.process.send_signal(signal.SIGUSR1)
    start = time.perf_counter()

    async def call_once(headers: dict[str, str]) -> None:
        began = time.perf_counter()
        figures.calls += 1
        try:
            request = call("run_code", {"code": "print(1)"})
            answer = answer_of(await http.post(child.url, headers=headers, json=request))
            ok = answer["result"]["structuredContent"]["text"] == "1\n"
        except (httpx2.HTTPError, KeyError, ValueError):
            ok = False
        figures.failed += not ok
        figures.latencies.append(time.perf_counter() - began)

    async with anyio.create_task_group() as tg:
        start_callers(tg, sessions, start, start + WINDOW_SECONDS, CALL_PERIOD, call_once)
    child.process.send_signal(signal.SIGUSR2)
    figures.server_cpu, figures.client_cpu = own_cpu(child.process) - server_cpu, own_cpu(me) - client_cpu
    stall = await read_stall(child.directory)
    figures.p50, figures.p99, figures.max, figures.gc = stall["p50"], stall["p99"], stall["max"], stall["gc"]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def median(runs: list[Figures], name: str) -> float:
    return statistics.median(float(getattr(f, name)) for f in runs)


async def main() -> None:
    results: dict[str, list[Figures]] = {mode: [] for mode in MODES}
    loads: list[str] = []
    for round_no in range(ROUNDS):
        for mode in MODES if round_no % 2 == 0 else tuple(reversed(MODES)):
            results[mode].append(await run_once(mode))
        loads.append(load())
    print(
        f"console under load: {SESSIONS} sessions, {TERMINALS} terminals, run_code every {CALL_PERIOD:g} s "
        f"per session, {WINDOW_SECONDS:g} s window; medians of {ROUNDS} rotated round(s); "
        f"{os.cpu_count()} CPUs; loads per round: {', '.join(loads)}"
    )
    for mode, runs in results.items():
        streams = (
            f"{median(runs, 'stream_bytes') / 1024:.0f} KiB and {median(runs, 'events'):.0f} console events "
            f"read, {max(f.streams_ended for f in runs)} streams ended early"
            if mode == "console"
            else "no console streams"
        )
        latency = statistics.median(statistics.median(f.latencies) for f in runs)
        print(
            f"{mode:8}  calls {median(runs, 'calls'):.0f} made, {max(f.failed for f in runs)} failed "
            f"(run_code median {latency * 1e3:.0f} ms); {streams}\n"
            f"          loop stall p50 {ms(median(runs, 'p50'))}, p99 {ms(median(runs, 'p99'))} "
            f"(target < 10 ms), max {ms(median(runs, 'max'))} (target < 50 ms; rounds: "
            f"{', '.join(ms(f.max) for f in runs)}); "
            f"longest GC pause {ms(median(runs, 'gc'))}\n"
            f"          CPU seconds in the window: server {median(runs, 'server_cpu'):.2f}, "
            f"load generator {median(runs, 'client_cpu'):.2f}"
        )
    p99, worst = median(results["console"], "p99"), median(results["console"], "max")
    verdict = "PASS" if p99 < P99_TARGET and worst < MAX_TARGET else "FAIL"
    print(f"{verdict}: with the console, loop stall p99 {ms(p99)} (< 10 ms), max {ms(worst)} (< 50 ms)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:  # (the server child: --serve DIRECTORY on|off)
        anyio.run(serve, Path(sys.argv[2]), sys.argv[3])
    else:
        anyio.run(main)
