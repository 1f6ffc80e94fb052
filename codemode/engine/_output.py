"""What a program printed, as the host holds it: bounded, its head and its tail.

A program that prints in a loop once grew the host past 1.4 GiB (bench/bench_host_bounds.py):
the text was kept up to 256 MiB and then copied on its way to the model and the archive. Here
the first half of `EngineLimits.output_bytes_in_memory` is kept as it came, then the last half
(older tail text is dropped as new text comes), and the text says how much was dropped between.
"""

from __future__ import annotations

import collections

__all__ = ["PrintedOutput"]


class PrintedOutput:
    """Printed text within ``limit`` characters: the first ``limit // 2`` and the latest rest.

    Args:
        limit: Characters held at most (beside the line that says what was dropped).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._head: list[str] = []
        self._head_chars = 0
        self._tail: collections.deque[str] = collections.deque()
        self._tail_chars = 0
        self.dropped = 0
        """Characters dropped between the head and the tail."""

    @property
    def chars(self) -> int:
        """Characters printed so far, dropped ones included (read from any thread)."""
        return self._head_chars + self._tail_chars + self.dropped

    def append(self, text: str) -> None:
        head_room = self.limit // 2 - self._head_chars
        if head_room > 0:
            head = text if len(text) <= head_room else text[:head_room]
            self._head.append(head)
            self._head_chars += len(head)
            text = text[len(head) :]
        if not text:
            return
        tail = self._tail
        tail.append(text)
        self._tail_chars += len(text)
        excess = self._tail_chars - (self.limit - self.limit // 2)
        while excess > 0:
            first = tail[0]
            cut = min(len(first), excess)
            if cut == len(first):
                tail.popleft()
            else:
                tail[0] = first[cut:]
            self._tail_chars -= cut
            self.dropped += cut
            excess -= cut

    def text(self) -> str:
        """What was printed, as kept: the head, a line saying what was dropped (if any), the tail."""
        if not self.dropped:
            return "".join(self._head) + "".join(self._tail)
        marker = (
            f"\n[... {self.dropped:,} printed characters dropped here: the host keeps the first "
            f"{self.limit // 2:,} and the last {self.limit - self.limit // 2:,} characters of a "
            "program's output; print less ...]\n"
        )
        return "".join(self._head) + marker + "".join(self._tail)
