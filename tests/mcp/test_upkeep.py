"""The HTTP front's upkeep (`codemode.mcp._upkeep`), its garbage collections: what lived a
while is frozen out of the collector's sight (full collections stay short), and what was frozen
and died in a cycle is still freed. (Its beat and fence: tests/mcp/test_fencing.py.)

In a child process: the collector's state is the whole process's."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import gc, sys, weakref, anyio
from codemode.mcp import _upkeep

_upkeep._FREEZE_SECONDS = 0.05
_upkeep._HEAP_FLOOR = 1
_upkeep._CLOSES_PER_COLLECTION = 5
closed = 0

class Node:
    pass

async def main():
    global closed
    node = Node()
    node.self = node  # a cycle: only a collection frees it
    gone = weakref.ref(node)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_upkeep.short_collections, lambda: closed)
        with anyio.fail_after(30):
            while gc.get_freeze_count() == 0:
                await anyio.sleep(0.01)
            print("frozen", gc.get_freeze_count() > 0)
            del node  # dies while frozen: a young or full collection cannot see it
            gc.collect()
            print("kept while frozen", gone() is not None)
            kept = [str(i) for i in range(3 * sys.getallocatedblocks() // 2)]  # the heap grows 2.5x
            closed += 4  # and four sessions end
            for _ in range(10):  # (a collection of everything would free it within a beat or two)
                await anyio.sleep(_upkeep._FREEZE_SECONDS)
            print("kept while little changed", gone() is not None)
            if sys.argv[1] == "closes":
                closed += 1  # the fifth
            else:
                grown = [str(i) for i in range(3 * sys.getallocatedblocks())]  # four times the heap
            while gone() is not None:
                await anyio.sleep(0.05)  # the collection of everything frees it
            print("freed", True)
        tg.cancel_scope.cancel()

anyio.run(main)
"""


@pytest.mark.parametrize("trigger", ["closes", "growth"])
def test_what_lives_is_frozen_and_what_died_frozen_in_a_cycle_is_still_freed(trigger: str) -> None:
    """Freed by the collection of everything, which runs after so many sessions ended
    (``closes``) or when the heap has grown four times (``growth``), not before (each is a
    long pause; a heap that doubled as sessions opened holds little to free)."""
    probe = [sys.executable, "-c", _PROBE, trigger]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = ["frozen True", "kept while frozen True", "kept while little changed True", "freed True"]
    assert done.stdout.split("\n")[:4] == expected, done.stdout
