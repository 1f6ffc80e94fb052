"""The HTTP front's upkeep (`codemode.mcp._upkeep`), its garbage collections: what lived a
while is frozen out of the collector's sight (full collections stay short), and what was frozen
and died in a cycle is still freed. (Its beat and fence: tests/mcp/test_fencing.py.)

In a child process: the collector's state is the whole process's."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import gc, sys, weakref, anyio
from codemode.mcp import _upkeep

_upkeep._FREEZE_SECONDS = 0.05
_upkeep._HEAP_FLOOR = 1

class Node:
    pass

async def main():
    node = Node()
    node.self = node  # a cycle: only a collection frees it
    gone = weakref.ref(node)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_upkeep.short_collections)
        with anyio.fail_after(30):
            while gc.get_freeze_count() == 0:
                await anyio.sleep(0.01)
            print("frozen", gc.get_freeze_count() > 0)
            del node  # dies while frozen: a young or full collection cannot see it
            gc.collect()
            print("kept while frozen", gone() is not None)
            kept = [str(i) for i in range(sys.getallocatedblocks() // 2)]  # the heap grows by half
            for _ in range(10):  # (a collection of everything would free it within a beat or two)
                await anyio.sleep(_upkeep._FREEZE_SECONDS)
            print("kept while the heap holds", gone() is not None)
            grown = [str(i) for i in range(2 * sys.getallocatedblocks())]  # now it doubles
            while gone() is not None:
                await anyio.sleep(0.05)  # the collection of everything frees it
            print("freed", True)
        tg.cancel_scope.cancel()

anyio.run(main)
"""


def test_what_lives_is_frozen_and_what_died_frozen_in_a_cycle_is_freed_when_the_heap_doubles() -> None:
    """Freed by the collection of everything, which runs when the heap has doubled since the
    last one, and not before (each is a long pause)."""
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = ["frozen True", "kept while frozen True", "kept while the heap holds True", "freed True"]
    assert done.stdout.split("\n")[:4] == expected, done.stdout
