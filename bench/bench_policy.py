"""Benchmarks of the command policy; every ratio against a baseline measured in the same run.

Run: ``PYTHONPATH=. python bench/bench_policy.py [--quick]``

1. A policy check (parse + walk + rules) of a typical pipeline (``git diff | grep x | wc -l``) and
   of a 200-line script: µs per check, beside tree-sitter-bash's parse alone and, when bashlex is
   installed (``pip install bashlex``; not a dependency), bashlex's parse of the same text.
2. A foreground command started without a shell (argv, and a plain command line) vs the same
   through ``bash -c``: ms per run through the tool (default workspace-write sandbox).
3. ``rm`` of one file through the protected-deletes shim vs ``/bin/rm`` (both through the tool).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from codemode import Host
from codemode.policy import CommandPolicy
from codemode.policy._shell import _parser

PIPELINE = "git diff | grep x | wc -l"
SCRIPT = "\n".join(
    f'if [ -f "f{i}" ]; then git diff f{i} | grep -c "x{i}" || echo none; fi'
    if i % 2
    else f"make t{i} && echo $(date) > log{i}"
    for i in range(200)
)


def _per_call_us(fn: Callable[[], Any], n: int) -> float:
    best = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - start) / n * 1e6)
    return min(best)


def bench_checks(quick: bool) -> None:
    policy = CommandPolicy(deny=frozenset({"rm", "curl"}))
    here = Path.cwd()
    print("1. policy check (µs per check; best of 5)")
    for name, text, n in (("pipeline", PIPELINE, 2000), ("200-line script", SCRIPT, 20)):
        n = max(1, n // 10) if quick else n
        check = _per_call_us(lambda t=text: policy.check(command=t, cwd=here, workspace=here), n)
        parse = _per_call_us(lambda t=text: _parser().parse(t.encode()), n)
        line = f"   {name:16} check {check:9.1f} µs   tree-sitter parse alone {parse:8.1f} µs"
        try:
            import bashlex  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:
            line += "   (bashlex not installed)"
        else:
            lex = _per_call_us(lambda t=text: bashlex.parse(t), max(1, n // 5))
            line += f"   bashlex parse {lex:9.1f} µs ({lex / parse:.0f}x tree-sitter's parse)"
        print(line)


async def bench_runs(quick: bool) -> None:
    n = 20 if quick else 100
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        async with Host(workspace=root / "ws", state_dir=root / "state", preload_tokenizer=False) as host:

            async def timed(args: dict[str, Any], setup: Callable[[int], None] | None = None) -> float:
                samples = []
                for i in range(n):
                    if setup is not None:
                        setup(i)
                    start = time.perf_counter()
                    result = await host.call_tool(
                        "bash", dict(args, command=args["command"].format(i=i)) if "command" in args else args
                    )
                    samples.append(time.perf_counter() - start)
                    assert not result.is_error, result.text
                return statistics.median(samples) * 1000

            await timed({"command": "/bin/true"})  # warm up
            shell = await timed({"command": "exec /bin/true"})  # a builtin first: bash runs it
            argv = await timed({"argv": ["/bin/true"]})
            plain = await timed({"command": "/bin/true"})
            print("2. foreground start (ms per run through the tool, median)")
            print(f"   bash -c 'exec /bin/true' {shell:6.2f} ms   (baseline)")
            print(f"   argv [/bin/true]         {argv:6.2f} ms   {argv / shell:.2f}x")
            print(
                f"   command '/bin/true'      {plain:6.2f} ms   {plain / shell:.2f}x (a plain line runs without bash)"
            )

            def make(i: int) -> None:
                (host.workspace / f"f{i}").write_text("x")

            real = await timed({"command": "/bin/rm f{i}"}, make)
            shim = await timed({"command": "rm f{i}"}, make)
            print("3. rm of one file (ms per run through the tool, median)")
            print(f"   /bin/rm f                {real:6.2f} ms   (baseline)")
            print(f"   rm f (to the trash)      {shim:6.2f} ms   {shim / real:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    bench_checks(args.quick)
    anyio.run(bench_runs, args.quick)


if __name__ == "__main__":
    main()
