"""A program's first stretch on the event loop's thread (`ProgramThread.first_stretch`): a program
that ends there needs no worker thread; one that waits goes on on a worker with the same context;
one that calls into the host or computes past the slice starts over on a worker, and nothing it
did in the first stretch is seen or done twice. (Thread mode: in process mode a program runs in a
worker process from its start.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import Host, RunResult
from codemode.engine import _qjs
from codemode.engine._text import prepare_context

pytestmark = pytest.mark.anyio


class Jobs:
    """Counts the programs (and resumed programs) the host's worker pool ran."""

    def __init__(self, host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
        self.host = host
        self.count = 0
        pool = host.engine._workers
        run = pool.run

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await run(*args, **kwargs)

        monkeypatch.setattr(pool, "run", counted)

    async def run(self, source: str) -> RunResult:
        """Run ``source`` once the keeper has a context ready (the first stretch runs only on one)."""
        await _ready()
        return await self.host.run_code(source)


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    (tmp_path / "ws").mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", engine="thread") as opened:
        yield opened


async def _ready() -> None:
    """Wait until the keeper has a context ready (the first stretch runs only on one)."""
    prepare_context()
    for _ in range(2000):
        if _qjs.keeper_stats()["ready"]:
            return
        await anyio.sleep(0.001)
    raise AssertionError(_qjs.keeper_stats())


async def test_a_program_that_calls_nothing_needs_no_worker(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = Jobs(host, monkeypatch)
    result = await jobs.run("const xs = [3, 1, 2].sort(); print(xs.join()); return {n: xs.length}")
    assert result.ok and result.text == '1,2,3\n{"n":3}\n', result.text
    assert jobs.count == 0


async def test_its_own_errors_stand_without_a_worker(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = Jobs(host, monkeypatch)
    for source, kind in (
        ('print("before"); null.x', "uncaught"),
        ("let x = ;", "syntax_error"),
        ("await new Promise(() => {})", "deadlock"),
    ):
        result = await jobs.run(source)
        assert result.error is not None and result.error.kind == kind, result.text
    assert jobs.count == 0


async def test_a_program_that_waits_goes_on_on_a_worker_with_what_it_printed(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    @host.tool()
    async def later(n: int) -> int:
        """Give n back."""
        return n

    jobs = Jobs(host, monkeypatch)
    result = await jobs.run('print("first"); print(await tools.later({n: 2})); await sleep(1); print("last")')
    assert result.ok and result.text == "first\n2\nlast\n", result.text
    assert jobs.count == 1


async def test_an_inline_call_in_the_first_stretch_starts_over_and_runs_once(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    @host.tool(inline=True)
    def tick(n: int) -> int:
        """Record n."""
        calls.append(n)
        return len(calls)

    jobs = Jobs(host, monkeypatch)
    result = await jobs.run('print("once"); print(await tools.tick({n: 7}))')
    assert result.ok and result.text == "once\n1\n", result.text  # printed once, not twice
    assert calls == [7]  # refused in the first stretch, run once on the worker
    assert jobs.count == 1


async def test_the_store_in_the_first_stretch_starts_over(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = Jobs(host, monkeypatch)
    result = await jobs.run(
        'await store.set("k", (await store.get("k") ?? 0) + 1); print(await store.get("k"))'
    )
    assert result.ok and result.text == "1\n", result.text
    assert jobs.count == 1


async def test_a_long_first_stretch_starts_over_on_a_worker(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = Jobs(host, monkeypatch)
    # Far more than the slice of the loop's time: it goes on, from the start, on a worker.
    result = await jobs.run(
        'print("go"); let x = 0; for (let i = 0; i < 3e7; i++) x = (x + i) % 1000003; print(x)'
    )
    assert result.ok and result.text == "go\n" + str(sum(range(30_000_000)) % 1000003) + "\n", result.text
    assert jobs.count == 1


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("function f(n) { return n === 0 ? 0 : 1 + f(n - 1) } print(f(1e6))", "stack_overflow"),
        ("const a = []; for (;;) a.push(new Array(1e5).fill(1))", "out_of_memory"),
    ],
)
async def test_a_limit_met_in_the_first_stretch_is_met_again_on_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, kind: str
) -> None:
    (tmp_path / "ws").mkdir()
    async with Host(
        workspace=tmp_path / "ws", state_dir=tmp_path / "state", memory_mb=32, engine="thread"
    ) as host:
        jobs = Jobs(host, monkeypatch)
        result = await jobs.run(source)
        assert result.error is not None and result.error.kind == kind, result.text
        assert jobs.count == 1  # judged with the worker's own stack and limits
