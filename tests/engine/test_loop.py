"""Eager task starts on the event loop (engine/_loop.py), driven from a real second thread."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from codemode.engine._loop import LoopSpawner

pytestmark = pytest.mark.anyio


def _spawn_from_thread(spawner: LoopSpawner, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    thread = threading.Thread(target=spawner.spawn, args=(factory, lambda: None))
    thread.start()
    thread.join()


async def test_the_first_step_runs_as_a_task_where_anyio_works() -> None:
    spawner = LoopSpawner()
    seen: list[Any] = []
    done = anyio.Event()

    async def job() -> None:
        seen.append(asyncio.current_task() is not None)
        with anyio.fail_after(5):  # a cancel scope needs the current task
            seen.append(anyio.get_current_task().name is not None)
        done.set()

    _spawn_from_thread(spawner, job)
    with anyio.fail_after(5):
        await done.wait()
    assert seen == [True, True]
    spawner.close()


async def test_a_task_that_waits_goes_on_in_the_same_task_and_returns() -> None:
    spawner = LoopSpawner()
    go, done = anyio.Event(), anyio.Event()
    tasks: list[Any] = []

    async def job() -> None:
        tasks.append(asyncio.current_task())
        with anyio.CancelScope():
            await go.wait()  # the first step ends here
            tasks.append(asyncio.current_task())
        await anyio.sleep(0)
        tasks.append(asyncio.current_task())
        done.set()

    _spawn_from_thread(spawner, job)
    with anyio.fail_after(5):
        while not tasks:
            await anyio.sleep(0.001)
        go.set()
        await done.wait()
    assert len(tasks) == 3 and tasks[0] is tasks[1] is tasks[2]
    spawner.close()


def _cancel_logger(
    log: list[str], ended: anyio.Event, started: anyio.Event | None = None
) -> Callable[[], Coroutine[Any, Any, None]]:
    """A job that sleeps until it is cancelled: it logs what stopped it, then "cleanup"."""

    async def job() -> None:
        if started is not None:
            started.set()
        try:
            await anyio.sleep(30)
        except BaseException as exc:
            log.append(type(exc).__name__)
            raise
        finally:
            log.append("cleanup")
            ended.set()

    return job


async def test_close_cancels_a_task_waiting_after_its_first_step() -> None:
    spawner = LoopSpawner()
    started, ended = anyio.Event(), anyio.Event()
    outcome: list[str] = []
    _spawn_from_thread(spawner, _cancel_logger(outcome, ended, started))
    with anyio.fail_after(5):
        await started.wait()
        spawner.close()
        await ended.wait()
    assert outcome == ["CancelledError", "cleanup"]


async def test_cancelled_before_the_task_takes_its_next_step() -> None:
    # Started and closed within one callback: the task is cancelled before it ever steps,
    # and the coroutine, waiting at its first await, still gets the cancellation.
    spawner = LoopSpawner()
    outcome: list[str] = []
    ended = anyio.Event()
    job = _cancel_logger(outcome, ended)

    def start_and_close() -> None:
        spawner._start(job, lambda: None)
        spawner.close()

    asyncio.get_running_loop().call_soon(start_and_close)
    with anyio.fail_after(5):
        await ended.wait()
    assert outcome == ["CancelledError", "cleanup"]


async def test_a_job_that_fails_in_its_first_step_leaves_the_spawner_working() -> None:
    spawner = LoopSpawner()
    done = anyio.Event()

    async def fails() -> None:
        raise RuntimeError("boom")

    async def works() -> None:
        done.set()

    loop = asyncio.get_running_loop()
    errors: list[Any] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
    try:
        _spawn_from_thread(spawner, fails)
        _spawn_from_thread(spawner, works)
        with anyio.fail_after(5):
            await done.wait()
    finally:
        loop.set_exception_handler(None)
    assert [str(e) for e in errors] == ["boom"]  # reported at once, not when collected
    spawner.close()


async def test_spawning_after_close_is_refused() -> None:
    spawner = LoopSpawner()
    spawner.close()
    refused = anyio.Event()

    async def job() -> None:  # pragma: no cover - must not run
        raise AssertionError("ran after close")

    thread = threading.Thread(target=spawner.spawn, args=(job, lambda: spawner.call_soon(refused.set)))
    thread.start()
    thread.join()
    with anyio.fail_after(5):
        await refused.wait()


def _run_from_thread(
    spawner: LoopSpawner, job: Callable[[], Coroutine[Any, Any, None]], refused: Any = None
) -> None:
    thread = threading.Thread(target=spawner.run_soon, args=(job, refused or (lambda: None)))
    thread.start()
    thread.join()


async def test_jobs_one_after_another_share_one_runner_task() -> None:
    spawner = LoopSpawner()
    tasks: list[Any] = []
    for _ in range(3):
        done = anyio.Event()

        async def job(done: anyio.Event = done) -> None:
            await anyio.sleep(0)  # waits: the job is not over in its first step
            tasks.append(asyncio.current_task())
            done.set()

        _run_from_thread(spawner, job)
        with anyio.fail_after(5):
            await done.wait()
        await anyio.sleep(0)  # the runner goes back to waiting for a job
    assert len(tasks) == 3 and tasks[0] is tasks[1] is tasks[2]
    await spawner.aclose(5)
    assert spawner._tasks == set() and spawner._running == {}


async def test_jobs_at_once_each_get_a_runner() -> None:
    spawner = LoopSpawner()
    release = anyio.Event()
    tasks: set[Any] = set()
    finished: list[int] = []

    def job_for(index: int) -> Callable[[], Coroutine[Any, Any, None]]:
        async def job() -> None:
            tasks.add(asyncio.current_task())
            await release.wait()
            finished.append(index)

        return job

    for index in range(4):
        _run_from_thread(spawner, job_for(index))
    with anyio.fail_after(5):
        while len(tasks) < 4:
            await anyio.sleep(0.001)
    release.set()
    with anyio.fail_after(5):
        while len(finished) < 4:
            await anyio.sleep(0.001)
    assert sorted(finished) == [0, 1, 2, 3] and len(tasks) == 4
    spawner.close()


async def test_stop_runs_cancels_a_running_job_but_respects_a_shield() -> None:
    spawner = LoopSpawner()
    started = anyio.Event()
    outcome: dict[str, str] = {}

    async def plain() -> None:
        started.set()
        try:
            await anyio.sleep(30)
            outcome["plain"] = "finished"
        except BaseException as exc:
            outcome["plain"] = type(exc).__name__
            raise

    async def shielded() -> None:
        with anyio.CancelScope(shield=True):
            await started.wait()
            await anyio.sleep(0.05)
            outcome["shielded"] = "finished"

    _run_from_thread(spawner, plain)
    _run_from_thread(spawner, shielded)
    with anyio.fail_after(5):
        await started.wait()
        await anyio.sleep(0)
        spawner.stop_runs()
        await spawner.aclose(5)
    assert outcome == {"plain": "CancelledError", "shielded": "finished"}
    assert spawner._running == {}


async def test_a_failing_job_is_reported_and_its_runner_goes_on() -> None:
    spawner = LoopSpawner()
    loop = asyncio.get_running_loop()
    errors: list[Any] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
    done = anyio.Event()
    tasks: list[Any] = []

    async def fails() -> None:
        tasks.append(asyncio.current_task())
        raise RuntimeError("boom")

    async def works() -> None:
        tasks.append(asyncio.current_task())
        done.set()

    try:
        _run_from_thread(spawner, fails)
        with anyio.fail_after(5):
            while not errors:
                await anyio.sleep(0.001)
        _run_from_thread(spawner, works)
        with anyio.fail_after(5):
            await done.wait()
    finally:
        loop.set_exception_handler(None)
    assert [str(e) for e in errors] == ["boom"] and tasks[0] is tasks[1]
    spawner.close()


async def test_a_job_after_stop_runs_is_refused_and_idle_runners_end() -> None:
    spawner = LoopSpawner()
    done = anyio.Event()
    runners: list[Any] = []

    async def job() -> None:
        runners.append(asyncio.current_task())
        done.set()

    _run_from_thread(spawner, job)
    with anyio.fail_after(5):
        await done.wait()
    await anyio.sleep(0)
    assert not runners[0].done()  # waiting for its next job
    spawner.stop_runs()
    refused = anyio.Event()

    async def late() -> None:  # pragma: no cover - must not run
        raise AssertionError("ran after stop_runs")

    _run_from_thread(spawner, late, lambda: spawner.call_soon(refused.set))
    with anyio.fail_after(5):
        await refused.wait()
        while not runners[0].done():
            await anyio.sleep(0.001)
    assert not runners[0].cancelled()  # told to end, not cancelled


async def _idle_runner(spawner: LoopSpawner) -> Any:
    """Start a runner with one job and wait until it waits for the next: its task."""
    tasks: list[Any] = []

    async def job() -> None:
        tasks.append(asyncio.current_task())
        await anyio.sleep(0)

    _run_from_thread(spawner, job)
    with anyio.fail_after(5):
        while not tasks or spawner._running:
            await anyio.sleep(0.001)
    return tasks[0]


async def test_a_job_given_to_an_idle_runner_runs_as_its_task_with_its_context() -> None:
    # The first step runs at once as the idle runner (no wake-up); a variable it sets is
    # still set when the job goes on after waiting, in the runner itself.
    spawner = LoopSpawner()
    runner = await _idle_runner(spawner)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[Any] = []
    done = anyio.Event()

    async def quick() -> None:
        seen.append(asyncio.current_task() is runner)

    async def waits() -> None:
        token = var.set("set")
        seen.append(asyncio.current_task() is runner)
        await anyio.sleep(0.01)
        seen.append((asyncio.current_task() is runner, var.get()))
        var.reset(token)
        done.set()

    _run_from_thread(spawner, quick)
    _run_from_thread(spawner, waits)
    with anyio.fail_after(5):
        await done.wait()
    assert seen == [True, True, (True, "set")]
    spawner.close()


@pytest.mark.parametrize("shielded", [False, True])
async def test_a_job_stopped_right_after_an_idle_runner_took_it(shielded: bool) -> None:
    # Handed over and stopped in one loop callback, before the runner ever woke: the job is
    # cancelled where it waits, unless it is inside a shield, which it then finishes.
    spawner = LoopSpawner()
    await _idle_runner(spawner)
    outcome: list[str] = []

    async def job() -> None:
        try:
            with anyio.CancelScope(shield=shielded):
                await anyio.sleep(0.05 if shielded else 30)
            outcome.append("finished")
        except BaseException as exc:
            outcome.append(type(exc).__name__)
            raise

    def hand_and_stop() -> None:
        spawner._hand(job, lambda: None)
        spawner.stop_runs()

    asyncio.get_running_loop().call_soon(hand_and_stop)
    with anyio.fail_after(5):
        while not outcome:
            await anyio.sleep(0.001)
        await spawner.aclose(5)
    assert outcome == (["finished"] if shielded else ["CancelledError"])
    assert spawner._running == {} and spawner._tasks == set()


async def test_a_job_whose_first_step_cancels_its_own_task_gets_the_cancellation() -> None:
    # asyncio.timeout(0) cancels the current task at the next iteration: the idle runner has
    # taken the job but not woken yet. The job must get it (a TimeoutError here), not the runner.
    spawner = LoopSpawner()
    runner = await _idle_runner(spawner)
    outcome: list[Any] = []

    async def job() -> None:
        try:
            async with asyncio.timeout(0):
                await asyncio.sleep(5)
        except TimeoutError:
            outcome.append(("timed out", asyncio.current_task() is runner))

    for _ in range(2):  # and the runner goes on with the next job
        _run_from_thread(spawner, job)
        with anyio.fail_after(5):
            while len(outcome) < _ + 1:
                await anyio.sleep(0.001)
    assert outcome == [("timed out", True), ("timed out", True)]
    spawner.close()


async def test_close_right_after_an_idle_runner_took_a_job_cancels_the_job_itself() -> None:
    spawner = LoopSpawner()
    await _idle_runner(spawner)
    log: list[str] = []
    ended = anyio.Event()
    job = _cancel_logger(log, ended)

    def hand_and_close() -> None:
        spawner._hand(job, lambda: None)
        spawner.close()

    asyncio.get_running_loop().call_soon(hand_and_close)
    with anyio.fail_after(5):
        await ended.wait()
    assert log == ["CancelledError", "cleanup"]


def test_a_job_keeps_its_context_across_an_await_under_plain_asyncio() -> None:
    # Under asyncio.run the creator's context can be empty (falsy): the runner must still run
    # every step of a job in its one context.
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    async def main() -> None:
        spawner = LoopSpawner()
        done = asyncio.Event()

        async def first() -> None:
            await asyncio.sleep(0)

        async def job() -> None:
            var.set("mine")
            await asyncio.sleep(0.01)
            seen.append(var.get())
            done.set()

        _run_from_thread(spawner, first)
        await asyncio.sleep(0.05)  # the runner is idle: the next job takes its first step at once
        _run_from_thread(spawner, job)
        await asyncio.wait_for(done.wait(), 5)
        spawner.close()

    contextvars.Context().run(asyncio.run, main())  # from a context that holds nothing
    assert seen == ["mine"]
