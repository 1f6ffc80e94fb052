"""Eager task starts on the event loop (engine/_loop.py), driven from a real second thread."""

from __future__ import annotations

import asyncio
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


async def test_close_cancels_a_task_waiting_after_its_first_step() -> None:
    spawner = LoopSpawner()
    started, ended = anyio.Event(), anyio.Event()
    outcome: list[str] = []

    async def job() -> None:
        started.set()
        try:
            await anyio.sleep(30)
        except BaseException as exc:
            outcome.append(type(exc).__name__)
            raise
        finally:
            ended.set()

    _spawn_from_thread(spawner, job)
    with anyio.fail_after(5):
        await started.wait()
        spawner.close()
        await ended.wait()
    assert outcome == ["CancelledError"]


async def test_cancelled_before_the_task_takes_its_next_step() -> None:
    # Started and closed within one callback: the task is cancelled before it ever steps,
    # and the coroutine, waiting at its first await, still gets the cancellation.
    spawner = LoopSpawner()
    outcome: list[str] = []
    ended = anyio.Event()

    async def job() -> None:
        try:
            await anyio.sleep(30)
        except BaseException as exc:
            outcome.append(type(exc).__name__)
            raise
        finally:
            ended.set()

    def start_and_close() -> None:
        spawner._start(job, lambda: None)
        spawner.close()

    asyncio.get_running_loop().call_soon(start_and_close)
    with anyio.fail_after(5):
        await ended.wait()
    assert outcome == ["CancelledError"]


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
