"""Start tool tasks on the host's event loop (from the JS thread or the loop's own), without waiting.

anyio's ``from_thread.run_sync`` waits for the callback to finish, and anyio task groups
spawn only from inside a task, which together cost two extra thread hops per tool call.
A program that awaits tools in a loop needs a one-way hand-off instead, so this module
uses asyncio's thread-safe ``call_soon_threadsafe`` directly. It is the only
backend-specific code in codemode; the host therefore runs on anyio's asyncio backend.

Tasks start eagerly: the first step of a tool's coroutine runs inside the very callback
that received the hand-off, as a task (``asyncio.current_task()`` is the task, so anyio
works in the handler), instead of one loop iteration later. A tool that finishes without
waiting for anything (most do, or do so quickly) thus hands its result back to the JS
thread before the loop goes back to sleep. Python 3.12 has this built in
(``eager_start``); on 3.11 `_Continuation` does the same with the task API asyncio itself
uses for it.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextvars
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio

from codemode.errors import UserError

TaskFactory = Callable[[], Coroutine[Any, Any, Any]]

_EAGER_START = sys.version_info >= (3, 12)
_enter_task: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None = getattr(
    asyncio.tasks, "_enter_task", None
)
_leave_task: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None = getattr(
    asyncio.tasks, "_leave_task", None
)


class _Continuation(collections.abc.Coroutine[Any, Any, Any]):
    """A coroutine whose first step has already run, handed to the task that drives the rest.

    The task's first ``send`` gets what that first step produced: the future it waits on
    (passed on to the task), its return value (the task ends) or its exception. Everything
    after that, cancellation included, goes straight to the wrapped coroutine.
    """

    __slots__ = ("_coro", "_first", "_outcome")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._first = True
        self._outcome: tuple[str, Any] = ("yield", None)

    def run_first_step(self) -> BaseException | None:
        """Run the coroutine up to its first wait (or its end).

        Returns:
            The exception the first step ended with, if any (the task then ends quietly).

        Raises:
            KeyboardInterrupt, SystemExit: As asyncio lets them through a task.
        """
        try:
            self._outcome = ("yield", self._coro.send(None))
        except StopIteration as stop:
            self._outcome = ("return", stop.value)
        except (KeyboardInterrupt, SystemExit):
            self._outcome = ("return", None)
            raise
        except BaseException as exc:
            self._outcome = ("return", None)
            return exc
        return None

    def throw_first(self, exc: BaseException) -> None:
        """Deliver ``exc`` where the coroutine waits after its first step, before any task
        drove it on (a runner cancelled between taking the job and waking up: `LoopSpawner`).
        The next ``send`` gets what the coroutine did with it."""
        try:
            self._outcome = ("yield", self._coro.throw(exc))
        except StopIteration as stop:
            self._outcome = ("return", stop.value)
        except BaseException as raised:
            self._outcome = ("raise", raised)
        self._first = True

    @property
    def finished(self) -> bool:
        """Whether the first step ended the coroutine (returned or raised)."""
        return self._first and self._outcome[0] != "yield"

    def send(self, value: Any) -> Any:
        if self._first:
            self._first = False
            kind, produced = self._outcome
            self._outcome = ("yield", None)
            if kind == "return":
                raise StopIteration(produced)
            if kind == "raise":
                raise produced
            return produced
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        # Cancelled before the task took its first step: the coroutine is still waiting at
        # its first await, so it gets the exception there.
        self._first = False
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # pragma: no cover - the legacy signature

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Any:
        # Awaited by a runner task (`LoopSpawner.run_soon`): the awaiting frame drives it as an
        # iterator, with the same send/throw a task uses.
        return self

    def __next__(self) -> Any:
        return self.send(None)


class _Runner:
    """A runner task of `LoopSpawner.run_soon`: its context, its scope, the future it waits on."""

    __slots__ = ("context", "handed", "scope", "task", "waiting")

    def __init__(self, context: contextvars.Context) -> None:
        self.context = context  # the task's own context (not a copy): its jobs' first steps run in it
        self.task: asyncio.Task[Any] | None = None
        self.scope: anyio.CancelScope | None = None
        self.waiting: asyncio.Future[None] | None = None  # while idle: done wakes it
        self.handed: _Continuation | None = None  # the job given to it while it was idle


class LoopSpawner:
    """Fire-and-forget task starts (and runs of short jobs) from any thread; cancels what is left on `close`.

    Create it inside the event loop (an async function).

    Raises:
        UserError: The current event loop is not asyncio.
    """

    def __init__(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError as exc:
            raise UserError("codemode runs on anyio's asyncio backend; start it with asyncio") from exc
        # Tasks run in (a copy of) the creator's context, so anyio and contextvars behave as usual.
        self._context = contextvars.copy_context()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        # Runner tasks (`run_soon`): those waiting for a job, and the busy ones with their scopes.
        self._idle: list[_Runner] = []
        self._running: dict[asyncio.Task[Any], anyio.CancelScope] = {}

    def spawn(self, factory: TaskFactory, on_refused: Callable[[], None]) -> None:
        """Start ``factory()`` as a task soon; thread-safe. ``on_refused`` runs if closed."""
        self._loop.call_soon_threadsafe(self._start, factory, on_refused)

    def run_soon(self, job: TaskFactory, on_refused: Callable[[], None]) -> None:
        """Run ``job()`` soon in one of this spawner's runner tasks; thread-safe.

        For many short jobs (a program's tool calls). A runner is a long-lived task that takes
        jobs one after another inside one anyio cancel scope, so a job makes no task and no
        cancel scope of its own: that saves ~15 µs of the loop's CPU per call on the reference
        machine (the async call in ``bench/bench_engine.py``). `stop_runs` cancels running jobs
        through their runner's scope, which respects an anyio shield in a job. Jobs that share
        a runner share its contextvars context: a job that sets a variable must reset it.
        ``on_refused`` runs instead of the job if the spawner is closed.
        """
        self._loop.call_soon_threadsafe(self._hand, job, on_refused)

    def run_now(self, job: TaskFactory, on_refused: Callable[[], None]) -> None:
        """`run_soon` from the loop's own thread: the job's first step runs now, or, when called
        from inside a task (which a runner cannot step as its own), right after it yields."""
        if asyncio.current_task(self._loop) is None:
            self._hand(job, on_refused)
        else:
            self._loop.call_soon(self._hand, job, on_refused, context=self._context)

    def watch_readable(self, fd: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop whenever ``fd`` is readable (until `unwatch_readable`).

        A program's channel wakes the loop this way: the callback runs straight from the
        loop's poll, with no task or future in between.
        """
        self._loop.add_reader(fd, callback)

    def unwatch_readable(self, fd: int) -> None:
        """Stop watching ``fd``. Call on the loop thread."""
        self._loop.remove_reader(fd)

    def _hand(self, job: TaskFactory, on_refused: Callable[[], None]) -> None:
        if self._closed:
            on_refused()
            return
        while self._idle:
            runner = self._idle.pop()
            waiting, task = runner.waiting, runner.task
            if waiting is None or waiting.done() or task is None:
                continue  # its task was cancelled from outside while it waited
            runner.waiting = None
            continuation = _Continuation(runner.context.run(job))
            if _enter_task is not None:
                # The job's first step runs now, as the idle runner's task (as an eager start
                # does): most jobs end in it, and the runner then never needs waking. That
                # saves a loop iteration on the way back to the JS thread (bench_engine.py).
                try:
                    failure = _step_as(self._loop, task, runner.context, continuation)
                finally:
                    if continuation.finished:  # (also after KeyboardInterrupt: back to idle)
                        runner.waiting = waiting
                        self._idle.append(runner)
                if continuation.finished:
                    if failure is not None:
                        self._loop.call_exception_handler(
                            {"message": "codemode job failed", "exception": failure, "task": task}
                        )
                    return
            # The runner is busy from now (`stop_runs` and `close` stop it); it wakes to take the
            # job on. Its first step may have cancelled the runner's task itself, or the waiting
            # future with it: the runner then hands the cancellation to the job.
            assert runner.scope is not None
            self._running[task] = runner.scope
            self._tasks.add(task)
            runner.handed = continuation
            if not waiting.done():
                waiting.set_result(None)
            return
        runner = _Runner(self._context.copy())
        self._start(lambda: self._runner(runner, job()), on_refused, runner.context, track=False)

    async def _runner(self, runner: _Runner, job: Awaitable[Any] | None) -> None:
        task = asyncio.current_task()
        assert task is not None
        runner.task = task
        with anyio.CancelScope() as scope:
            runner.scope = scope
            try:
                while job is not None:
                    self._running[task] = scope
                    self._tasks.add(task)
                    try:
                        await job
                    except Exception as exc:  # a job should not raise: say so, and go on
                        self._loop.call_exception_handler(
                            {"message": "codemode job failed", "exception": exc, "task": task}
                        )
                    # Idle: `aclose` does not wait for it, `stop_runs` need not cancel it.
                    del self._running[task]
                    self._tasks.discard(task)
                    if self._closed:
                        return
                    runner.waiting = self._loop.create_future()
                    self._idle.append(runner)
                    job = await self._next_job(runner)
            finally:
                self._running.pop(task, None)
                self._tasks.discard(task)

    @staticmethod
    async def _next_job(runner: _Runner) -> Awaitable[Any] | None:
        """Wait, idle, for the job `_hand` gives ``runner`` (None: end)."""
        assert runner.waiting is not None
        try:
            await runner.waiting
        except asyncio.CancelledError as exc:
            # Cancelled after `_hand` gave it a job but before it woke (a tool's first step
            # that cancels its own task, as asyncio.timeout does, or `close`): the job, not the
            # runner, is what was cancelled.
            handed, runner.handed = runner.handed, None
            if handed is None:
                raise
            handed.throw_first(exc)
            return handed
        handed, runner.handed = runner.handed, None
        return handed

    def stop_runs(self) -> None:
        """Refuse new jobs and cancel the running ones (respecting shields). Call on the loop thread."""
        self._closed = True
        self._release_idle()
        for scope in list(self._running.values()):
            scope.cancel()

    def _release_idle(self) -> None:
        while self._idle:
            waiting = self._idle.pop().waiting
            if waiting is not None and not waiting.done():
                waiting.set_result(None)  # no job handed: it ends

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` soon on the loop; thread-safe."""
        self._loop.call_soon_threadsafe(callback, context=self._context)

    def answer(self) -> Answer:
        """A one-shot answer another thread gives (`Answer.give`) and this loop awaits."""
        return Answer(self._loop)

    def _start(
        self,
        factory: TaskFactory,
        on_refused: Callable[[], None],
        context: contextvars.Context | None = None,
        *,
        track: bool = True,
    ) -> None:
        """Start ``factory()`` eagerly; ``track``: keep it in ``_tasks`` while it runs (a runner
        keeps itself there only while it is busy)."""
        if self._closed:
            on_refused()
            return
        if context is None:
            context = self._context.copy()
        task = _start_eagerly(self._loop, context.run(factory), context)
        if task is not None and track:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Refuse new tasks and cancel the running ones. Call on the loop thread."""
        self._closed = True
        self._release_idle()
        for task in list(self._tasks):
            task.cancel()

    async def aclose(self, timeout: float) -> None:
        """Refuse new tasks, wait up to ``timeout`` seconds for the running ones, then `close`.

        The caller asks the tasks to stop first (`stop_runs`, or the tasks' own cancel scopes:
        both respect shields, where a raw ``Task.cancel`` would punch through an anyio shield).
        """
        self._closed = True
        self._release_idle()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        self.close()


class Answer:
    """A value one thread gives and a task on the loop awaits (a future, without anyio's
    backend lookups and checkpoints: it is on the path of every program)."""

    __slots__ = ("_future", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future: asyncio.Future[Any] = loop.create_future()

    def give(self, value: Any) -> None:
        """Hand over ``value`` (any thread; ignored when nobody awaits any more)."""
        try:
            self._loop.call_soon_threadsafe(self._settle, value)
        except RuntimeError:  # the event loop is closed: nobody is waiting any more
            pass

    def _settle(self, value: Any) -> None:
        if not self._future.done():
            self._future.set_result(value)

    def __await__(self) -> Any:
        return self._future.__await__()


def _start_eagerly(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], context: contextvars.Context
) -> asyncio.Task[Any] | None:
    """Run the first step of ``coro`` as a task, now (call on the loop thread).

    Returns:
        The task while it still has work to do; None when the first step finished it.
    """
    if _EAGER_START:
        task_type: Any = asyncio.Task
        eager: asyncio.Task[Any] = task_type(coro, loop=loop, context=context, eager_start=True)
        if not eager.done():
            return eager
        if not eager.cancelled() and (failure := eager.exception()) is not None:
            loop.call_exception_handler(
                {"message": "codemode task failed", "exception": failure, "task": eager}
            )
        return None
    if _enter_task is None or _leave_task is None:  # pragma: no cover - not CPython 3.11
        return loop.create_task(coro, context=context)
    continuation = _Continuation(coro)
    task: asyncio.Task[Any] = loop.create_task(continuation, context=context)
    failure = _step_as(loop, task, context, continuation)
    if failure is not None:
        # Reported now, not by the task's finaliser at some garbage collection later.
        loop.call_exception_handler({"message": "codemode task failed", "exception": failure, "task": task})
    # Finished in its first step, the task only has to take one (empty) step to end.
    return None if continuation.finished else task


def _step_as(
    loop: asyncio.AbstractEventLoop,
    task: asyncio.Task[Any],
    context: contextvars.Context,
    continuation: _Continuation,
) -> BaseException | None:
    """Run ``continuation``'s first step now, as ``task`` (which is not running) in its context.

    Returns:
        The exception the first step ended with, if any.
    """
    assert _enter_task is not None and _leave_task is not None
    _enter_task(loop, task)
    try:
        return context.run(continuation.run_first_step)
    finally:
        _leave_task(loop, task)
