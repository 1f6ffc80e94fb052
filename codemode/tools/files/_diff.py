"""Unified diffs of an edit or a write, computed over the changed region only."""

from __future__ import annotations

import difflib
import re

from codemode.tools.files import _limits as limits
from codemode.tools.files._text import split_lf


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by binary search over C-level slice comparisons."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: str, b: str, limit: int) -> int:
    """Length of the common suffix, at most ``limit``."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


_HUNK = re.compile(r"^@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@")


def unified_diff(before: str, after: str, shown: str, *, created: bool = False, context: int = 3) -> str:
    """Unified diff of two texts, computed only over the region that changed.

    The common prefix and suffix (snapped to whole lines) are skipped, ``context`` lines of
    them kept, and the hunk line numbers shifted back, so a one-line edit of a large file costs
    a few string comparisons instead of a whole-file diff.
    """
    if before == after:
        return ""
    prefix = _common_prefix(before, after)
    start = before.rfind("\n", 0, prefix) + 1
    suffix = _common_suffix(before, after, min(len(before), len(after)) - prefix)
    newline = before.find("\n", len(before) - suffix)
    end_a = newline + 1 if newline != -1 else len(before)
    end_b = len(after) - (len(before) - end_a)
    lead_start = start
    for _ in range(context):
        if lead_start == 0:
            break
        lead_start = before.rfind("\n", 0, lead_start - 1) + 1
    trail_end = end_a
    for _ in range(context):
        if trail_end >= len(before):
            break
        newline = before.find("\n", trail_end)
        trail_end = newline + 1 if newline != -1 else len(before)
    lead = split_lf(before[lead_start:start])
    trail = split_lf(before[end_a:trail_end])
    offset = before.count("\n", 0, lead_start)
    lines = difflib.unified_diff(
        lead + split_lf(before[start:end_a]) + trail,
        lead + split_lf(after[start:end_b]) + trail,
        fromfile="/dev/null" if created else f"a/{shown}",
        tofile=f"b/{shown}",
        n=context,
    )
    out: list[str] = []
    size = 0
    for line in lines:
        piece = line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        if offset and piece.startswith("@@"):
            piece = _HUNK.sub(
                lambda m: f"@@ -{int(m[1]) + offset}{m[2]} +{int(m[3]) + offset}{m[4]} @@", piece, count=1
            )
        if size + len(piece) > limits.DIFF_MAX_CHARS:
            out.append(f"[diff cut at {limits.DIFF_MAX_CHARS:,} characters; read the file with read_file]\n")
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)


def diff_for_text(diff: str) -> str:
    lines = diff.splitlines()
    if len(lines) <= limits.DIFF_TEXT_MAX_LINES:
        return diff.rstrip("\n")
    kept = "\n".join(lines[: limits.DIFF_TEXT_MAX_LINES])
    return (
        f"{kept}\n[diff cut after {limits.DIFF_TEXT_MAX_LINES} of {len(lines)} lines; the whole diff is in "
        "structured_content.diff, or read the file with read_file]"
    )
