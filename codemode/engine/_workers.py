"""Dedicated JS threads, each running one program at a time on a fresh QuickJS context.

A worker takes a fresh context when a program starts and drops it when the program ends. The
bridge makes contexts ahead and frees used ones on a thread of its own, off the critical path
(see ``_qjs.c``, "the keeper"), so a worker does neither while the event loop waits for it.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Callable
from typing import Any

import anyio

from codemode.engine._loop import LoopSpawner

_STACK_BYTES = 8 * 1024 * 1024  # QuickJS's own stack limit is far below this
_MIN_IDLE = 2


Job = Callable[[Any], Any]


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc: its allocator returns memory its own way
        return None


_TRIM = _malloc_trim()


def _return_memory() -> None:
    """Give the heap a freed context held back to the system.

    QuickJS frees its runtime with the context, but glibc keeps the pages in the thread's
    arena: the host's RSS stayed ~130 MiB higher after two 64 MiB memory bombs (and grew with
    more workers). ``malloc_trim(0)`` returns them (measured: back to within 2 MiB). It walks
    every arena, so only jobs said to be heavy pay for it.
    """
    if _TRIM is not None:
        _TRIM(0)


class WorkerPool:
    """Threads that run programs, growing up to ``max_workers``.

    Args:
        prepare: Makes (or takes) a fresh context, on the worker's thread.
        max_workers: Most programs running at once.
        heavy: Says from a job's value that its context held much memory (a program that ran
            out of it): the worker then frees the context itself (``free``) and gives the
            freed heap back to the system (`_return_memory`) before it hands the value over.
        free: Frees a context at once, on the calling thread (else dropping it frees it).
    """

    def __init__(
        self,
        prepare: Callable[[], Any],
        max_workers: int,
        heavy: Callable[[Any], bool] | None = None,
        free: Callable[[Any], None] | None = None,
    ) -> None:
        self._prepare = prepare
        self._heavy = heavy
        self._free = free
        self._max = max_workers
        self._jobs: queue.SimpleQueue[tuple[Job, Any, Callable[[Any, BaseException | None], None]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._workers = 0
        self._idle = 0  # workers waiting for a job
        self._queued = 0  # jobs put on the queue and not yet taken by a worker
        self._slots = anyio.CapacityLimiter(max_workers)

    def _ensure_worker(self) -> None:
        """Count one more queued job and start the workers it needs.

        Every queued job needs an idle worker of its own (a worker blocked in a long program
        must not hold up the next one), plus one spare.
        """
        with self._lock:
            self._queued += 1
            wanted = self._queued + max(1, _MIN_IDLE - self._workers)
            start = max(0, min(wanted - self._idle, self._max - self._workers))
            self._workers += start
            self._idle += start
        for _ in range(start):
            previous = threading.stack_size()
            try:
                threading.stack_size(_STACK_BYTES)
                threading.Thread(
                    target=self._work, args=(self._jobs,), name="codemode-js", daemon=True
                ).start()
            finally:
                threading.stack_size(previous)

    def _work(self, jobs: queue.SimpleQueue[Any]) -> None:
        while True:
            item = jobs.get()
            if item is None:
                return
            with self._lock:
                current = jobs is self._jobs  # False once close() retired this generation
                if current:
                    self._idle -= 1
                    self._queued -= 1
            job, context, done = item
            value: Any = None
            error: BaseException | None = None
            try:
                if context is None:
                    context = self._prepare()
                value = job(context)
            except BaseException as exc:
                error = exc
            if error is None and self._heavy is not None and self._heavy(value):
                if self._free is not None:
                    self._free(context)
                context = None
                _return_memory()
            # Counted idle again *before* the caller hears back: its next job, queued at once,
            # must find this worker rather than start another thread.
            with self._lock:
                retired = not current or jobs is not self._jobs
                if not retired:
                    self._idle += 1
            context = None  # dropped before the caller hears back: it must not be freed on its thread
            done(value, error)
            if retired:
                return  # retired by close(): the new generation starts its own workers

    async def run(self, job: Job, spawner: LoopSpawner | None = None, context: Any = None) -> Any:
        """Run ``job(context)`` on a worker thread and return its value.

        If the caller is cancelled, the job goes on on its own; the caller must tell it to stop.

        Args:
            job: What to run.
            spawner: The caller's spawner on this loop (else one is made).
            context: The context to run it on (else a fresh one, ``prepare()``).
        """
        slots = self._slots
        try:  # a free slot is taken without a trip around the loop
            slots.acquire_nowait()
        except anyio.WouldBlock:
            await slots.acquire()
        try:
            spawner = spawner or LoopSpawner()
            answer = spawner.answer()

            def done(value: Any, error: BaseException | None) -> None:
                answer.give((value, error))

            self._ensure_worker()
            self._jobs.put((job, context, done))
            value, error = await answer
            if error is not None:
                raise error
            return value
        finally:
            slots.release()

    def close(self) -> None:
        """Let the idle workers exit (running jobs finish first); the pool stays usable."""
        with self._lock:
            jobs, count = self._jobs, self._workers
            self._jobs = queue.SimpleQueue()
            self._workers = self._idle = 0
        for _ in range(count):
            jobs.put(None)
