"""What tracing costs (issue 33 item 5): a program and a tool call untraced and traced.

    python bench/bench_trace.py [--quick] [--engine thread|process] [--base DIR]

Each mode runs in a fresh interpreter of its own, rounds alternating the modes (off, loaded,
on, on, loaded, off, ...); each figure is the median over rounds, the machine's load beside it:

- ``off``: the default configuration, nothing configured; asserts OpenTelemetry was never
  imported (the library as most embedders use it).
- ``loaded``: OpenTelemetry imported but no TracerProvider set (the MCP front: the MCP SDK
  imports it), so every program looks up the global provider and finds none.
- ``on``: a global SDK TracerProvider with a BatchSpanProcessor whose exporter drops the spans
  (the cost of making and queueing them, not of shipping them).
- ``base`` (with ``--base DIR``): a checkout without tracing (its extension built in place),
  the same program: "off" against "not instrumented" in the same run.

Two workloads: ``print(1)`` through ``Host.run_code`` (a program's own cost: one span when on),
and sequential ``await tools.echo(...)`` calls in one program, per call (one span each when on).
Thread mode by default: its per-call cost is the smallest, so any overhead shows the most.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# The measurement, run in a child interpreter per mode and round: prints JSON.
CHILD = r"""
import asyncio, json, statistics, sys, tempfile, time, timeit
from pathlib import Path

mode, engine, n_runs, n_calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "loaded":
    import opentelemetry.trace  # noqa: F401 - loaded, no provider set
elif mode == "on":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)

from codemode import Host


async def main():
    tmp = Path(tempfile.mkdtemp())
    (tmp / "ws").mkdir()
    async with Host(workspace=tmp / "ws", state_dir=tmp / "state", engine=engine) as host:
        @host.tool()
        async def echo(value: int = 0) -> int:
            "Return the value."
            return value

        for _ in range(20):  # warm: workers, contexts, caches
            await host.run_code("print(1)")
        samples = []
        for _ in range(n_runs):
            start = time.perf_counter()
            result = await host.run_code("print(1)")
            samples.append(time.perf_counter() - start)
            assert result.text == "1\n", result.text
        program = f"let s = 0; for (let i = 0; i < {n_calls}; i++) s += await tools.echo({{value: i}}); print(s)"
        await host.run_code(program)
        start = time.perf_counter()
        result = await host.run_code(program)
        per_call = (time.perf_counter() - start) / n_calls
        assert result.text.strip() == str(n_calls * (n_calls - 1) // 2), result.text
    loaded = any(name.startswith("opentelemetry") for name in sys.modules)
    figures = {"print1_us": statistics.median(samples) * 1e6, "call_us": per_call * 1e6, "otel": loaded}
    if mode != "base":  # what tracing adds, as such: the check per program and the lookup per call
        from codemode._trace import Tracing, current

        root = Tracing(None).root
        figures["root_ns"] = min(timeit.repeat(root, number=100_000, repeat=5)) / 100_000 * 1e9
        figures["current_ns"] = min(timeit.repeat(current, number=100_000, repeat=5)) / 100_000 * 1e9
    print(json.dumps(figures))


asyncio.run(main())
"""


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def run_child(mode: str, root: Path, engine: str, n_runs: int, n_calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.TemporaryDirectory() as home:
        env["CODEMODE_HOME"] = home
        done = subprocess.run(
            [sys.executable, "-c", CHILD, mode, engine, str(n_runs), str(n_calls)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            cwd=root,
        )
    if done.returncode != 0:
        raise SystemExit(f"{mode}: {done.stderr}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    if mode in ("off", "base") and figures["otel"]:
        raise SystemExit(f"{mode}: OpenTelemetry was imported")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--engine", choices=["thread", "process"], default="thread")
    parser.add_argument("--base", type=Path, help="a checkout without tracing (extension built in place)")
    args = parser.parse_args()
    rounds = 3 if args.quick else 7
    n_runs, n_calls = (200, 1000) if args.quick else (500, 3000)
    modes = ["off", "loaded", "on"] + (["base"] if args.base else [])
    roots = {mode: HERE for mode in modes}
    if args.base:
        roots["base"] = args.base.resolve()
    samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    print(f"bench_trace: engine {args.engine}, {rounds} rounds, {load()} at the start")
    for number in range(rounds):
        order = modes if number % 2 == 0 else modes[::-1]
        for mode in order:
            samples[mode].append(run_child(mode, roots[mode], args.engine, n_runs, n_calls))
    reference = "base" if args.base else "off"

    def median(mode: str, key: str) -> float:
        return statistics.median(sample[key] for sample in samples[mode])

    print(
        f"{'mode':8} {'print(1) us':>12} {'vs ' + reference:>9} {'call us':>9} {'vs ' + reference:>9}"
        f" {'check/program ns':>17} {'lookup/call ns':>15}"
    )
    for mode in modes:
        p, c = median(mode, "print1_us"), median(mode, "call_us")
        p_ratio, c_ratio = p / median(reference, "print1_us"), c / median(reference, "call_us")
        checks = (
            f" {median(mode, 'root_ns'):17.0f} {median(mode, 'current_ns'):15.0f}" if mode != "base" else ""
        )
        print(f"{mode:8} {p:12.1f} {p_ratio:8.3f}x {c:9.2f} {c_ratio:8.3f}x{checks}")
    print(f"({load()} at the end)")


if __name__ == "__main__":
    main()
