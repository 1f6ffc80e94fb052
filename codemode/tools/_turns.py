"""Writers one at a time, per session: the turn a call that may change things waits for.

A call takes its place in the session's line when it arrives (before its first await, so places
follow the order calls came). A call that turns out to only look (a bash command on the
read-only list) leaves the line at once and never waits; a writer (any other command,
``write_file``, ``edit_file``) waits until every place before it has left: the writers before
it have ended and the calls before it have been classified. Readers never wait for writers.
"""

from __future__ import annotations

import anyio

__all__ = ["Place", "WriterTurn"]


class Place:
    """One call's place in its session's line (see `WriterTurn.enter`)."""

    def __init__(self, turn: WriterTurn, before: list[anyio.Event]) -> None:
        self._turn = turn
        self._before = before
        self.left = anyio.Event()

    async def wait(self) -> None:
        """Until every call before this one has left the line (their writers ended)."""
        for event in self._before:
            await event.wait()
        self._before = []

    def leave(self) -> None:
        """Leave the line (idempotent): the calls after this one no longer wait for it."""
        if not self.left.is_set():
            self.left.set()
            self._turn.discard(self)


class WriterTurn:
    """One session's line of calls that may change things (created by the host per session)."""

    def __init__(self) -> None:
        self._places: list[Place] = []

    def enter(self) -> Place:
        """Take a place behind every call still in the line; call on the event loop."""
        place = Place(self, [p.left for p in self._places])
        self._places.append(place)
        return place

    def discard(self, place: Place) -> None:
        """Forget a place that left."""
        self._places.remove(place)

    def __len__(self) -> int:
        """How many calls are in the line (a writer running, writers waiting, calls classifying)."""
        return len(self._places)
