"""The console's live events: published from any thread, fanned out to each open event stream.

Each browser's ``/console/api/events`` stream is a `Subscription` with a bounded queue. A
subscriber that falls that far behind is not silently skipped: its stream is ended with a
``lagged`` event, and the page reconnects and reads the lists again (they hold what it missed).
Publishing never blocks: from the loop's thread an event is queued at once; from another thread
(an inline tool's call runs on the program's thread) it is handed to the loop with
``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
from collections.abc import AsyncIterator, Callable

__all__ = ["Event", "Events", "Subscription"]

Event = tuple[str, str]  # (name, JSON text)
_QUEUE_MAX = 2000  # events a subscriber may be behind before its stream is ended ("lagged")


class Subscription:
    """One open event stream: events of the tenant it belongs to, in order."""

    def __init__(self, accepts: Callable[[str | None], bool]) -> None:
        self._accepts = accepts
        self._queue: collections.deque[Event] = collections.deque()
        self._ready = asyncio.Event()
        self.lagged = False

    def offer(self, event: Event, tenant: str | None) -> None:
        if self.lagged or not self._accepts(tenant):
            return
        if len(self._queue) >= _QUEUE_MAX:
            self.lagged = True
            self._queue.clear()
        else:
            self._queue.append(event)
        self._ready.set()

    async def events(self) -> AsyncIterator[Event]:
        """The events as they come; ends with ``lagged`` once it fell too far behind."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            if self.lagged:
                yield ("lagged", json.dumps({"error": "this page fell behind; reconnecting"}))
                return
            while self._queue:
                yield self._queue.popleft()


class Events:
    """Where the console's events are published (`publish`) and subscribed to (`subscribe`)."""

    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def bind(self) -> None:
        """Remember the running loop (call on it once the server runs): events from other
        threads are handed to it."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def publish(self, name: str, data: object, tenant: str | None = None) -> None:
        """Send one event to every subscriber of ``tenant`` (None: of every tenant); any thread."""
        if not self._subscribers or self._loop is None:
            return
        event = (name, json.dumps(data, default=str))
        if threading.get_ident() == self._loop_thread:
            self._deliver(event, tenant)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._deliver, event, tenant)

    def _deliver(self, event: Event, tenant: str | None) -> None:
        for subscriber in list(self._subscribers):
            subscriber.offer(event, tenant)

    def subscribe(self, accepts: Callable[[str | None], bool]) -> Subscription:
        """A new subscription (on the loop); `unsubscribe` it when its stream ends."""
        subscription = Subscription(accepts)
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)
