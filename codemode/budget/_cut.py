"""Cut a text to a token budget: head + one recovery line + tail, the whole archived."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from codemode.archive import ArchiveRef
from codemode.budget._counter import TokenCounter
from codemode.errors import UserError

__all__ = ["HEAD_SHARE", "MIN_BUDGET", "READ_LIMIT", "BudgetCut", "cut_to_budget"]

MIN_BUDGET = 256
"""Smallest ``max_tokens`` accepted: room for the recovery line even when tokens are counted as bytes."""
HEAD_SHARE = 0.6
"""Share of the room left beside the recovery line that goes to the head (the rest to the tail)."""
READ_LIMIT = 65536
"""The ``limit`` the recovery line suggests for read_archive."""

_CHUNK = 32 * 1024


@dataclass(frozen=True)
class BudgetCut:
    """The text a model sees after budgeting.

    Attributes:
        text: What the model sees (the whole text, or head + recovery line + tail).
        truncated: Whether anything was cut.
        ref: The archived whole text when cut, else ``None``.
        total_bytes: UTF-8 size of the whole text.
        shown_bytes: UTF-8 bytes of the whole text kept in ``text`` (head + tail).
        tokens: Tokens of ``text``: exact when it was counted, else an upper bound (its UTF-8
            size, when the size alone proved it fits).
    """

    text: str
    truncated: bool
    ref: ArchiveRef | None
    total_bytes: int
    shown_bytes: int
    tokens: int


def _utf8(text: str) -> tuple[str, bytes]:
    try:
        return text, text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: make the text representable first
        data = text.encode("utf-8", "replace")
        return data.decode("utf-8"), data


def _exact_fit(text: str, data: bytes, max_tokens: int, counter: TokenCounter) -> int | None:
    """Token count of the whole text when it fits ``max_tokens``, else ``None``.

    Stops as soon as the running count is clearly over, so the cost is bounded by the budget,
    not by the size of the text.
    """
    if not counter.exact or len(data) > max_tokens * counter.max_token_bytes:
        return None
    running = 0
    pos = 0
    while pos < len(data):
        end = min(len(data), pos + _CHUNK)
        if end < len(data):
            newline = data.rfind(b"\n", pos, end)
            end = newline + 1 if newline > pos else end
        running += counter.count(data[pos:end].decode("utf-8", "ignore"))
        if running > max_tokens + 64:
            return None
        pos = end
    tokens = counter.count(text)
    return tokens if tokens <= max_tokens else None


def _char_start(data: bytes, pos: int) -> int:
    """Move ``pos`` back to the start of the UTF-8 character it falls in."""
    while 0 < pos < len(data) and (data[pos] & 0xC0) == 0x80:
        pos -= 1
    return pos


def _window_ids(data: bytes, tokens: int, counter: TokenCounter, *, from_end: bool) -> list[int]:
    """Token ids of the shortest window at the start (or end) of ``data`` holding more than
    ``tokens`` tokens, or of all of it: the window doubles, so the cost follows the cut, not
    the size of ``data``."""
    size = len(data)
    window = min(size, max(tokens * 6, 1024))
    while True:
        piece = data[size - window :] if from_end else data[:window]
        ids = counter.encode(piece.decode("utf-8", "ignore")) or []
        if len(ids) > tokens or window >= size:
            return ids
        window = min(size, window * 2)


def _head_end(data: bytes, tokens: int, counter: TokenCounter) -> int:
    """Byte length of a prefix of at most ``tokens`` tokens, ending at a line end if one is near."""
    if tokens <= 0:
        return 0
    if not counter.exact:
        end = min(len(data), tokens)
    else:
        end = len(counter.decode_bytes(_window_ids(data, tokens, counter, from_end=False)[:tokens]))
    end = _char_start(data, end)
    newline = data.rfind(b"\n", 0, end)
    if newline >= end // 2:
        end = newline + 1
    return end


def _tail_start(data: bytes, tokens: int, counter: TokenCounter) -> int:
    """Byte offset of a suffix of at most ``tokens`` tokens, starting at a line start if one is near."""
    size = len(data)
    if tokens <= 0:
        return size
    if not counter.exact:
        start = max(0, size - tokens)
    else:
        start = size - len(counter.decode_bytes(_window_ids(data, tokens, counter, from_end=True)[-tokens:]))
    while start < size and (data[start] & 0xC0) == 0x80:
        start += 1
    newline = data.find(b"\n", start, start + (size - start) // 2)
    if newline >= 0:
        start = newline + 1
    return start


def _notice(ref: ArchiveRef, total: int, head: int, tail_start: int) -> str:
    cut = tail_start - head
    if ref.total_bytes == total:
        return (
            f"[... {cut:,} of {total:,} bytes cut here; the full text is archived as {ref.ref}: "
            f'read_archive({{ref: "{ref.ref}", offset: {head}, limit: {READ_LIMIT}}}) '
            "reads on from the cut ...]"
        )
    # The archive redacted the text, so its offsets differ from this text's: read from the start.
    return (
        f"[... {cut:,} of {total:,} bytes cut here; the full text ({ref.total_bytes:,} bytes as archived) is "
        f'{ref.ref}: read_archive({{ref: "{ref.ref}", offset: 0, limit: {READ_LIMIT}}}) '
        "reads it from the start ...]"
    )


def cut_to_budget(
    text: str, max_tokens: int, counter: TokenCounter, archive: Callable[[str], ArchiveRef]
) -> BudgetCut:
    """Fit ``text`` into ``max_tokens`` tokens, archiving the whole text when it does not fit.

    A text over the budget becomes head (about 60%) + one line naming the archive reference,
    how much was cut and the exact ``read_archive`` call that reads on from the cut + tail
    (about 40%); the returned text, that line included, fits ``max_tokens`` by an exact count.
    Only windows near the head and the tail are tokenized, so the cost does not grow with the
    size of the cut part beyond copying bytes. Cuts fall on character boundaries, and on line
    boundaries where one is near.

    Args:
        text: The whole text.
        max_tokens: The budget, at least `MIN_BUDGET`.
        counter: Counts tokens.
        archive: Stores the whole text and returns its reference (called only when cutting).

    Raises:
        UserError: ``max_tokens`` is not an integer of at least `MIN_BUDGET`.
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < MIN_BUDGET:
        raise UserError(f"max_tokens must be an integer of at least {MIN_BUDGET} (got {max_tokens!r})")
    text, data = _utf8(text)
    total = len(data)
    if total <= max_tokens:  # every token covers at least one byte
        return BudgetCut(text, False, None, total, total, total)
    fits = _exact_fit(text, data, max_tokens, counter)
    if fits is not None:
        return BudgetCut(text, False, None, total, total, fits)

    ref = archive(text)
    worst = _notice(ref, total, total, total)
    room = max_tokens - counter.count(worst) - 4
    for _attempt in range(6):
        if room < 8:
            break
        head_tokens = int(room * HEAD_SHARE)
        head = _head_end(data, head_tokens, counter)
        tail = max(_tail_start(data, room - head_tokens, counter), head)
        head_text = data[:head].decode("utf-8")
        tail_text = data[tail:].decode("utf-8")
        joiner = "" if not head_text or head_text.endswith("\n") else "\n"
        out = f"{head_text}{joiner}{_notice(ref, total, head, tail)}\n{tail_text}"
        tokens = counter.count(out)
        if tokens <= max_tokens:
            return BudgetCut(out, True, ref, total, head + total - tail, tokens)
        room -= tokens - max_tokens + 8
    out = _notice(ref, total, 0, total)
    tokens = counter.count(out)
    if tokens > max_tokens:
        out = f'[... output cut; the full text is archived: read_archive({{ref: "{ref.ref}"}}) ...]'
        tokens = counter.count(out)
    return BudgetCut(out, True, ref, total, 0, tokens)
