"""read_file: one page of a text file, numbered like ``cat -n``."""

from __future__ import annotations

import codecs
import io
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from codemode.errors import ErrorCode, ToolError
from codemode.sandbox import Walk, locate_readable
from codemode.tools._model import ToolContext, ToolResult
from codemode.tools.files import _limits as limits
from codemode.tools.files._located import _open_located, regular_file
from codemode.tools.files._messages import display, os_error
from codemode.tools.files._models import ReadFileArgs
from codemode.tools.files._text import (
    binary_error,
    cut_utf8,
    line_ending,
    looks_like_text,
    sniff,
    split_lf,
    strip_eol,
)

_CHUNK = 1024 * 1024


READ_DESCRIPTION = (
    "Read a text file, numbered like `cat -n`. Pages of at most "
    f"{limits.MAX_LINES} lines or {limits.MAX_PAGE_BYTES // 1024} KiB: `offset` is the 1-based first line, `limit` the "
    "number of lines. When more remains, the last line says the exact call to continue. Binary files "
    "are refused (use bash)."
)


def read_file(args: ReadFileArgs, ctx: ToolContext) -> ToolResult:
    """Read one page of a text file."""
    with locate_readable(ctx.policy, ctx.workspace, args.path) as found:
        return _read_page(args, ctx, found)


def _read_page(args: ReadFileArgs, ctx: ToolContext, found: Walk) -> ToolResult:
    real = Path(found.path)
    shown = display(ctx, real)
    regular_file(found, shown, hint="Check the path; list the directory with bash ls.")
    limit = min(args.limit, limits.MAX_LINES)
    try:
        with _open_located(found, shown, "read") as fh:
            st = os.fstat(fh.fileno())
            head = fh.read(limits.SNIFF_BYTES)
            bom = sniff(head, shown, st.st_size)
            scan = _scan(fh, st.st_size)
            if scan.utf8_valid is None:
                try:
                    head.decode("utf-8")
                    head_utf8 = True
                except UnicodeDecodeError as exc:
                    head_utf8 = exc.start >= len(head) - 3  # only a sequence cut by the sniff size
            else:
                head_utf8 = scan.utf8_valid
            if not head_utf8 and not looks_like_text(head):
                raise binary_error(shown, st.st_size, "it is not UTF-8 and is full of control bytes")
            encoding = (bom or "utf-8") if head_utf8 else "latin-1"
            fh.seek(0)
            skipped = _skip_lines(fh, args.offset - 1)
            if skipped < args.offset - 1 or (args.offset > 1 and not fh.peek(1)):
                total = scan.total_lines if scan.total_lines is not None else skipped
                raise ToolError(
                    f"offset {args.offset} is past the end of {shown}, which has {total} lines. "
                    f"Use an offset from 1 to {max(total, 1)}.",
                    {"path": str(real), "offset": args.offset, "total_lines": total},
                    code=ErrorCode.OUT_OF_RANGE,
                )
            raw_lines: list[bytes] = []
            used = 0
            cut_line: dict[str, int] | None = None
            while len(raw_lines) < limit:
                line = fh.readline(limits.MAX_PAGE_BYTES - used + 1)
                if not line:
                    break
                if used + len(line) > limits.MAX_PAGE_BYTES:
                    if raw_lines:
                        fh.seek(-len(line), os.SEEK_CUR)
                        break
                    # A single line longer than the byte cap: cut it, skip the rest of it.
                    line_no = args.offset
                    shown_part = cut_utf8(line, limits.MAX_PAGE_BYTES)
                    rest = len(line) - len(shown_part)
                    while not line.endswith(b"\n"):
                        line = fh.readline(_CHUNK)
                        if not line:
                            break
                        rest += len(line)
                    raw_lines.append(shown_part)
                    cut_line = {
                        "line": line_no,
                        "shown_bytes": len(shown_part),
                        "line_bytes": len(shown_part) + rest,
                    }
                    used += len(shown_part)
                    break
                raw_lines.append(line)
                used += len(line)
            more = bool(fh.peek(1))
    except OSError as exc:
        raise os_error(exc, "read", shown) from exc

    raw = b"".join(raw_lines)
    if bom and args.offset == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
        raw_lines[0] = raw_lines[0][len(codecs.BOM_UTF8) :]
    replaced = False
    if encoding == "latin-1":
        content = raw.decode("latin-1")
    else:
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError:
            content = raw.decode("utf-8", errors="replace")
            replaced = True
    lines = split_lf(content)
    start = args.offset
    end = start + len(lines) - 1
    next_offset = end + 1 if more else None
    truncated = more or cut_line is not None
    body = "\n".join(f"{start + i:6d}\t{strip_eol(line)}" for i, line in enumerate(lines))
    notes: list[str] = []
    if cut_line is not None:
        n, shown_bytes = cut_line["line"], cut_line["shown_bytes"]
        notes.append(
            f"[line {n} is {cut_line['line_bytes']:,} bytes; showing its first {shown_bytes:,}. "
            f"Read the rest with bash: sed -n '{n}p' {shlex.quote(shown)} | cut -b {shown_bytes + 1}-]"
        )
    if replaced:
        notes.append("[this page has bytes that are not valid UTF-8; they are shown as \ufffd]")
    if not lines:
        body = f"[{shown} is empty]" if st.st_size == 0 else f"[{shown}: no lines at offset {start}]"
    elif next_offset is not None:
        of = f"{scan.total_lines}" if scan.total_lines is not None else "an uncounted number (file too large)"
        quoted = json.dumps(args.path, ensure_ascii=False)
        notes.append(
            f"[showing lines {start}-{end} of {of}; continue with read_file({{path: {quoted}, "
            f"offset: {next_offset}}})]"
        )
    text = "\n".join([body, *notes])
    structured: dict[str, object] = {
        "path": str(real),
        "content": content,
        "start_line": start,
        "end_line": end,
        "total_lines": scan.total_lines,
        "next_offset": next_offset,
        "truncated": truncated,
        "encoding": encoding + (" (invalid bytes replaced)" if replaced else ""),
        "line_ending": line_ending(head),
        "bytes": len(raw),
    }
    if cut_line is not None:
        structured["cut_line"] = cut_line
    return ToolResult.from_text(text, structured)


@dataclass
class _Scan:
    total_lines: int | None
    utf8_valid: bool | None  # None: not scanned (file beyond SCAN_LIMIT)


def _scan(fh: io.BufferedReader, size: int) -> _Scan:
    """Count lines and check UTF-8 validity, streaming, for files up to SCAN_LIMIT."""
    if size > limits.SCAN_LIMIT:
        return _Scan(None, None)
    fh.seek(0)
    newlines = 0
    decoder = codecs.getincrementaldecoder("utf-8")()
    valid = True
    last = b""
    remaining = size  # what the file held when opened: a file growing meanwhile cannot keep us here
    while remaining > 0 and (chunk := fh.read(min(_CHUNK, remaining))):
        remaining -= len(chunk)
        newlines += chunk.count(b"\n")
        last = chunk[-1:]
        if valid and not chunk.isascii():
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError:
                valid = False
    if valid:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            valid = False
    total = newlines + (1 if last and last != b"\n" else 0)
    return _Scan(total, valid)


def _skip_lines(fh: io.BufferedReader, count: int) -> int:
    """Advance past ``count`` lines; return how many were actually skipped (fewer at EOF)."""
    skipped = 0
    while skipped < count:
        start = fh.tell()
        chunk = fh.read(_CHUNK)
        if not chunk:
            return skipped
        n = chunk.count(b"\n")
        if skipped + n < count:
            skipped += n
            if len(chunk) < _CHUNK:  # last chunk; a final line without newline counts too
                if not chunk.endswith(b"\n"):
                    skipped += 1
                return skipped
            continue
        pos = -1
        for _ in range(count - skipped):
            pos = chunk.index(b"\n", pos + 1)
        fh.seek(start + pos + 1)
        return count
    return skipped
