"""Light to start (issue 29, item 7): what a fresh process pays to run one small program, and
what a host holds, for this checkout beside another one (700973a) and jsbox, in the same run.

    PYTHONPATH=. python bench/bench_start.py [--base DIR] [--jsbox DIR] [-n N]

``--before DIR`` is this checkout before a change, timed in the same rounds. ``--base DIR`` is a checkout with its extension built in place (for 700973a:
``git worktree add /tmp/base-700973a 700973a && cd /tmp/base-700973a && python setup.py
build_ext --inplace --build-temp /tmp/build-base``). ``--jsbox DIR`` is a directory holding
the jsbox package (``pip install --target DIR jsbox``); without it jsbox is looked up on this
interpreter, and its lines say when it is absent (jsbox has no command of its own).

1. A cold ``codemode run`` of ``print(1)`` (a fresh process; targets <= 0.5x of 700973a).
2. The one-shot API, ``codemode.run_code("print(1)")`` in a fresh process (<= 0.5x).
   Both in this checkout's default engine mode (process: a zygote and a confined worker) and
   in mode thread (``CODEMODE_ENGINE=thread``, programs on the host's own threads).
3. The host's RSS after ten small programs, once its loads on threads of their own have
   ended, and the tokenizer's own share (what loading it adds): target <= 60 MiB plus that share.

The floor row is what any host built on pydantic v2 and anyio pays before its own code (the
interpreter, one model built and validated, an event loop, one thread hop), in the same rounds.

Medians of rotated rounds; the load average is printed beside them (2 shared cores here).
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
# the encoding for the tokenizer's share, where the tests find it (no download)
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(HERE.parent / "shared" / "tiktoken-cache"))

RSS = """
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
"""

# In a fresh process: a Host as its defaults make it, ten small programs, then its RSS in KiB
# (with whatever the host loaded by then: 700973a loads the tokenizer when it opens).
RSS_CHILD = (
    RSS
    + """
import asyncio, sys, threading
from codemode import Host

async def main():
    options = {"preload_tokenizer": False} if sys.argv[3:] == ["lazy"] else {}
    async with Host(workspace=sys.argv[1], state_dir=sys.argv[2], **options) as host:
        for i in range(10):
            result = await host.run_code(f"const xs = [1, 2, {i}]; print(xs.map(x => x * 2).join(','))")
            assert result.ok, result.text
        # What the host holds once its loads on threads of their own (the tokenizer, the secret
        # rules' database) have ended, not a moment of them: ten small programs take ~50 ms,
        # the loads about a second.
        for thread in threading.enumerate():
            if thread.name.startswith(
                ("codemode-tokenizer", "tiktoken-load", "codemode-redact-load", "codemode-redact-rules")
            ):
                thread.join(60)
        print(rss())

asyncio.run(main())
"""
)

# The tokenizer's own share: what loading it adds to a process that has codemode imported.
TOKENIZER_CHILD = (
    RSS
    + """
import codemode
from codemode.budget import TokenCounter
counter = TokenCounter()
before = rss()
assert counter.exact, counter.fallback_reason
counter.count("x")
print(rss() - before)
"""
)

FLOOR = (
    "import anyio, anyio.to_thread, pydantic\n"
    "class M(pydantic.BaseModel):\n    x: int = 1\n    y: str = ''\n"
    "async def main():\n    await anyio.to_thread.run_sync(lambda: M(x=2))\n"
    "anyio.run(main)\nprint(1)\n"
)
ONE_SHOT = "import codemode, sys; r = codemode.run_code('print(1)', workspace=sys.argv[1], state_dir=sys.argv[2]); assert r.text == '1\\n', r.text"
JSBOX_ONE_SHOT = "import jsbox; assert jsbox.Runtime().eval('String(1)') == '1'"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def commands(
    tmp: Path, checkouts: dict[str, Path], jsbox: Path | None
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each timed command with its environment."""
    program = tmp / "p.js"
    program.write_text("print(1)\n")
    out: dict[str, tuple[list[str], dict[str, str]]] = {}
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out["python -c pass"] = ([sys.executable, "-c", "pass"], base_env)
    # What any host built on pydantic v2 and anyio pays before its own code: the interpreter,
    # one pydantic model built and validated, an anyio event loop and one thread hop.
    out["floor: pydantic + anyio"] = ([sys.executable, "-c", FLOOR], base_env)
    for label, root in checkouts.items():
        ws, state = tmp / f"ws-{label}", tmp / f"state-{label}"
        ws.mkdir(exist_ok=True)
        env = {**base_env, "PYTHONPATH": str(root), "CODEMODE_HOME": str(state)}
        run = [sys.executable, "-m", "codemode", "run", str(program), "--workspace", str(ws)]
        out[f"codemode run print(1)   [{label}]"] = (run, env)
        shot = [sys.executable, "-c", ONE_SHOT, str(ws), str(state)]
        out[f"codemode.run_code()     [{label}]"] = (shot, env)
        if label in ("this", "before"):  # the same two in engine mode thread (on the host's threads)
            threaded = {**env, "CODEMODE_ENGINE": "thread"}
            out[f"codemode run print(1)   [{label}, thread]"] = (run, threaded)
            out[f"codemode.run_code()     [{label}, thread]"] = (shot, threaded)
    if jsbox is not None:
        env = {**base_env, "PYTHONPATH": str(jsbox)}
        out["jsbox Runtime().eval     [peer]"] = ([sys.executable, "-c", JSBOX_ONE_SHOT], env)
    return out


def time_commands(cases: dict[str, tuple[list[str], dict[str, str]]], rounds: int) -> dict[str, float]:
    """Median seconds of each command as a fresh process, in a shuffled order each round."""
    for command, env in cases.values():  # state directories made, bytecode written
        subprocess.run(command, env=env, check=True, capture_output=True)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        order = list(cases)
        random.shuffle(order)
        for name in order:
            command, env = cases[name]
            start = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(samples) for name, samples in times.items()}


def host_rss(checkouts: dict[str, Path], tmp: Path, rounds: int) -> dict[str, tuple[float, float, float]]:
    """Median MiB of a host's RSS after ten programs, of what loading the tokenizer adds, and
    of a host's RSS after ten programs that never loads it (``preload_tokenizer=False``, short
    outputs: "-" where the checkout has no such option)."""
    samples: dict[str, list[tuple[int, int, int]]] = {label: [] for label in checkouts}
    for _ in range(rounds):
        for label in random.sample(list(checkouts), len(checkouts)):
            ws, state = tmp / f"rss-ws-{label}", tmp / f"rss-state-{label}"
            ws.mkdir(exist_ok=True)
            env = {**os.environ, "PYTHONPATH": str(checkouts[label])}
            kib = []
            lazy = ["lazy"] if label != "base" else ["skip"]
            for child, extra in ((RSS_CHILD, []), (TOKENIZER_CHILD, []), (RSS_CHILD, lazy)):
                if extra == ["skip"]:
                    kib.append(0)
                    continue
                done = subprocess.run(
                    [sys.executable, "-c", child, str(ws), str(state), *extra],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                )
                kib.append(int(done.stdout))
            samples[label].append((kib[0], kib[1], kib[2]))
    return {
        label: (
            statistics.median(s[0] for s in values) / 1024,
            statistics.median(s[1] for s in values) / 1024,
            statistics.median(s[2] for s in values) / 1024,
        )
        for label, values in samples.items()
    }


def jsbox_dir(given: str | None) -> Path | None:
    if given:
        return Path(given)
    spec = importlib.util.find_spec("jsbox")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="a checkout to compare with (extension built in place)")
    parser.add_argument(
        "--before", type=Path, help="this checkout before a change (its rows beside this one's, same run)"
    )
    parser.add_argument("--jsbox", help="a directory holding the jsbox package")
    parser.add_argument("-n", type=int, default=10, help="rounds (default 10)")
    args = parser.parse_args()
    checkouts = {"this": HERE}
    if args.before is not None:
        checkouts["before"] = args.before.resolve()
    if args.base is not None:
        checkouts["base"] = args.base.resolve()
    for root in checkouts.values():  # as an install has it (pip compiles the bytecode)
        compileall.compile_dir(str(root / "codemode"), quiet=1)
    jsbox = jsbox_dir(args.jsbox)
    print(f"before: {load()}")
    with tempfile.TemporaryDirectory(prefix="codemode-start-") as tmp:
        medians = time_commands(commands(Path(tmp), checkouts, jsbox), args.n)
        print(f"after:  {load()}   (medians of {args.n} rotated rounds)")
        for name, median in medians.items():
            line = f"{name:36s} {median * 1e3:7.0f} ms"
            if ("[this" in name or "[before" in name) and "base" in checkouts:
                base = name.split("[")[0] + "[base]"
                line += f"   {median / medians[base]:.2f}x of base"
            elif name.startswith("floor") and "base" in checkouts:
                line += f"   {median / medians['codemode run print(1)   [base]']:.2f}x of base's cold run"
            print(line, flush=True)
        if jsbox is None:
            print("jsbox: not installed (no `jsbox` command, no module; pip install --target DIR jsbox)")
        rss = host_rss(checkouts, Path(tmp), max(3, args.n // 3))
    for label, (mib, tokenizer, lazy) in rss.items():
        never = f"{lazy:6.1f} MiB" if lazy else "     -"
        print(
            f"host RSS after ten programs [{label}]  {mib:6.1f} MiB   the tokenizer's share {tokenizer:5.1f} MiB"
            f"   never loading it {never}   ({load()})"
        )
    print("targets: this <= 0.5x of 700973a (cold run, one-shot); RSS <= 60 MiB + the tokenizer's share")


if __name__ == "__main__":
    main()
