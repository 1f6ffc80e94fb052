"""Tricks earn their place (issue 29, item 5): each micro-optimisation timed on its own path,
with the trick and with the plain way it replaces, in the same run.

    PYTHONPATH=. python bench/bench_tricks.py [--rounds N] [--scale F]

Every guarded trick has a switch here (a module global, a setting of the bridge, a method put
back to its plain form) and a path that uses it: an async tool call, an inline tool call, a
program that calls nothing, a confined `true`. Rounds rotate the tricks and the order of on/off
in each; the medians are printed with the load average beside them. ``gain`` is how much
longer the plain path takes: a trick stays when it pays at least 10% there (bench/TRICKS.md).
`bench/smoke.py` runs this briefly in CI and fails when a trick's path is more than 2x slower
than its plain path in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from codemode import Host
from codemode.engine import _loop, _qjs
from codemode.sandbox import LaunchSpec, SandboxPolicy, launch

_DEVNULL = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)


@dataclass
class Trick:
    """One trick: where it lives, the path it speeds up, and a switch that turns it off."""

    name: str
    where: str
    path: str
    plain: Callable[[], contextlib.AbstractContextManager[None]]  # the trick off inside
    run: Callable[[int], Awaitable[float]]  # seconds per operation of the path, n operations
    size: int  # operations per sample at --scale 1
    guarded: bool = True  # bench/smoke.py fails CI when it makes its path 2x slower than plain


@dataclass
class Measured:
    trick: Trick
    on: float  # median seconds per operation with the trick
    off: float  # ... the plain way

    @property
    def gain(self) -> float:
        """How much longer the plain path takes (0.25: 25% longer)."""
        return self.off / self.on - 1


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


@contextlib.contextmanager
def eager_step_off() -> Iterator[None]:
    """A tool call's job waits for its runner task to wake instead of taking its first step
    at once as that task (`LoopSpawner._hand`)."""
    saved = _loop._enter_task
    _loop._enter_task = None
    try:
        yield
    finally:
        _loop._enter_task = saved


def _set_prelude_module() -> Any:
    """The engine module that hands the prelude (and how many contexts to make ahead) to the
    bridge (its place moved as the engine was split)."""
    from codemode.engine import _runtime

    for name in ("_text", "_bridge"):
        module = sys.modules.get(f"codemode.engine.{name}")
        if module is not None and hasattr(module, "_set_prelude"):
            return module
    raise RuntimeError(f"no _set_prelude beside {_runtime.__name__}")


@contextlib.contextmanager
def made_ahead_off() -> Iterator[None]:
    """No context made ahead by the bridge's keeper thread: each program makes its own on its
    worker thread (and so has no first stretch on the loop's thread either)."""
    module = _set_prelude_module()
    module._set_prelude(0)
    while _qjs.take_ready() is not None:  # the ones ready now are freed
        pass
    try:
        yield
    finally:
        module._set_prelude()


@contextlib.contextmanager
def json_scan_off() -> Iterator[None]:
    """A tool call's message decoded by json.loads instead of the C scanner called directly."""
    from codemode.engine import _program, _runtime

    patched = [m for m in (_program, _runtime) if hasattr(m, "_from_js_json")]
    saved = [m._from_js_json for m in patched]  # type: ignore[attr-defined]
    home = sys.modules[saved[0].__module__]

    def plain(raw: str) -> Any:
        value = json.loads(raw)
        return home._without_lone_surrogates(value) if "\\ud" in raw else value

    for module in patched:
        module._from_js_json = plain  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module, original in zip(patched, saved, strict=True):
            module._from_js_json = original  # type: ignore[attr-defined]


@contextlib.contextmanager
def ruleset_cache_off() -> Iterator[None]:
    """Every confined launch builds its Landlock ruleset afresh (the cache emptied before each)."""
    from codemode.sandbox import _enforce

    original = _enforce._cached_ruleset if hasattr(_enforce, "_cached_ruleset") else None
    cache = _enforce._cache

    class Forgetful(type(cache)):  # type: ignore[misc]
        def get(self, key: Any, default: Any = None) -> Any:
            return default

        def __contains__(self, key: object) -> bool:
            return False

        def __getitem__(self, key: Any) -> Any:
            raise KeyError(key)

    forgetful = Forgetful()
    _enforce._cache = forgetful
    try:
        yield
    finally:
        for entry in forgetful.values():
            with contextlib.suppress(OSError):
                os.close(entry.fd)
        _enforce._cache = cache
        del original


async def _per_call(host: Host, tool: str, n: int) -> float:
    program = f"let s = 0; for (let i = 0; i < {n}; i++) s += await tools.{tool}({{value: i}}); print(s)"
    start = time.perf_counter()
    result = await host.run_code(program)
    elapsed = time.perf_counter() - start
    assert result.ok and result.text.strip() == str(n * (n - 1) // 2), result.text
    return elapsed / n


async def _per_program(host: Host, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        result = await host.run_code("print(1)")
        assert result.text == "1\n", result.text
    return (time.perf_counter() - start) / n


def tricks(host: Host, workspace: Path, state: Path) -> list[Trick]:
    confined = SandboxPolicy(writable_roots=(workspace,), temp_dir=state / "tmp", protected=(state,))
    env = dict(os.environ)

    async def confined_true(n: int) -> float:
        def work() -> float:
            start = time.perf_counter()
            for _ in range(n):
                launch(LaunchSpec(["true"], ".", env, confined, stdio=(_DEVNULL,) * 3)).wait()
            return (time.perf_counter() - start) / n

        return await anyio.to_thread.run_sync(work)

    return [
        Trick(
            "eager first step",
            "engine/_loop.py (LoopSpawner._hand, _step_as)",
            "async tool call",
            eager_step_off,
            lambda n: _per_call(host, "echo", n),
            2000,
        ),
        Trick(
            "contexts made ahead",
            "engine/_qjs.c (the keeper) + engine/_runtime.py (first stretch)",
            "run_code('print(1)')",
            made_ahead_off,
            lambda n: _per_program(host, n),
            200,
            guarded=False,  # not shown to pay yet: see bench/TRICKS.md
        ),
        Trick(
            "C JSON scanner called directly",
            "engine (_from_js_json: json.JSONDecoder().scan_once)",
            "inline tool call",
            json_scan_off,
            lambda n: _per_call(host, "echo_inline", n),
            5000,
        ),
        Trick(
            "cached Landlock ruleset",
            "sandbox/_enforce.py (_cache)",
            "confined `true` via sandbox.launch",
            ruleset_cache_off,
            confined_true,
            40,
        ),
    ]


def add_tools(host: Host) -> None:
    @host.tool()
    async def echo(value: Any = None) -> Any:
        "Return the value."
        return value

    @host.tool(inline=True)
    def echo_inline(value: Any = None) -> Any:
        "Return the value (inline)."
        return value


async def measure(rounds: int, scale: float, only: set[str] | None = None) -> list[Measured]:
    """Medians per operation of each trick's path, on and off, over ``rounds`` rotated rounds."""
    with tempfile.TemporaryDirectory(prefix="codemode-tricks-") as tmp:
        workspace, state = Path(tmp, "ws"), Path(tmp, "state")
        workspace.mkdir()
        (state / "tmp").mkdir(parents=True)
        # Engine mode thread: the switches are this process's, where its programs then run.
        host = Host(
            workspace=workspace, state_dir=Path(tmp, "host-state"), builtin_tools=False, engine="thread"
        )
        async with host:
            add_tools(host)
            chosen = [t for t in tricks(host, workspace, state) if only is None or t.name in only]
            samples: dict[tuple[str, bool], list[float]] = {}
            for trick in chosen:  # warm-up, both ways
                for on in (True, False):
                    with contextlib.nullcontext() if on else trick.plain():
                        await trick.run(max(1, int(trick.size * scale) // 4))
            for _ in range(rounds):
                for trick in random.sample(chosen, len(chosen)):
                    n = max(1, int(trick.size * scale))
                    for on in random.sample([True, False], 2):
                        with contextlib.nullcontext() if on else trick.plain():
                            samples.setdefault((trick.name, on), []).append(await trick.run(n))
            return [
                Measured(
                    t, statistics.median(samples[t.name, True]), statistics.median(samples[t.name, False])
                )
                for t in chosen
            ]


def report(results: list[Measured], rounds: int) -> None:
    print(f"{'trick':32s} {'path':36s} {'with':>10s} {'plain':>10s} {'gain':>7s}")
    for m in results:
        print(
            f"{m.trick.name:32s} {m.trick.path:36s} {m.on * 1e6:8.1f}us {m.off * 1e6:8.1f}us {m.gain:+7.0%}"
            f"   {'pays' if m.gain >= 0.10 else 'UNDER 10%'}{'' if m.trick.guarded else ' (not guarded)'}"
        )
    print(f"(medians of {rounds} rotated rounds; {load()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--scale", type=float, default=1.0, help="work per sample (1: the sizes above)")
    parser.add_argument("--quick", action="store_true", help="--rounds 3 --scale 0.25")
    args = parser.parse_args()
    rounds, scale = (3, 0.25) if args.quick else (args.rounds, args.scale)
    print(f"before: {load()}")
    results = asyncio.run(measure(rounds, scale))
    report(results, rounds)


if __name__ == "__main__":
    main()
