"""Fit text to a token budget: each block keeps its head and tail, the whole text is archived."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from codemode.budget._counter import TokenCounter
from codemode.errors import UserError
from codemode.state import ArchiveRef

__all__ = ["HEAD_SHARE", "MIN_BUDGET", "READ_LIMIT", "BudgetCut", "fit_to_budget", "read_archive_call"]

MIN_BUDGET = 80
"""Smallest ``max_tokens`` accepted: room for the one line that names the archived text, also
when tokens are counted as bytes (about 70 bytes, 25 tokens)."""
HEAD_SHARE = 0.6
"""Share of a cut block's room (beside its recovery line) that goes to its head (the rest to its tail)."""
READ_LIMIT = 65536
"""The ``limit`` the recovery line suggests for read_archive."""

_CHUNK = 32 * 1024
# Below this many tokens of room a cut block shows its head only: a tail that short says nothing.
_HEAD_ONLY_BELOW = 64
# A block is cut on its own only when this many tokens of it can be shown beside its recovery line.
_MIN_SHOWN = 16
_ATTEMPTS = 6


@dataclass(frozen=True)
class BudgetCut:
    """The text a model sees after budgeting.

    Attributes:
        text: What the model sees: the blocks joined by newlines, each cut one replaced by its
            head, a recovery line and its tail.
        truncated: Whether anything was cut.
        ref: The archived whole text when cut, else ``None``.
        total_bytes: UTF-8 size of the whole text.
        shown_bytes: UTF-8 bytes of the whole text kept in ``text``.
        tokens: Tokens of ``text``, counted (UTF-8 bytes under the byte counter, and for a fit
            proven by its size when ``count_fit`` is off).
    """

    text: str
    truncated: bool
    ref: ArchiveRef | None
    total_bytes: int
    shown_bytes: int
    tokens: int


def read_archive_call(ref: str, offset: int | None = None, limit: int | None = None) -> str:
    """The ``read_archive`` call that reads an archived text: the one place it is spelled out.

    Args:
        ref: The archive reference.
        offset: Where to read from; left out means the start.
        limit: How many bytes to read; left out means read_archive's default page.

    Returns:
        For example ``read_archive({ref: "ar_x", offset: 190, limit: 65536})``.
    """
    args = f'ref: "{ref}"'
    if offset is not None:
        args += f", offset: {offset}"
    if limit is not None:
        args += f", limit: {limit}"
    return f"read_archive({{{args}}})"


def _recovery_line(ref: ArchiveRef, total: int, offset: int, cut: int, *, compact: bool) -> str:
    """The line put where ``cut`` bytes starting at ``offset`` of the whole text were cut.

    The compact form, for tight budgets, leaves out the total and read_archive's default limit.
    """
    if ref.total_bytes != total:
        # The archive redacted the text, so its offsets differ from this text's: read from the start.
        if compact:
            return f"[... {cut:,} bytes cut; the redacted whole: {read_archive_call(ref.ref)} ...]"
        call = read_archive_call(ref.ref, 0, READ_LIMIT)
        return f"[... {cut:,} of {total:,} bytes cut here; the archived text was redacted, read it from the start with {call} ...]"
    if compact:
        return f"[... {cut:,} bytes cut; {read_archive_call(ref.ref, offset)} ...]"
    return f"[... {cut:,} of {total:,} bytes cut here; read on with {read_archive_call(ref.ref, offset, READ_LIMIT)} ...]"


def _utf8(text: str) -> tuple[str, bytes]:
    try:
        return text, text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: make the text representable first
        data = text.encode("utf-8", "replace")
        return data.decode("utf-8"), data


def _tokens_within(data: bytes, limit: int, counter: TokenCounter) -> int | None:
    """Tokens of ``data`` when they are at most ``limit``, else ``None``.

    The size alone proves a fit without counting (a token covers at least one byte). Otherwise
    the count stops as soon as the running total is clearly over, so the cost is bounded by
    ``limit``, not by the size of ``data``.
    """
    if len(data) <= limit:
        return len(data)
    if not counter.exact or len(data) > limit * counter.max_token_bytes:
        return None
    running = 0
    pos = 0
    while pos < len(data):
        end = min(len(data), pos + _CHUNK)
        if end < len(data):
            newline = data.rfind(b"\n", pos, end)
            end = newline + 1 if newline > pos else end
        running += counter.count(data[pos:end].decode("utf-8", "ignore"))
        if running > limit + 64:
            return None
        pos = end
    tokens = counter.count(data.decode("utf-8"))
    return tokens if tokens <= limit else None


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


def _cut_blocks(
    data: bytes,
    spans: list[tuple[int, int]],
    max_tokens: int,
    counter: TokenCounter,
    ref: ArchiveRef,
    *,
    compact: bool,
) -> BudgetCut | None:
    """Cut the blocks of ``data`` at ``spans`` so that all of them fit ``max_tokens`` together,
    or ``None`` when a cut block would have too little room beside its recovery line.

    Blocks that fit an equal share of the room stay whole and leave the rest of their share
    to the others (so a short status line survives beside two long streams); each remaining
    block keeps its head and tail around one recovery line.
    """
    total = len(data)
    widest = counter.count(_recovery_line(ref, total, total, total, compact=compact))
    room = max_tokens - (len(spans) - 1)  # a newline between blocks costs at most a token each
    sizes = [_tokens_within(data[start:end], room, counter) for start, end in spans]
    cut = list(range(len(spans)))
    while True:
        share = room // len(cut)
        whole = [i for i in cut if (size := sizes[i]) is not None and size <= share]
        if len(whole) == len(cut):  # together they miss by a little (counts do not add up exactly)
            whole.remove(max(cut, key=lambda i: sizes[i] or 0))
        if not whole:
            break
        room -= sum(sizes[i] or 0 for i in whole)
        cut = [i for i in cut if i not in whole]
    share = room // len(cut)
    for _attempt in range(_ATTEMPTS):
        shown_room = share - widest - 2
        if shown_room < _MIN_SHOWN:
            return None
        head_tokens = shown_room if shown_room < _HEAD_ONLY_BELOW else int(shown_room * HEAD_SHARE)
        parts: list[str] = []
        shown = 0
        for i, (start, end) in enumerate(spans):
            block = data[start:end]
            if i not in cut:
                parts.append(block.decode("utf-8"))
                shown += len(block)
                continue
            head = _head_end(block, head_tokens, counter)
            tail = max(_tail_start(block, shown_room - head_tokens, counter), head)
            head_text = block[:head].decode("utf-8")
            tail_text = block[tail:].decode("utf-8")
            joiner = "" if not head_text or head_text.endswith("\n") else "\n"
            line = _recovery_line(ref, total, start + head, tail - head, compact=compact)
            parts.append(f"{head_text}{joiner}{line}" + (f"\n{tail_text}" if tail_text else ""))
            shown += head + len(block) - tail
        text = "\n".join(parts)
        tokens = counter.count(text)
        if tokens <= max_tokens:
            return BudgetCut(text, True, ref, total, shown, tokens)
        share -= (tokens - max_tokens) // len(cut) + 8
    return None


def fit_to_budget(
    blocks: list[str] | tuple[str, ...],
    max_tokens: int,
    counter: TokenCounter,
    archive: Callable[[str], ArchiveRef],
    count_fit: bool = True,
) -> BudgetCut:
    """Fit ``blocks``, joined by newlines, into ``max_tokens`` tokens, archiving the whole text
    when it does not fit.

    Empty blocks are dropped. A text that fits is returned whole (its UTF-8 size proves the
    fit without a search; its tokens are counted once for `BudgetCut.tokens`). Otherwise the whole text is archived, and blocks that fit
    an equal share of the budget stay whole while each other block keeps its head (about 60%)
    and tail (about 40%) around one recovery line: how much was cut and the exact
    ``read_archive`` call that reads on from the cut. When there is not room for a recovery
    line per block, the joined text is cut as one block. The result, recovery lines included,
    fits ``max_tokens`` by an exact count, or by its UTF-8 size under the byte counter. Only
    windows near each head and tail are tokenized, so the cost does not grow with the size of
    the cut parts beyond copying bytes. Cuts fall on character boundaries, and on line
    boundaries where one is near.

    Args:
        blocks: The parts of the text, in order (for a command: stdout, stderr, status lines).
        max_tokens: The budget, at least `MIN_BUDGET`.
        counter: Counts tokens.
        archive: Stores the whole text and returns its reference (called only when cutting).
        count_fit: Count the tokens of a text whose size proves the fit; off, `BudgetCut.tokens`
            is then that size (an upper bound), and the counter is not needed for it.

    Raises:
        UserError: ``max_tokens`` is not an integer of at least `MIN_BUDGET`.
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < MIN_BUDGET:
        raise UserError(f"max_tokens must be an integer of at least {MIN_BUDGET} (got {max_tokens!r})")
    encoded = [_utf8(block) for block in blocks if block]
    text = "\n".join(block_text for block_text, _ in encoded)
    data = b"\n".join(block_data for _, block_data in encoded)
    total = len(data)
    fits = _tokens_within(data, max_tokens, counter)
    if fits is not None:
        # A fit proven by the size alone is counted still: the figure is what the model reads.
        tokens = counter.count(text) if count_fit and fits == total and counter.exact else fits
        return BudgetCut(text, False, None, total, total, tokens)

    ref = archive(text)
    spans: list[tuple[int, int]] = []
    start = 0
    for _, block_data in encoded:
        spans.append((start, start + len(block_data)))
        start += len(block_data) + 1
    # Each block cut on its own, else the joined text cut as one; recovery lines in full, else compact.
    layouts = [spans] if len(spans) == 1 else [spans, [(0, total)]]
    for layout in layouts:
        for compact in (False, True):
            cut = _cut_blocks(data, layout, max_tokens, counter, ref, compact=compact)
            if cut is not None:
                return cut
    # Not even one recovery line and a few tokens fit (only with an unusually long ref).
    line = f"[... cut; all of it: {read_archive_call(ref.ref)} ...]"
    return BudgetCut(line, True, ref, total, 0, counter.count(line))
