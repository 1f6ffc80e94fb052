"""edit_file: exact replacement, and the near-miss search that explains a failed match."""

from __future__ import annotations

import difflib
from pathlib import Path

from codemode.errors import ErrorCode, ToolError
from codemode.sandbox import Walk, locate_writable
from codemode.tools._model import ToolContext, ToolResult
from codemode.tools.files import _limits as limits
from codemode.tools.files._diff import diff_for_text, unified_diff
from codemode.tools.files._located import _atomic_write, read_all, regular_file
from codemode.tools.files._messages import display, fmt_bytes
from codemode.tools.files._models import EditFileArgs
from codemode.tools.files._text import decode_for_edit, encode

EDIT_DESCRIPTION = (
    "Replace exact text in a file. `old_text` must occur exactly once (include enough surrounding lines "
    "to make it unique) unless `replace_all` is true. No match or several matches change nothing and "
    "report the matching line numbers or the closest near-miss. Keeps encoding, BOM, CRLF (give LF) "
    "and a missing final newline. Returns a unified diff. Files up to "
    f"{limits.EDIT_MAX_BYTES // (1024 * 1024)} MiB."
)


def edit_file(args: EditFileArgs, ctx: ToolContext) -> ToolResult:
    """Replace exact text in a file."""
    with locate_writable(ctx.policy, ctx.workspace, args.path) as found:
        return _edit(args, ctx, found)


def _edit(args: EditFileArgs, ctx: ToolContext, found: Walk) -> ToolResult:
    real = Path(found.path)
    shown = display(ctx, real)
    if not args.old_text:
        raise ToolError(
            "old_text is empty. To create or replace a whole file use write_file; to insert text, "
            "put the neighbouring existing text in old_text and the same text plus your insertion "
            "in new_text.",
            {"path": str(real)},
            code=ErrorCode.INVALID_ARGUMENTS,
        )
    if args.old_text == args.new_text:
        raise ToolError(
            "old_text and new_text are identical, so there is nothing to change. "
            "Give the new text in new_text.",
            {"path": str(real)},
            code=ErrorCode.NO_CHANGE,
        )
    st = regular_file(found, shown, hint="Create new files with write_file.")
    if st.st_size > limits.EDIT_MAX_BYTES:
        raise ToolError(
            f"{shown} is {fmt_bytes(st.st_size)}, over edit_file's {limits.EDIT_MAX_BYTES // (1024 * 1024)} MiB "
            "limit. Edit it with bash (e.g. sed -i).",
            {"path": str(real), "bytes": st.st_size, "limit": limits.EDIT_MAX_BYTES},
            code=ErrorCode.TOO_LARGE,
        )
    data = read_all(found, shown, limits.EDIT_MAX_BYTES)
    decoded = decode_for_edit(data, shown)
    text = decoded.text
    old, new = args.old_text, args.new_text
    if "\r\n" not in text:
        # CRLF files are matched in LF form (decoded.text); LF files also take CRLF input as LF.
        old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
        if old == new:
            raise ToolError(
                "old_text and new_text differ only in line endings, which edit_file keeps as the file has "
                "them; there is nothing to change.",
                {"path": str(real)},
                code=ErrorCode.NO_CHANGE,
            )
    count = text.count(old)
    if count == 0:
        raise _no_match(text, old, shown, str(real))
    if count > 1 and not args.replace_all:
        raise _many_matches(text, old, count, shown, str(real))
    updated = text.replace(old, new)
    out_text = updated.replace("\n", "\r\n") if decoded.crlf else updated
    payload = encode(out_text, decoded.encoding, shown, "new_text")
    _atomic_write(found, payload, shown, st)
    diff = unified_diff(text, updated, shown)
    summary = (
        f"Edited {shown}: {count} replacement{'s' if count != 1 else ''}, "
        f"{len(data):,} -> {len(payload):,} bytes."
    )
    return ToolResult.from_text(
        f"{summary}\n{diff_for_text(diff)}",
        {
            "path": str(real),
            "replacements": count,
            "diff": diff,
            "bytes_before": len(data),
            "bytes_after": len(payload),
        },
    )


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _many_matches(text: str, old: str, count: int, shown: str, real: str) -> ToolError:
    positions: list[int] = []
    pos = text.find(old)
    while pos != -1:
        positions.append(pos)
        pos = text.find(old, pos + len(old))
    file_lines = text.split("\n")
    matches = []
    for p in positions[:50]:
        line = _line_of(text, p)
        matches.append({"line": line, "text": file_lines[line - 1][:200]})
    listed = ", ".join(str(m["line"]) for m in matches[:20])
    more = f" and {count - 20} more" if count > 20 else ""
    return ToolError(
        f"old_text occurs {count} times in {shown} (at lines {listed}{more}); nothing was changed. "
        "Add surrounding lines to old_text so it matches once, or set replace_all: true to replace all.",
        {"path": real, "match_count": count, "matches": matches},
        code=ErrorCode.MULTIPLE_MATCHES,
    )


def _norm_ws(line: str) -> str:
    return " ".join(line.split())


def _hint(window: list[str], wanted: list[str]) -> str:
    joined_w, joined_o = "\n".join(window), "\n".join(wanted)
    if joined_w.lower() == joined_o.lower():
        return "letter case differs"
    if [line.strip() for line in window] == [line.strip() for line in wanted]:
        w_tabs = any(line.startswith("\t") for line in window)
        o_tabs = any(line.startswith("\t") for line in wanted)
        if w_tabs != o_tabs:
            return f"indentation differs: the file indents with {'tabs' if w_tabs else 'spaces'}"
        return "indentation or trailing whitespace differs"
    if [_norm_ws(line) for line in window] == [_norm_ws(line) for line in wanted]:
        return "whitespace inside lines differs"
    if [_norm_ws(line).lower() for line in window] == [_norm_ws(line).lower() for line in wanted]:
        return "whitespace and letter case differ"
    for i, (have, want) in enumerate(zip(window, wanted, strict=False)):
        if have != want:
            return f"first difference in line {i + 1} of the region: the file has {have[:160]!r}"
    return "the region has a different number of lines"


def _candidate_starts(text: str, file_lines: list[str], wanted: list[str], k: int) -> list[int]:
    """Window starts worth an exact similarity check, found cheaply.

    Windows are ranked by how many of their lines equal a line of ``old_text`` (ignoring
    whitespace and case), then by how many words they share with it. When nothing is shared
    at all, and the file is small enough, single lines are ranked by character similarity to
    the first non-blank line of ``old_text``.
    """
    keys = {_norm_ws(line).lower() for line in wanted if line.strip()}
    words = {word for line in wanted for word in line.split()}
    # Words of old_text weigh by rarity in the file, so a distinctive word outranks "the".
    weight = {word: 1.0 / max(1, text.count(word)) for word in words}
    per_line: list[float] = []
    for line in file_lines:
        parts = line.split()
        score = sum(map(weight.__getitem__, words.intersection(parts)))
        if parts and " ".join(parts).lower() in keys:
            score += 100.0
        per_line.append(score)
    windows = max(1, len(file_lines) - k + 1)
    score = sum(per_line[:k])
    scores = [score]
    for start in range(1, windows):
        score += per_line[start + k - 1] - per_line[start - 1]
        scores.append(score)
    if max(scores) > 0:
        ranked = sorted(range(windows), key=lambda s: (-scores[s], s))
        return ranked[: limits.NEAR_MISS_CANDIDATES]
    if sum(len(line) for line in file_lines) > limits.NEAR_MISS_FUZZY_CHARS:
        return []
    anchor_index = next((i for i, line in enumerate(wanted) if line.strip()), 0)
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(wanted[anchor_index])
    line_scores: list[tuple[float, int]] = []
    for i, line in enumerate(file_lines):
        matcher.set_seq1(line)
        if matcher.real_quick_ratio() >= 0.5:
            line_scores.append((matcher.quick_ratio(), i))
    line_scores.sort(key=lambda item: (-item[0], item[1]))
    starts: list[int] = []
    for _, i in line_scores[: limits.NEAR_MISS_CANDIDATES]:
        start = min(max(0, i - anchor_index), windows - 1)
        if start not in starts:
            starts.append(start)
    return starts


def _no_match(text: str, old: str, shown: str, real: str) -> ToolError:
    file_lines = text.split("\n")
    wanted = old.strip("\n").split("\n")
    k = min(len(wanted), len(file_lines))
    best: tuple[float, int] | None = None
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2("\n".join(wanted))
    searched = len(file_lines) <= limits.NEAR_MISS_MAX_LINES
    for start in _candidate_starts(text, file_lines, wanted, k) if searched else []:
        matcher.set_seq1("\n".join(file_lines[start : start + k]))
        ratio = matcher.ratio()
        if best is None or ratio > best[0]:
            best = (ratio, start)
    data: dict[str, object] = {"path": real, "match_count": 0}
    message = f"old_text was not found in {shown}; nothing was changed."
    if "\r" in old and "\r" not in text:
        message += " old_text contains carriage returns (\\r) but the file has none."
    if best is not None and best[0] >= 0.5:
        ratio, start = best
        window = file_lines[start : start + k]
        hint = _hint(window, wanted)
        first, last = start + 1, start + k
        region = "\n".join(f"{first + i:6d}\t{line}" for i, line in enumerate(window))
        if len(region) > 4000:
            region = region[:4000] + "\n[region cut; read it with read_file]"
        message += (
            f" Closest match: lines {first}-{last} (similarity {ratio:.2f}); {hint}. Those lines are:\n"
            f"{region}\nCopy old_text exactly from the file (read_file shows it) and try again."
        )
        data["near_miss"] = {
            "start_line": first,
            "end_line": last,
            "similarity": round(ratio, 3),
            "hint": hint,
            "text": "\n".join(window)[:20000],
        }
    elif not searched:
        message += (
            f" The file has {len(file_lines):,} lines, too many to search for a near miss; find the "
            "text with bash (grep -n) and copy old_text exactly."
        )
        data["near_miss"] = None
    else:
        message += " No similar region either; read the file with read_file and copy old_text exactly."
        data["near_miss"] = None
    return ToolError(message, data, code=ErrorCode.NO_MATCH)
