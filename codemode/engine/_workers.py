"""Dedicated JS threads, each holding one fresh, pre-warmed QuickJS context.

Parsing the prelude costs about a millisecond, most of a small program's run. A worker
prepares its next context (new runtime, prelude loaded) while it is idle, so a program
starts on a context that is fresh (never used before) but already set up. A context is
created, used and dropped on one thread, as QuickJS requires.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import anyio

from codemode.engine._loop import LoopSpawner

_STACK_BYTES = 8 * 1024 * 1024  # QuickJS's own stack limit is far below this
_MIN_IDLE = 2


class WarmContext:
    """A fresh context with the prelude loaded, and the prelude's host entry points."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.parts = make()


Job = Callable[[Any], Any]


class WorkerPool:
    """Threads that run programs, growing up to ``max_workers``.

    Args:
        prepare: Builds the warm context on the worker thread.
        max_workers: Most programs running at once.
    """

    def __init__(self, prepare: Callable[[], Any], max_workers: int) -> None:
        self._prepare = prepare
        self._max = max_workers
        self._jobs: queue.SimpleQueue[tuple[Job, Callable[[Any, BaseException | None], None]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._workers = 0
        self._idle = 0
        self._slots = anyio.CapacityLimiter(max_workers)

    def _ensure_worker(self) -> None:
        with self._lock:
            if self._idle >= 1 + (1 if self._workers < _MIN_IDLE else 0) or self._workers >= self._max:
                return
            self._workers += 1
            self._idle += 1
        previous = threading.stack_size()
        try:
            threading.stack_size(_STACK_BYTES)
            threading.Thread(target=self._work, name="codemode-js", daemon=True).start()
        finally:
            threading.stack_size(previous)

    def _work(self) -> None:
        warm: Any = None
        while True:
            if warm is None:
                try:
                    warm = self._prepare()
                except BaseException as exc:
                    warm = exc
            item = self._jobs.get()
            if item is None:
                return
            with self._lock:
                self._idle -= 1
            job, done = item
            try:
                if isinstance(warm, BaseException):
                    raise warm
                value = job(warm)
            except BaseException as exc:
                done(None, exc)
            else:
                done(value, None)
            warm = None
            with self._lock:
                self._idle += 1

    async def run(self, job: Job, on_abandon: Callable[[], None]) -> Any:
        """Run ``job(warm_context)`` on a worker thread and return its value.

        If the caller is cancelled, ``on_abandon`` is called and the job finishes on its own.
        """
        async with self._slots:
            spawner = LoopSpawner()
            finished = anyio.Event()
            outcome: list[Any] = []

            def done(value: Any, error: BaseException | None) -> None:
                outcome.append((value, error))
                spawner.call_soon(finished.set)

            self._ensure_worker()
            self._jobs.put((job, done))
            try:
                await finished.wait()
            except BaseException:
                on_abandon()
                raise
            value, error = outcome[0]
            if error is not None:
                raise error
            return value

    def close(self) -> None:
        """Let idle workers exit (running jobs finish first)."""
        with self._lock:
            count = self._workers
        for _ in range(count):
            self._jobs.put(None)
