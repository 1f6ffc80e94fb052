"""The engine's WorkerPool: dedicated threads, each job on a fresh context (or the one it is given)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from codemode.engine._workers import WorkerPool

pytestmark = pytest.mark.anyio


class Prepared:
    """A stand-in context: remembers the thread that made it."""

    def __init__(self) -> None:
        self.thread = threading.current_thread()


def _wait_gone(threads: set[threading.Thread], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while any(t.is_alive() for t in threads):
        assert time.monotonic() < deadline, [t for t in threads if t.is_alive()]
        time.sleep(0.01)


@pytest.fixture
def pool_factory() -> Iterator[Callable[..., WorkerPool]]:
    pools: list[WorkerPool] = []

    def make(max_workers: int = 8, prepare: Callable[[], Any] = Prepared) -> WorkerPool:
        pool = WorkerPool(prepare, max_workers)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


async def test_a_job_runs_on_a_pool_thread_with_a_fresh_context(
    pool_factory: Callable[..., WorkerPool],
) -> None:
    pool = pool_factory()

    def job(warm: Prepared) -> tuple[Prepared, threading.Thread]:
        return warm, threading.current_thread()

    warm, thread = await pool.run(job)
    assert isinstance(warm, Prepared)
    assert thread is warm.thread  # made by the worker that runs the job (none was given)
    assert thread is not threading.current_thread() and thread.name == "codemode-js" and thread.daemon


async def test_a_job_given_a_context_runs_on_it(pool_factory: Callable[..., WorkerPool]) -> None:
    # A program whose first stretch ran on the event loop's thread goes on on its context.
    pool = pool_factory()
    given = Prepared()
    used, thread = await pool.run(lambda warm: (warm, threading.current_thread()), None, given)
    assert used is given and thread.name == "codemode-js"


async def test_sequential_jobs_reuse_a_few_threads_and_never_a_context(
    pool_factory: Callable[..., WorkerPool],
) -> None:
    pool = pool_factory()
    seen: list[tuple[Prepared, threading.Thread]] = []
    for _ in range(30):
        seen.append(await pool.run(lambda warm: (warm, threading.current_thread())))
    contexts = [warm for warm, _ in seen]
    threads = {thread for _, thread in seen}
    assert len({id(c) for c in contexts}) == len(contexts)  # every job got a fresh one
    assert len(threads) <= 3  # reused: the spare workers, not one thread per job


async def test_the_pool_grows_to_the_peak_and_no_further(pool_factory: Callable[..., WorkerPool]) -> None:
    pool = pool_factory(max_workers=5)
    together = threading.Barrier(5, timeout=30)  # passes only if five jobs run at once
    threads: list[threading.Thread] = []

    def job(warm: Prepared) -> None:
        threads.append(threading.current_thread())
        together.wait()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(pool.run, job)
    assert len(set(threads)) == 5


async def test_at_most_max_workers_jobs_run_at_once(pool_factory: Callable[..., WorkerPool]) -> None:
    pool = pool_factory(max_workers=2)
    lock = threading.Lock()
    running = peak = 0
    pairs = threading.Barrier(2, timeout=30)

    def job(warm: Prepared) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        pairs.wait()  # two at a time get through; a third at once would be seen in ``peak``
        with lock:
            running -= 1

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(pool.run, job)
    assert peak == 2


async def test_close_lets_idle_threads_go_and_the_pool_stays_usable(
    pool_factory: Callable[..., WorkerPool],
) -> None:
    pool = pool_factory(max_workers=4)
    together = threading.Barrier(4, timeout=30)
    first: set[threading.Thread] = set()

    def job(warm: Prepared) -> None:
        first.add(threading.current_thread())
        together.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(pool.run, job)
    assert len(first) == 4
    pool.close()
    _wait_gone(first)

    thread = await pool.run(lambda warm: threading.current_thread())
    assert thread.is_alive() and thread not in first


async def test_close_while_a_job_runs_lets_it_finish(pool_factory: Callable[..., WorkerPool]) -> None:
    pool = pool_factory()
    started, release = threading.Event(), threading.Event()
    holder: list[threading.Thread] = []

    def job(warm: Prepared) -> str:
        holder.append(threading.current_thread())
        started.set()
        assert release.wait(30)
        return "finished"

    async with anyio.create_task_group() as tg:
        results: list[str] = []

        async def run() -> None:
            results.append(await pool.run(job))

        tg.start_soon(run)
        await anyio.to_thread.run_sync(started.wait, 30)
        pool.close()
        release.set()
    assert results == ["finished"]
    _wait_gone(set(holder))  # retired by close once its job was done


async def test_a_failing_job_raises_in_the_caller_and_the_worker_goes_on(
    pool_factory: Callable[..., WorkerPool],
) -> None:
    pool = pool_factory(max_workers=1)

    def bad(warm: Prepared) -> None:
        raise ValueError("job failed")

    with pytest.raises(ValueError, match="job failed"):
        await pool.run(bad)
    assert await pool.run(lambda warm: "fine") == "fine"


async def test_a_failed_prepare_fails_that_job_only(pool_factory: Callable[..., WorkerPool]) -> None:
    calls = 0
    lock = threading.Lock()

    def prepare() -> Prepared:
        nonlocal calls
        with lock:
            calls += 1
            n = calls
        if n == 1:
            raise RuntimeError("could not prepare")
        return Prepared()

    pool = pool_factory(max_workers=1, prepare=prepare)
    with pytest.raises(RuntimeError, match="could not prepare"):
        await pool.run(lambda warm: warm)
    assert isinstance(await pool.run(lambda warm: warm), Prepared)


async def test_a_cancelled_caller_leaves_its_job_running_to_its_end(
    pool_factory: Callable[..., WorkerPool],
) -> None:
    pool = pool_factory()
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def job(warm: Prepared) -> None:
        started.set()
        assert release.wait(30)
        ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.run, job)
        await anyio.to_thread.run_sync(started.wait, 30)
        tg.cancel_scope.cancel()
    assert not ended.is_set()
    release.set()
    assert await anyio.to_thread.run_sync(ended.wait, 30)
    assert await pool.run(lambda warm: "next") == "next"
