"""Bounded-memory capture of a command's output stream, and the terminal view of a run.

A command may write gigabytes. :class:`StreamCapture` keeps the first ``head_bytes`` and the
last ``tail_bytes`` of a stream (plus at most ``tail_bytes`` of slack, trimmed in amortised
fashion) and counts what falls between, so memory stays bounded whatever the total. Its
:meth:`StreamCapture.excerpt` cleans the kept bytes (:func:`clean_terminal_text`) and puts a
marker line between head and tail saying how much was cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from codemode.tools._terminal import TerminalView, clean_terminal_text

__all__ = ["OMITTED_MARKER_RE", "Excerpt", "StreamCapture", "shape_output"]

#: Matches the marker line :meth:`StreamCapture.excerpt` puts between head and tail.
OMITTED_MARKER_RE = re.compile(r"^\[\.\.\. [\d,]+ bytes (?:\([\d,]+ lines?\) )?omitted.*\.\.\.\]$", re.M)


@dataclass(frozen=True)
class Excerpt:
    """What is shown of one stream.

    Attributes:
        text: The cleaned whole stream when it was not truncated; otherwise the cleaned head,
            a marker line, and the cleaned tail, joined by newlines.
        total_bytes: Bytes the stream carried in all.
        shown_bytes: Raw bytes behind ``head_text`` and ``tail_text``.
        omitted_bytes: Raw bytes cut between head and tail (``total_bytes - shown_bytes``).
        truncated: Whether anything was cut.
        head_text: The cleaned head (the whole cleaned text when not truncated).
        tail_text: The cleaned tail (empty when not truncated).
        omitted_lines: Newlines in the omitted bytes (whole lines cut, when cut at newlines).
        marker: The marker line, empty when not truncated.
    """

    text: str
    total_bytes: int
    shown_bytes: int
    omitted_bytes: int
    truncated: bool
    head_text: str
    tail_text: str
    omitted_lines: int = 0
    marker: str = ""


def _trim_partial_utf8_end(data: bytes) -> bytes:
    """Drop an incomplete UTF-8 sequence at the end of ``data`` (a cut mid-character)."""
    n = len(data)
    # Walk back over at most 3 continuation bytes to the lead byte of the last character.
    i = n - 1
    while i >= 0 and i >= n - 4 and (data[i] & 0xC0) == 0x80:
        i -= 1
    if i < 0 or i < n - 4:
        return data
    lead = data[i]
    if lead < 0x80:
        return data
    need = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 0
    if need and n - i < need:
        return data[:i]
    return data


def _trim_partial_utf8_start(data: bytes) -> bytes:
    """Drop UTF-8 continuation bytes at the start of ``data`` (the rest of a cut character)."""
    i = 0
    while i < len(data) and i < 3 and (data[i] & 0xC0) == 0x80:
        i += 1
    return data[i:]


def _format_marker(omitted_bytes: int, omitted_lines: int, note: str | None) -> str:
    lines = f" ({omitted_lines:,} line{'s' if omitted_lines != 1 else ''})" if omitted_lines else ""
    extra = f"; {note}" if note else ""
    return f"[... {omitted_bytes:,} bytes{lines} omitted{extra} ...]"


class StreamCapture:
    """Keep the head and tail of one output stream in bounded memory.

    Args:
        head_bytes: Bytes kept from the start of the stream.
        tail_bytes: Bytes kept from the end of the stream.
        view: The terminal the excerpt is rendered for (default 80 x 24, output from a pipe).

    Raises:
        ValueError: If a size is negative.
    """

    def __init__(
        self, head_bytes: int = 16384, tail_bytes: int = 16384, view: TerminalView | None = None
    ) -> None:
        if head_bytes < 0 or tail_bytes < 0:
            raise ValueError(f"head_bytes and tail_bytes must be >= 0, got {head_bytes}, {tail_bytes}")
        self._view = view or TerminalView()
        self._head_limit = head_bytes
        self._tail_limit = tail_bytes
        self._head = bytearray()
        # Holds the stream after the head; trimmed back to tail_bytes once it passes twice that.
        self._tail = bytearray()
        self._total = 0
        # Newlines dropped from the front of _tail, and whether the last dropped byte was one.
        self._dropped_newlines = 0
        self._dropped_ends_line = False

    @property
    def total_bytes(self) -> int:
        """Bytes fed so far."""
        return self._total

    @property
    def truncated(self) -> bool:
        """Whether the stream is longer than ``head_bytes + tail_bytes``."""
        return self._total > self._head_limit + self._tail_limit

    def feed(self, chunk: bytes) -> None:
        """Take the next chunk of the stream, as read.

        Args:
            chunk: Raw bytes; any size.
        """
        n = len(chunk)
        if not n:
            return
        self._total += n
        room = self._head_limit - len(self._head)
        if room > 0:
            if n <= room:
                self._head += chunk
                return
            self._head += chunk[:room]
            chunk = chunk[room:]
            n -= room
        limit = self._tail_limit
        if n >= limit:
            # The chunk alone fills the tail: everything kept so far leaves.
            self._dropped_newlines += self._tail.count(b"\n") + chunk.count(b"\n", 0, n - limit)
            if n > limit:
                self._dropped_ends_line = chunk[n - limit - 1] == 0x0A
            elif self._tail:
                self._dropped_ends_line = self._tail[-1] == 0x0A
            self._tail = bytearray(chunk[n - limit :]) if limit else bytearray()
            return
        self._tail += chunk
        excess = len(self._tail) - limit
        if excess > limit:
            self._dropped_newlines += self._tail.count(b"\n", 0, excess)
            self._dropped_ends_line = self._tail[excess - 1] == 0x0A
            del self._tail[:excess]

    def excerpt(self, note: str | None = None) -> Excerpt:
        """Clean what was kept and describe what was cut.

        Args:
            note: Optional text put inside the marker, after the counts (for instance where
                the full log can be read: ``"full log: ref abc123"``).

        Returns:
            The excerpt; its ``text`` is the whole cleaned stream when nothing was cut.
        """
        if self._total == 0:
            return _NOTHING
        if not self.truncated:
            raw = bytes(self._head) + bytes(self._tail)
            text = clean_terminal_text(raw, self._view)
            return Excerpt(
                text=text,
                total_bytes=self._total,
                shown_bytes=len(raw),
                omitted_bytes=0,
                truncated=False,
                head_text=text,
                tail_text="",
            )
        head = bytes(self._head)
        quarter = self._head_limit // 4
        cut = head.rfind(b"\n", len(head) - quarter) if quarter else -1
        head = head[: cut + 1] if cut >= 0 else _trim_partial_utf8_end(head)

        slack = len(self._tail) - self._tail_limit
        tail = bytes(self._tail[slack:]) if self._tail_limit else b""
        quarter = self._tail_limit // 4
        starts_line = self._tail[slack - 1] == 0x0A if slack > 0 else self._dropped_ends_line
        if starts_line:
            cut = -1
        else:
            cut = tail.find(b"\n", 0, quarter) if quarter else -1
        if cut >= 0:
            tail = tail[cut + 1 :]
        elif not starts_line:
            tail = _trim_partial_utf8_start(tail)
        tail_dropped = self._tail_limit - len(tail)

        omitted_lines = (
            self._dropped_newlines
            + self._head.count(b"\n", len(head))
            + self._tail.count(b"\n", 0, slack + tail_dropped)
        )
        shown = len(head) + len(tail)
        omitted = self._total - shown
        head_text = clean_terminal_text(head, self._view)
        tail_text = clean_terminal_text(tail, self._view)
        marker = _format_marker(omitted, omitted_lines, note)
        head_part = head_text if head_text.endswith("\n") or not head_text else head_text + "\n"
        text = f"{head_part}{marker}\n{tail_text}"
        return Excerpt(
            text=text,
            total_bytes=self._total,
            shown_bytes=shown,
            omitted_bytes=omitted,
            truncated=True,
            head_text=head_text,
            tail_text=tail_text,
            omitted_lines=omitted_lines,
            marker=marker,
        )


_NOTHING = Excerpt(
    text="", total_bytes=0, shown_bytes=0, omitted_bytes=0, truncated=False, head_text="", tail_text=""
)


def shape_output(stdout: str, stderr: str) -> list[str]:
    """Return the terminal view of a run as blocks: stdout, then stderr.

    No labels: a terminal shows both streams without headers, and a model reads error text
    for what it says, not for which stream carried it (the structured result keeps them
    apart). Each stream's trailing whitespace is trimmed and an empty stream adds no block.
    The streams stay separate blocks so that a budget cut keeps the head and tail of each
    (a test runner's summary ends stdout, whatever stderr holds).

    Args:
        stdout: The stdout excerpt's text.
        stderr: The stderr excerpt's text.

    Returns:
        The non-empty streams, possibly none.
    """
    return [text for text in (stdout.rstrip(), stderr.rstrip()) if text]
