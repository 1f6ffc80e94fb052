"""What an HTTP front does in the background while it serves: short garbage collections, and
with a shared database its beat (alive, the fence, sessions taken elsewhere) and publication.

The fence. A front says it is alive every beat (`session_holds.BEAT_SECONDS`, or
``HttpOptions.beat_seconds``); the other fronts end the sessions of one silent for six beats
(``server_died``), after which a client may resume them elsewhere with their secret. A front
cut off from the database still holds them in memory, so past four beats without a beat
recorded it stops serving (`ConnectionSessions.fence`: every MCP request is answered 503 with
``Retry-After``), two beats before the others may take its sessions. When it reaches the
database again it asks which sessions it still holds there: one that another front ended or
took meanwhile is closed here (its ``lifecycle: session`` processes stopped, as the ended
session's story says) without touching its new holder's hold, and its MCP session id is
answered 404 with what happened (`ConnectionSessions.moved`).
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable

import anyio
import anyio.to_thread

from codemode.host import Host
from codemode.mcp._sessions import ConnectionSessions

__all__ = ["beat", "publish", "short_collections"]

_PUBLISH_SECONDS = 1.0  # how often a front publishes to the shared database (completions that moved)

# Full collections scan every object the process holds; with 1,000 sessions that is ~300,000
# and 170-250 ms with the loop stopped, 2-3 times every 10 s (bench/bench_front.py). So what
# lived through `_FREEZE_SECONDS` is frozen out of the collector's sight (`gc.freeze`: a list
# splice): a full collection then scans only what is younger, and stays short. Objects frozen
# that die in a cycle are freed only by a collection of everything (unfreeze, collect): one
# long pause (150-400 ms at 1,000 sessions), so it runs only when there is garbage worth it.
# What dies frozen comes from sessions that end (~20 objects, ~3 KiB, each: the MCP SDK's and
# uvicorn's, tasks cancelled with their tracebacks, transports; listed with gc.DEBUG_SAVEALL),
# so one runs after `_CLOSES_PER_COLLECTION` sessions ended (~70 MiB of garbage at most), and,
# for garbage of any other source, when the heap has grown `_HEAP_GROWTH` times since the last.
# Not on the heap's doubling alone: sessions opening double it with nothing to free (a pause
# right after 1,000 sessions opened, bench_front.py). The heap is measured by
# `sys.getallocatedblocks()` (a walk of the allocator's pools, ~0.1-0.5 ms), not by
# `gc.get_freeze_count()`, which walks the frozen objects one by one: 60-70 ms with the loop
# stopped at 1,000 sessions, every `_FREEZE_SECONDS` (found with `--where` in bench_front.py).
_FREEZE_SECONDS = 2.0
_CLOSES_PER_COLLECTION = 20_000
_HEAP_GROWTH = 4
_HEAP_FLOOR = 500_000  # blocks: below this the heap is not worth a collection of everything


async def short_collections(closed_sessions: Callable[[], int] = lambda: 0) -> None:
    """Keep what lived through `_FREEZE_SECONDS` out of the collector's sight and collect
    everything now and then (see above). ``closed_sessions``: how many sessions ended so far."""
    heap_after, closed_after = sys.getallocatedblocks(), closed_sessions()
    while True:
        await anyio.sleep(_FREEZE_SECONDS)
        grown = sys.getallocatedblocks() > _HEAP_GROWTH * max(heap_after, _HEAP_FLOOR)
        if grown or closed_sessions() - closed_after >= _CLOSES_PER_COLLECTION:
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            heap_after, closed_after = sys.getallocatedblocks(), closed_sessions()
        else:
            gc.freeze()


async def beat(host: Host, sessions: ConnectionSessions, beat_seconds: float) -> None:
    """Say every ``beat_seconds`` that this front is alive (`HeldSessions.beat`), ending the
    sessions of fronts silent for six beats; keep the fence (see the module's text)."""
    sessions.fence.arm(beat_seconds)

    def beat_and_holds() -> tuple[list[str], frozenset[str]]:
        ended = host.held.beat(stale_seconds=6 * beat_seconds)
        return ended, host.held.held_here()

    while True:
        started = time.monotonic()
        try:
            ended, held = await anyio.to_thread.run_sync(beat_and_holds)
        except Exception as exc:  # the database is down: /healthz says so; the fence may close
            sessions.fence.failed(exc)
        else:
            sessions.fence.recorded(started)
            if ended:
                sys.stderr.write(
                    f"codemode: ended {len(ended)} sessions of servers silent for {6 * beat_seconds:g} s\n"
                )
            sessions.taken_elsewhere(held, started)
        await anyio.sleep(beat_seconds)


async def publish(host: Host) -> None:
    """Every second, with a shared database: publish this front's processes and the
    notifications of sessions that moved to another front (`HeldSessions.publish`). A task of
    its own, so that a slow publication never delays a beat."""
    while True:
        try:
            await anyio.to_thread.run_sync(host.held.publish)
        except Exception as exc:  # as above; the notifications stay queued here meanwhile
            sys.stderr.write(f"codemode: could not publish to the shared database: {exc}\n")
        await anyio.sleep(_PUBLISH_SECONDS)
