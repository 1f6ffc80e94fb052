"""Benchmarks of the bash tool; every ratio against a baseline measured in the same run.

Run: ``PYTHONPATH=. python bench/bench_bash.py [--gb 1] [--background 100]``

1. Foreground ``true`` through the tool vs ``subprocess.run(["bash", "-c", "true"])`` (target <= 1.5x),
   in full-access and in the default workspace-write sandbox.
2. 1 GB of output through ``run``: MB/s (target >= 200) and peak RSS growth (target <= 64 MB),
   beside the same run redacting every byte as it is written (the log is stored raw in the
   private state dir and redacted when read; the model's excerpts are always redacted).
3. ``read`` with ``wait_ms``: time from the output reaching the log file to ``read`` returning
   (target <= 20 ms).
4. 100 background processes in one session: start, list, read, stop all, correctness checked.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import psutil

from codemode.policy import CommandGuard, CommandPolicy, Trash
from codemode.sandbox import SandboxMode, SandboxPolicy
from codemode.state import Archive, State
from codemode.state._redact import Redactor
from codemode.state._stream import StreamRedactor
from codemode.tools._model import ToolContext, ToolResult
from codemode.tools.bash import ProcessManager
from codemode.tools.bash._manager import QUIET_SECONDS


class Bash:
    def __init__(self, manager: ProcessManager, ctx: ToolContext) -> None:
        self.tool = manager.extension().tools[0]
        self.ctx = ctx

    async def __call__(self, **args: Any) -> ToolResult:
        model = self.tool.input_model.model_validate(args)
        result: ToolResult = await self.tool.handler(**self.tool.bind(model, self.ctx))
        return result


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def bench_true(root: Path, archive: Archive, n: int) -> None:
    ws = root / "ws"
    manager = ProcessManager(archive, handoff_seconds=10)
    full = Bash(manager, ToolContext("b", ws, SandboxPolicy(mode=SandboxMode.FULL_ACCESS), archive))
    confined = Bash(
        manager,
        ToolContext(
            "b",
            ws,
            SandboxPolicy(writable_roots=(ws,), temp_dir=root / "tmp", protected=(root / "state",)),
            archive,
        ),
    )
    # The host's default gate: the command policy checked, the rm shim and its inbox set up.
    guard = CommandGuard(CommandPolicy(), Trash(root / "state", ws))
    guarded_manager = ProcessManager(archive, handoff_seconds=10, command_gate=guard)
    guarded = Bash(guarded_manager, confined.ctx)
    for _ in range(10):  # warm up
        await full(command="true")
        await confined(command="true")
        await guarded(command="true")
        subprocess.run(["bash", "-c", "true"])
    repo = ws / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "x"], cwd=repo, check=True, env=env)
    base: list[float] = []
    tool_full: list[float] = []
    tool_confined: list[float] = []
    in_git: list[float] = []
    tool_guarded: list[float] = []

    async def run_base() -> None:
        subprocess.run(["bash", "-c", "true"])

    async def run_full() -> None:
        await full(command="true")

    async def run_confined() -> None:
        await confined(command="true")

    async def run_in_git() -> None:
        await confined(command="true", cwd="repo")

    async def run_guarded() -> None:
        await guarded(command="true")

    kinds = [
        (run_base, base),
        (run_full, tool_full),
        (run_confined, tool_confined),
        (run_in_git, in_git),
        (run_guarded, tool_guarded),
    ]
    load = os.getloadavg()[0]
    for i in range(n):
        # Interleaved, so load changes hit all alike, and in turn first, second, ...: whatever
        # runs right after another kind (caches, the allocator) does not favour one of them.
        for run, samples in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
            t = time.perf_counter()
            await run()
            samples.append(time.perf_counter() - t)
    b = _median_ms(base)
    print(f"[true] subprocess.run(bash -c true): {b:.2f} ms median (n={n})")
    print(
        f"[true] bash tool, full-access:      {_median_ms(tool_full):.2f} ms  ratio {_median_ms(tool_full) / b:.2f}x"
    )
    print(
        f"[true] bash tool, workspace-write:  {_median_ms(tool_confined):.2f} ms  "
        f"ratio {_median_ms(tool_confined) / b:.2f}x   (target <= 1.5x)"
    )
    print(
        f"[true] bash tool, workspace-write, cwd in a git work tree (HEAD read from files): "
        f"{_median_ms(in_git):.2f} ms  ratio {_median_ms(in_git) / b:.2f}x"
    )
    print(
        f"[true] bash tool, workspace-write, the host's command gate (policy, rm shim, trash filing): "
        f"{_median_ms(tool_guarded):.2f} ms  ratio {_median_ms(tool_guarded) / b:.2f}x"
    )
    print(f"[true] load average (1 min) before / after: {load:.2f} / {os.getloadavg()[0]:.2f}")
    await manager.aclose()
    await guarded_manager.aclose()


class _RssSampler:
    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def bench_gigabyte(root: Path, archive: Archive, gb: float) -> None:
    total = int(gb * 1_000_000_000)
    chunk = (b"a line of ordinary build output, 0123456789 abcdef\n" * 20000)[: 1 << 20]
    redactor = StreamRedactor(Redactor())
    redactor.feed(b"warm up: the rules compile once per process, outside the timing " * 16 + b"\n")
    t = time.perf_counter()
    for _ in range(200):
        redactor.feed(chunk)
    redact_mbs = 200 * len(chunk) / 1e6 / (time.perf_counter() - t)

    manager = ProcessManager(archive, handoff_seconds=None)
    bash = Bash(manager, ToolContext("b", root / "ws", SandboxPolicy(mode=SandboxMode.FULL_ACCESS), archive))
    command = f"yes 'a line of ordinary build output, 0123456789 abcdef' | head -c {total}"
    t = time.perf_counter()
    subprocess.run(["bash", "-c", command], stdout=subprocess.DEVNULL)
    producer = time.perf_counter() - t
    with _RssSampler() as rss:
        t = time.perf_counter()
        result = await bash(command=command, timeout_seconds=3600)
        elapsed = time.perf_counter() - t
    assert result.structured_content["stdout"]["bytes"] == total, result.structured_content["stdout"]
    mbs = total / 1e6 / elapsed
    print(f"[1GB] producer alone (to /dev/null): {total / 1e6 / producer:.0f} MB/s")
    print(f"[1GB] archive stream redaction alone (1 MiB chunks): {redact_mbs:.0f} MB/s")
    print(f"[1GB] run: {total / 1e6:.0f} MB in {elapsed:.2f} s = {mbs:.0f} MB/s   (target >= 200)")
    print(f"[1GB] peak RSS growth: {(rss.peak - rss.base) / 1e6:.1f} MB   (target <= 64)")

    # Reference: the same run with every byte redacted as it is written (what the log did before
    # it was stored raw and redacted on read), and the price of that on read: one 64 KiB page.
    open_log = archive.open_log
    archive.open_log = lambda **kw: open_log(**{**kw, "redact": True})  # type: ignore[method-assign]
    try:
        t = time.perf_counter()
        await bash(command=command, timeout_seconds=3600)
        redacting = time.perf_counter() - t
    finally:
        archive.open_log = open_log  # type: ignore[method-assign]
    print(
        f"[1GB] reference, redacting every byte while writing: {total / 1e6 / redacting:.0f} MB/s  "
        f"(run is {redacting / elapsed:.2f}x faster)"
    )
    ref = result.structured_content["log"]["ref"]
    t = time.perf_counter()
    for offset in range(0, 64 * 1024 * 100, 64 * 1024):
        archive.read(ref, offset, 64 * 1024)
    print(
        f"[1GB] reading the stored log back, redacted: {(time.perf_counter() - t) * 1000 / 100:.2f} ms per 64 KiB page"
    )
    await manager.aclose()


async def _one_read(bash: Bash, pid: str, log_path: Path, offset: int, text: str) -> tuple[float, int]:
    """One round: a read waits; input makes the command print; time from log growth to return."""
    appeared: list[float] = []
    returned: list[tuple[float, int]] = []

    def watch() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if log_path.stat().st_size > offset:
                appeared.append(time.perf_counter())
                return

    async def reader() -> None:
        res = await bash(action="read", process_id=pid, offset_bytes=offset, wait_ms=10_000)
        returned.append((time.perf_counter(), res.structured_content["next_offset"]))

    watcher = threading.Thread(target=watch)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.sleep(0.05)  # the reader is waiting
        watcher.start()
        await bash(action="write", process_id=pid, input=text)
    watcher.join()
    return returned[0][0] - appeared[0], returned[0][1]


async def bench_read_latency(root: Path, archive: Archive, rounds: int) -> None:
    manager = ProcessManager(archive, handoff_seconds=None)
    bash = Bash(manager, ToolContext("b", root / "ws", SandboxPolicy(mode=SandboxMode.FULL_ACCESS), archive))
    started = await bash(command='while read -r line; do echo "$line"; done', run_in_background=True)
    pid = started.structured_content["process_id"]
    log_path = Path(manager._get("b", pid).log_path)
    offset = 0
    latencies = []
    for i in range(rounds):
        latency, offset = await _one_read(bash, pid, log_path, offset, f"line {i}\n")
        latencies.append(latency)
    await bash(action="stop", process_id=pid)
    ms = sorted(x * 1000 for x in latencies)
    # A waiting read returns once output has been quiet for QUIET_SECONDS (issue 12: never on a
    # burst's first byte), so what it can be faster at is what comes after that gap.
    gap = QUIET_SECONDS * 1000
    print(
        f"[read wait_ms] output in log -> read returns: median {statistics.median(ms):.1f} ms, "
        f"max {ms[-1]:.1f} ms over {rounds} rounds; beyond the {gap:.0f} ms quiet gap: median "
        f"{statistics.median(ms) - gap:.1f} ms   (target: the gap + <= 20 ms)"
    )
    await manager.aclose()


async def bench_background(root: Path, archive: Archive, count: int) -> None:
    manager = ProcessManager(archive, handoff_seconds=None, max_background_per_session=count)
    bash = Bash(
        manager, ToolContext("many", root / "ws", SandboxPolicy(mode=SandboxMode.FULL_ACCESS), archive)
    )
    # The secret rules load and compile once per process (a Host starts that when it opens:
    # compile_rules_soon); a long text compiles them here, outside the timing, as in the 1GB
    # section, so the list below measures listing, not the rules' first use.
    Redactor().redact("warm up: the rules compile once per process, outside the timing " * 16)
    t = time.perf_counter()
    ids = []
    for i in range(count):
        res = await bash(command=f"echo n{i}; exec sleep 1000", run_in_background=True)
        ids.append(res.structured_content["process_id"])
    t_start = time.perf_counter() - t
    t = time.perf_counter()
    listed = (await bash(action="list")).structured_content["processes"]
    t_list = time.perf_counter() - t
    assert sorted(p["process_id"] for p in listed) == sorted(ids)
    assert all(p["state"] == "running" for p in listed)
    t = time.perf_counter()
    for i, pid in enumerate(ids):
        out = ""
        while f"n{i}" not in out:
            out += (await bash(action="read", process_id=pid, wait_ms=5000)).structured_content["output"]
    t_read = time.perf_counter() - t
    supervisors = [
        m.pid
        for m in psutil.process_iter(["cmdline"])
        if "tools/bash/supervisor" in " ".join(m.info["cmdline"] or [])
    ]
    rss = sum(psutil.Process(p).memory_info().rss for p in supervisors if psutil.pid_exists(p)) / max(
        len(supervisors), 1
    )
    t = time.perf_counter()
    for pid in ids:
        await bash(action="stop", process_id=pid)
    t_stop = time.perf_counter() - t
    states = {p["state"] for p in (await bash(action="list")).structured_content["processes"]}
    assert states == {"stopped"}, states
    print(
        f"[{count} background] start {t_start / count * 1000:.0f} ms each, list {t_list * 1000:.0f} ms, "
        f"read {t_read / count * 1000:.1f} ms each, stop {t_stop / count * 1000:.0f} ms each; all correct; "
        f"supervisor RSS ~{rss / 1e6:.0f} MB each"
    )
    await manager.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--background", type=int, default=100)
    parser.add_argument("--true-runs", type=int, default=200)
    parser.add_argument("--read-rounds", type=int, default=30)
    parser.add_argument("--only", choices=["true", "read", "background", "gb"], action="append")
    args = parser.parse_args()
    parts = set(args.only or ["true", "read", "background", "gb"])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        (root / "tmp").mkdir()
        archive_state = State(root / "state")
        archive = archive_state.archive
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        if "true" in parts:
            await bench_true(root, archive, args.true_runs)
        if "read" in parts:
            await bench_read_latency(root, archive, args.read_rounds)
        if "background" in parts:
            await bench_background(root, archive, args.background)
        if "gb" in parts:
            await bench_gigabyte(root, archive, args.gb)
        archive_state.close()


if __name__ == "__main__":
    anyio.run(main)
