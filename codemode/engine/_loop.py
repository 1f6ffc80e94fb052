"""Start tool tasks on the host's event loop from the JS thread, without waiting.

anyio's ``from_thread.run_sync`` waits for the callback to finish, and anyio task groups
spawn only from inside a task, which together cost two extra thread hops per tool call.
A program that awaits tools in a loop needs a one-way hand-off instead, so this module
uses asyncio's thread-safe ``call_soon_threadsafe`` and ``create_task`` directly. It is
the only backend-specific code in codemode; the host therefore runs on anyio's asyncio
backend.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

from codemode.errors import UserError

TaskFactory = Callable[[], Coroutine[Any, Any, None]]


class LoopSpawner:
    """Fire-and-forget task starts from any thread; cancels what is left on `close`.

    Create it inside the event loop (an async function).

    Raises:
        UserError: The current event loop is not asyncio.
    """

    def __init__(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError as exc:
            raise UserError("codemode runs on anyio's asyncio backend; start it with asyncio") from exc
        # Tasks run in the creator's context, so anyio and contextvars behave as usual.
        self._context = contextvars.copy_context()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def spawn(self, factory: TaskFactory, on_refused: Callable[[], None]) -> None:
        """Start ``factory()`` as a task soon; thread-safe. ``on_refused`` runs if closed."""
        self._loop.call_soon_threadsafe(self._start, factory, on_refused, context=self._context)

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` soon on the loop; thread-safe."""
        self._loop.call_soon_threadsafe(callback, context=self._context)

    def _start(self, factory: TaskFactory, on_refused: Callable[[], None]) -> None:
        if self._closed:
            on_refused()
            return
        task = self._loop.create_task(factory())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Refuse new tasks and cancel the running ones. Call on the loop thread."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
