"""Benchmarks of the Monitor and of waiting on processes; every number beside a baseline measured
in the same run.

Run: ``PYTHONPATH=. python bench/bench_monitor.py [--lines 30] [--watchers 100]``

1. A line printed by a watcher to ``host.notifications()`` yielding it: median (target
   <= 50 ms), beside the raw pipe read of the same line (a child printing it to a pipe this
   process reads).
2. ``bash wait`` on a pattern: from the line reaching the log to the wait returning (target
   <= 20 ms), beside the raw pipe read.
3. N watchers in one session: start, list and stop times; every watcher's event delivered.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import anyio

from codemode import Host


def _ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:.1f} ms, max {max(samples) * 1000:.1f} ms"


def raw_pipe(root: Path, lines: int) -> list[float]:
    """A child reads a line from a FIFO and prints it; this process reads the pipe."""
    fifo = root / "raw.fifo"
    os.mkfifo(fifo)
    child = subprocess.Popen(
        ["bash", "-c", f'exec 3<>{fifo}; while read -r x <&3; do echo "ev $x"; done'],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    samples = []
    with open(fifo, "w") as writer:
        for i in range(lines):
            start = time.monotonic()
            writer.write(f"{i}\n")
            writer.flush()
            child.stdout.readline()
            samples.append(time.monotonic() - start)
    child.kill()
    child.wait()
    return samples


async def watcher_to_notification(host: Host, root: Path, lines: int) -> list[float]:
    fifo = host.workspace / "w.fifo"
    os.mkfifo(fifo)
    started = await host.call_tool(
        "monitor_start",
        {
            "command": f'exec 3<>{fifo}; while read -r x <&3; do echo "ev $x"; done',
            "max_events_per_minute": 600,
        },
    )
    wid = started.structured_content["watcher_id"]  # type: ignore[index]
    samples = []
    with open(fifo, "w") as writer:
        stream = host.notifications()
        for i in range(lines):
            await anyio.sleep(0.3)  # past the coalescing window: each line is an event of its own
            start = time.monotonic()
            writer.write(f"{i}\n")
            writer.flush()
            with anyio.fail_after(10):
                note = await stream.__anext__()
            samples.append(time.monotonic() - start)
            assert f"ev {i}" in note.text, note.text
        await stream.aclose()
    await host.call_tool("monitor_stop", {"watcher_id": wid})
    return samples


async def _wait_for(host: Host, pid: str, pattern: str, offset: int, result: dict[str, object]) -> None:
    got = await host.call_tool(
        "bash",
        {
            "action": "wait",
            "process_id": pid,
            "until": {"pattern": pattern},
            "offset_bytes": offset,
            "timeout_ms": 10_000,
        },
    )
    result.update(got.structured_content or {})
    result["done"] = time.monotonic()


async def wait_on_pattern(host: Host, lines: int) -> list[float]:
    fifo = host.workspace / "b.fifo"
    os.mkfifo(fifo)
    started = await host.call_tool(
        "bash",
        {
            "command": f'exec 3<>{fifo}; while read -r x <&3; do echo "ready $x"; done',
            "run_in_background": True,
        },
    )
    pid = started.structured_content["process_id"]  # type: ignore[index]
    samples = []
    offset = 0
    with open(fifo, "w") as writer:
        for i in range(lines):
            result: dict[str, object] = {}
            async with anyio.create_task_group() as tg:
                tg.start_soon(_wait_for, host, pid, f"ready {i}$", offset, result)
                await anyio.sleep(0.05)  # the wait is waiting
                start = time.monotonic()
                writer.write(f"{i}\n")
                writer.flush()
            assert result["reason"] == "pattern", result
            offset = int(result["next_offset"])  # type: ignore[call-overload]
            samples.append(float(result["done"]) - start)  # type: ignore[arg-type]
    await host.call_tool("bash", {"action": "stop", "process_id": pid})
    return samples


async def background_start(host: Host, count: int) -> float:
    """Baseline: seconds per background run started through the bash tool (same supervisor path)."""
    start = time.monotonic()
    ids = []
    for _ in range(count):
        result = await host.call_tool("bash", {"command": "exec sleep 1000", "run_in_background": True})
        ids.append(result.structured_content["process_id"])  # type: ignore[index]
    each = (time.monotonic() - start) / count
    for pid in ids:
        await host.call_tool("bash", {"action": "stop", "process_id": pid})
    return each


async def many_watchers(host: Host, count: int) -> None:
    baseline = await background_start(host, 20)
    start = time.monotonic()
    ids = []
    for i in range(count):
        result = await host.call_tool(
            "monitor_start",
            {"command": f"echo watcher-{i}; exec sleep 1000"},
        )
        assert not result.is_error, result.text
        ids.append(result.structured_content["watcher_id"])  # type: ignore[index]
    started = time.monotonic() - start
    seen: set[str] = set()
    with anyio.fail_after(120):
        async for note in host.notifications():
            if note.kind == "event" and note.text.split(": ", 1)[-1].startswith("watcher-"):
                seen.add(note.process_id)
            if len(seen) == count:
                break
    start = time.monotonic()
    listed = await host.call_tool("monitor_list", {})
    list_time = time.monotonic() - start
    listed_ids = {w["watcher_id"] for w in listed.structured_content["watchers"]}  # type: ignore[index]
    assert set(ids) <= listed_ids
    start = time.monotonic()
    for wid in ids:
        stopped = await host.call_tool("monitor_stop", {"watcher_id": wid})
        assert not stopped.is_error, stopped.text
    stop_time = time.monotonic() - start
    print(
        f"{count} watchers: start {started:.2f} s ({started / count * 1000:.0f} ms each), list {list_time * 1000:.0f} ms, "
        f"stop {stop_time:.2f} s ({stop_time / count * 1000:.0f} ms each); events delivered {len(seen)}/{count}; "
        f"start x{started / count / baseline:.2f} a background run's ({baseline * 1000:.0f} ms)"
    )


async def main(lines: int, watchers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        raw = raw_pipe(root, lines)
        print(f"raw pipe read of a line:             {_ms(raw)}")
        # An embedder that takes notifications from host.notifications(), not from results.
        async with Host(workspace=root / "ws", state_dir=root / "state", notify_in_results=False) as host:
            notified = await watcher_to_notification(host, root, lines)
            print(
                f"watcher line -> host.notifications(): {_ms(notified)} "
                f"(x{statistics.median(notified) / statistics.median(raw):.0f} the raw read; target <= 50 ms)"
            )
            waited = await wait_on_pattern(host, lines)
            print(
                f"line -> bash wait on a pattern:      {_ms(waited)} "
                f"(x{statistics.median(waited) / statistics.median(raw):.0f} the raw read; target <= 20 ms)"
            )
            if watchers:
                await many_watchers(host, watchers)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=30)
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="10 lines, 20 watchers")
    options = parser.parse_args()
    if options.quick:
        options.lines, options.watchers = 10, 20
    anyio.run(main, options.lines, options.watchers)
