"""File tools: read_file (paged), edit_file (exact replacement), write_file (whole file).

Decisions worth knowing:

* Lines are separated by ``\\n``; a ``\\r\\n`` pair is one line ending (a lone ``\\r`` is text).
* read_file pages by lines: at most `MAX_LINES` lines and `MAX_PAGE_BYTES` bytes of raw file
  per page, whichever comes first. A single line longer than the byte cap is cut at a character
  boundary; the page then says how to read the rest of that line with bash, and the next page
  starts at the following line. Total lines are counted (and UTF-8 validity checked) for files
  up to `SCAN_LIMIT` bytes; beyond that ``total_lines`` is ``None`` and pages are decoded on
  their own (invalid bytes shown as U+FFFD and flagged).
* Text is UTF-8, UTF-8 with BOM, or (when not valid UTF-8) Latin-1, which round-trips every
  byte. NUL bytes in the first 8 KiB, or a UTF-16/32 BOM, mean binary: refused.
* edit_file keeps the encoding, BOM, line endings (a CRLF file is matched and written in LF form
  and converted back) and a missing final newline. write_file writes ``content`` as UTF-8,
  exactly as given.
* Paths are resolved by descriptor (`codemode.sandbox._fs`): each component opened without
  following symlinks, a symlink's target resolved the same way (so the sandbox checks the real
  path), and every read, ``mkdirat``, temp file and ``renameat`` goes through the descriptors the
  check was made on, so a component swapped for a symlink after the check redirects nothing.
* Only regular files on real file systems are opened. The target is first held as an ``O_PATH``
  descriptor (which opens nothing) and ``fstat``-ed: devices, FIFOs, sockets and files of kernel
  pseudo file systems (``/proc``, ``/sys``, ...) are refused before any open, so nothing blocks a
  host thread or consumes data (``/proc/kmsg``). The file is then opened non-blocking, by name
  under the pinned directory with ``O_NOFOLLOW``, and must be the inode that was checked.
* Writes are atomic: a temp file in the same directory, fsync, ``renameat``, fsync of the
  directory. A new file is renamed into place with ``RENAME_NOREPLACE``, an existing one only if
  its name still holds the file that was read; otherwise nothing is written and the error says
  so. An existing file keeps its mode; new files get 0644 minus umask. Replacing the file gives it
  a new inode, so a hard link to it elsewhere keeps the old content.
"""

from __future__ import annotations

import codecs
import difflib
import errno
import io
import json
import os
import re
import secrets
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic

from codemode.errors import ErrorCode, ToolError
from codemode.sandbox._fs import Changed, Walk, open_at, pseudo_fs, rename_into, reopen
from codemode.sandbox._paths import locate_readable, locate_writable
from codemode.tools._model import Tool, ToolContext, ToolResult, make_tool

__all__ = [
    "EDIT_MAX_BYTES",
    "MAX_LINES",
    "MAX_PAGE_BYTES",
    "OVERWRITE_THRESHOLD",
    "SCAN_LIMIT",
    "CutLine",
    "EditFileArgs",
    "EditFileResult",
    "ReadFileArgs",
    "ReadFileResult",
    "WriteFileArgs",
    "WriteFileResult",
    "file_tools",
]

MAX_LINES = 2000
MAX_PAGE_BYTES = 256 * 1024
SCAN_LIMIT = 64 * 1024 * 1024
EDIT_MAX_BYTES = 64 * 1024 * 1024
OVERWRITE_THRESHOLD = 32 * 1024
SNIFF_BYTES = 8192
DIFF_TEXT_MAX_LINES = 300
DIFF_MAX_CHARS = 1024 * 1024
_CHUNK = 1024 * 1024
NEAR_MISS_CANDIDATES = 40
NEAR_MISS_FUZZY_CHARS = 1024 * 1024
NEAR_MISS_MAX_LINES = 200_000


# ---------------------------------------------------------------------------- argument models


class ReadFileArgs(pydantic.BaseModel):
    """Arguments of read_file."""

    model_config = pydantic.ConfigDict(extra="forbid")

    path: str = pydantic.Field(description="File path, absolute or relative to the workspace root.")
    offset: int = pydantic.Field(default=1, ge=1, description="1-based number of the first line to show.")
    limit: int = pydantic.Field(
        default=MAX_LINES, ge=1, description=f"Maximum number of lines to show (at most {MAX_LINES})."
    )


class EditFileArgs(pydantic.BaseModel):
    """Arguments of edit_file."""

    model_config = pydantic.ConfigDict(extra="forbid")

    path: str = pydantic.Field(description="File path, absolute or relative to the workspace root.")
    old_text: str = pydantic.Field(description="Exact text to replace, including indentation.")
    new_text: str = pydantic.Field(description="Replacement text.")
    replace_all: bool = pydantic.Field(
        default=False, description="Replace every occurrence instead of requiring exactly one."
    )


class WriteFileArgs(pydantic.BaseModel):
    """Arguments of write_file."""

    model_config = pydantic.ConfigDict(extra="forbid")

    path: str = pydantic.Field(description="File path, absolute or relative to the workspace root.")
    content: str = pydantic.Field(description="The whole new content of the file (written as UTF-8).")
    create_only: bool = pydantic.Field(default=False, description="Fail if the file already exists.")
    overwrite: bool = pydantic.Field(
        default=False,
        description=f"Required to replace an existing file larger than {OVERWRITE_THRESHOLD // 1024} KiB.",
    )


# ---------------------------------------------------------------------------- result models


class CutLine(pydantic.BaseModel):
    """A line longer than a page's byte cap, shown cut."""

    line: int = pydantic.Field(description="Its line number.")
    shown_bytes: int = pydantic.Field(description="Bytes of it shown.")
    line_bytes: int = pydantic.Field(description="Its whole length in bytes.")


class ReadFileResult(pydantic.BaseModel):
    """What read_file returns."""

    path: str = pydantic.Field(description="The resolved absolute path.")
    content: str = pydantic.Field(description="The page's raw text (no line numbers).")
    start_line: int
    end_line: int
    total_lines: int | None = pydantic.Field(description="null when the file is too large to count.")
    next_offset: int | None = pydantic.Field(description="The offset of the next page; null at the end.")
    truncated: bool
    encoding: str = pydantic.Field(description='"utf-8", "utf-8-sig" or "latin-1".')
    line_ending: Literal["lf", "crlf", "mixed", "none"]
    bytes: int = pydantic.Field(description="Bytes of the file this page covers.")
    cut_line: CutLine | None = pydantic.Field(default=None, description="Present when a long line was cut.")


class EditFileResult(pydantic.BaseModel):
    """What edit_file returns."""

    path: str
    replacements: int
    diff: str = pydantic.Field(description="Unified diff of the change.")
    bytes_before: int
    bytes_after: int


class WriteFileResult(pydantic.BaseModel):
    """What write_file returns."""

    path: str
    created: bool = pydantic.Field(description="true when the file did not exist before.")
    bytes: int
    lines: int
    diff: str = pydantic.Field(description="Unified diff against the previous content.")


# ---------------------------------------------------------------------------- helpers


def _display(ctx: ToolContext, real: Path) -> str:
    """The path as a model reads it best: relative to the workspace when inside it."""
    try:
        workspace = Path(os.path.realpath(ctx.workspace))
        return str(real.relative_to(workspace))
    except ValueError:
        return str(real)


def _fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB ({n:,} bytes)"
    return f"{n / (1024 * 1024):.1f} MiB ({n:,} bytes)"


def _os_error(exc: OSError, action: str, path: str) -> ToolError:
    """A clear message for a file-system error the model can act on."""
    code = exc.errno
    if code in (errno.EACCES, errno.EPERM):
        what = "permission denied by the file system (not by codemode's sandbox)"
    elif code == errno.ENOSPC:
        what = "no space left on the device"
    elif code == errno.EROFS:
        what = "the file system is read-only"
    elif code == errno.EFBIG:
        what = "the file is larger than the file system or process allows"
    elif code == errno.ENOTDIR:
        what = "a component of the path is a file, not a directory"
    elif code == errno.ENOENT:
        what = "a directory on the way does not exist (any more: it was removed meanwhile)"
    else:
        what = exc.strerror or str(exc)
    return ToolError(
        f"cannot {action} {path}: {what}.",
        {"path": path, "errno": errno.errorcode.get(code or 0, str(code)), "error": str(exc)},
        code=ErrorCode.OS_ERROR,
    )


def _close_names(found: Walk) -> list[str]:
    """Names like the missing one in its directory, listed through the walk's descriptor."""
    try:
        dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=found.parent_fd)
    except OSError:
        return []
    try:
        names = os.listdir(dfd)
    except OSError:
        return []
    finally:
        os.close(dfd)
    return difflib.get_close_matches(found.name, names, n=5, cutoff=0.5)


def _missing(found: Walk, shown: str, *, hint: str) -> ToolError:
    real = Path(found.path)
    if found.missing_dirs:
        return ToolError(
            f"{shown} does not exist: directory {real.parent} does not exist "
            f"(deepest existing directory: {found.parent_path}). {hint}",
            {"path": str(real), "missing_dir": str(real.parent), "existing_ancestor": found.parent_path},
            code=ErrorCode.NOT_FOUND,
        )
    close = _close_names(found)
    suggestion = f" Did you mean: {', '.join(close)}?" if close else ""
    return ToolError(
        f"{shown} does not exist.{suggestion} {hint}",
        {"path": str(real), "similar": [str(real.parent / name) for name in close]},
        code=ErrorCode.NOT_FOUND,
    )


_SPECIAL_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_unreadable_kind(found: Walk, st: os.stat_result, shown: str) -> None:
    """Refuse devices, FIFOs, sockets and kernel pseudo-files, before anything opens them.

    ``st`` and ``found.fd`` come from an ``O_PATH`` descriptor, which runs no driver's open, so
    a FIFO cannot block here and ``/proc/kmsg`` loses nothing.
    """
    quoted = shlex.quote(shown)
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _SPECIAL_KINDS if test(st.st_mode)), "not a file")
        raise ToolError(
            f"{shown} is not a regular file ({kind}); the file tools only handle regular files and never "
            f"open other kinds (reading one can block or consume data). Use bash for it, e.g. "
            f"`head -c 4096 {quoted} | xxd`.",
            {"path": found.path, "kind": "special", "file_type": kind},
            code=ErrorCode.NOT_A_FILE,
        )
    assert found.fd is not None
    pseudo = pseudo_fs(found.fd)
    if pseudo is not None:
        raise ToolError(
            f"{shown} is a file of {pseudo}, a kernel pseudo file system: the kernel makes up its content "
            "on each read, and reading can block forever or consume what it shows (as /proc/kmsg does), "
            f"so the file tools do not open such files. Use bash for it, e.g. `head -c 65536 {quoted}`; "
            "commands run confined and can be stopped.",
            {"path": found.path, "kind": "pseudo", "file_system": pseudo},
            code=ErrorCode.NOT_A_FILE,
        )


def _regular(found: Walk, shown: str, *, hint: str) -> os.stat_result:
    """The stat of the located target, which must be an existing regular file on a real file system."""
    st = found.st
    if found.fd is None or st is None:
        raise _missing(found, shown, hint=hint)
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(
            f"{shown} is a directory, not a file. List it with bash (ls {shlex.quote(shown)}).",
            {"path": found.path, "kind": "directory"},
            code=ErrorCode.NOT_A_FILE,
        )
    _refuse_unreadable_kind(found, st, shown)
    return st


def _open_located(found: Walk, shown: str, action: str) -> io.BufferedReader:
    """Open the located regular file for reading: non-blocking, no symlink, the same inode."""
    try:
        fd = reopen(found, os.O_RDONLY)
    except Changed:
        raise ToolError(
            f"{shown} changed while it was being opened (it was replaced, removed or turned into a "
            f"symlink); nothing was {'read' if action == 'read' else 'changed'}. Try again.",
            {"path": found.path, "reason": "changed"},
            code=ErrorCode.CHANGED_MEANWHILE,
        ) from None
    except OSError as exc:
        raise _os_error(exc, action, shown) from exc
    return os.fdopen(fd, "rb")


def _read_all(found: Walk, shown: str, limit: int) -> bytes:
    """The whole located regular file, at most ``limit`` bytes (a larger one is refused)."""
    with _open_located(found, shown, "read") as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise _os_error(exc, "read", shown) from exc
    if len(data) > limit:
        raise ToolError(
            f"{shown} grew past {_fmt_bytes(limit)} while it was being read; nothing was changed. "
            "Edit it with bash (e.g. sed -i).",
            {"path": found.path, "limit": limit},
            code=ErrorCode.TOO_LARGE,
        )
    return data


def _binary_error(shown: str, size: int, why: str) -> ToolError:
    return ToolError(
        f"{shown} is a binary file ({_fmt_bytes(size)}; {why}); read_file shows text only. "
        f"Inspect it with bash, e.g. `file {shlex.quote(shown)}` or `xxd {shlex.quote(shown)} | head`.",
        {"path": shown, "bytes": size, "binary": True, "reason": why},
        code=ErrorCode.BINARY_FILE,
    )


_UTF16_32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def _sniff(head: bytes, shown: str, size: int) -> str:
    """Refuse binary content; return ``"utf-8-sig"`` when the head carries a UTF-8 BOM, else ``""``."""
    if head.startswith(codecs.BOM_UTF8):
        bom = "utf-8-sig"
    elif head.startswith(_UTF16_32_BOMS):
        raise ToolError(
            f"{shown} is UTF-16/UTF-32 text ({_fmt_bytes(size)}); the file tools handle UTF-8 and "
            f"Latin-1 only. Convert it with bash, e.g. `iconv -f UTF-16 -t UTF-8 {shlex.quote(shown)}`.",
            {"path": shown, "bytes": size, "encoding": "utf-16/32"},
            code=ErrorCode.BINARY_FILE,
        )
    else:
        bom = ""
    if b"\x00" in head:
        raise _binary_error(shown, size, "it contains NUL bytes")
    return bom


def _line_ending(sample: bytes) -> str:
    crlf = sample.count(b"\r\n")
    lf = sample.count(b"\n") - crlf
    if crlf and lf:
        return "mixed"
    if crlf:
        return "crlf"
    return "lf" if lf else "none"


def _looks_like_text(data: bytes) -> bool:
    """For the Latin-1 fallback: refuse data dense in C0 control bytes (other than whitespace/ESC)."""
    controls = sum(data.count(bytes([b])) for b in (*range(1, 8), *range(14, 27), *range(28, 32)))
    return controls <= max(1, len(data) // 100)


@dataclass
class _Scan:
    total_lines: int | None
    utf8_valid: bool | None  # None: not scanned (file beyond SCAN_LIMIT)


def _scan(fh: io.BufferedReader, size: int) -> _Scan:
    """Count lines and check UTF-8 validity, streaming, for files up to SCAN_LIMIT."""
    if size > SCAN_LIMIT:
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


def _cut_utf8(data: bytes, limit: int) -> bytes:
    """Cut ``data`` to at most ``limit`` bytes without splitting a UTF-8 sequence."""
    cut = data[:limit]
    back = 0
    while back < 4 and back < len(cut) and (cut[-1 - back] & 0xC0) == 0x80:
        back += 1
    if back < len(cut) and cut[-1 - back] >= 0xC0:
        width = 2 if cut[-1 - back] < 0xE0 else 3 if cut[-1 - back] < 0xF0 else 4
        if width > back + 1:
            cut = cut[: len(cut) - back - 1]
    return cut


def _strip_eol(line: str) -> str:
    if line.endswith("\r\n"):
        return line[:-2]
    if line.endswith("\n"):
        return line[:-1]
    return line


# ---------------------------------------------------------------------------- read_file


READ_DESCRIPTION = (
    "Read a text file, numbered like `cat -n`. Pages of at most "
    f"{MAX_LINES} lines or {MAX_PAGE_BYTES // 1024} KiB: `offset` is the 1-based first line, `limit` the "
    "number of lines. When more remains, the last line says the exact call to continue. Binary files "
    "are refused (use bash)."
)


def read_file(args: ReadFileArgs, ctx: ToolContext) -> ToolResult:
    """Read one page of a text file."""
    with locate_readable(ctx.policy, ctx.workspace, args.path) as found:
        return _read_page(args, ctx, found)


def _read_page(args: ReadFileArgs, ctx: ToolContext, found: Walk) -> ToolResult:
    real = Path(found.path)
    shown = _display(ctx, real)
    _regular(found, shown, hint="Check the path; list the directory with bash ls.")
    limit = min(args.limit, MAX_LINES)
    try:
        with _open_located(found, shown, "read") as fh:
            st = os.fstat(fh.fileno())
            head = fh.read(SNIFF_BYTES)
            bom = _sniff(head, shown, st.st_size)
            scan = _scan(fh, st.st_size)
            if scan.utf8_valid is None:
                try:
                    head.decode("utf-8")
                    head_utf8 = True
                except UnicodeDecodeError as exc:
                    head_utf8 = exc.start >= len(head) - 3  # only a sequence cut by the sniff size
            else:
                head_utf8 = scan.utf8_valid
            if not head_utf8 and not _looks_like_text(head):
                raise _binary_error(shown, st.st_size, "it is not UTF-8 and is full of control bytes")
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
                line = fh.readline(MAX_PAGE_BYTES - used + 1)
                if not line:
                    break
                if used + len(line) > MAX_PAGE_BYTES:
                    if raw_lines:
                        fh.seek(-len(line), os.SEEK_CUR)
                        break
                    # A single line longer than the byte cap: cut it, skip the rest of it.
                    line_no = args.offset
                    shown_part = _cut_utf8(line, MAX_PAGE_BYTES)
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
        raise _os_error(exc, "read", shown) from exc

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
    lines = _split_lf(content)
    start = args.offset
    end = start + len(lines) - 1
    next_offset = end + 1 if more else None
    truncated = more or cut_line is not None
    body = "\n".join(f"{start + i:6d}\t{_strip_eol(line)}" for i, line in enumerate(lines))
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
    structured: dict[str, Any] = {
        "path": str(real),
        "content": content,
        "start_line": start,
        "end_line": end,
        "total_lines": scan.total_lines,
        "next_offset": next_offset,
        "truncated": truncated,
        "encoding": encoding + (" (invalid bytes replaced)" if replaced else ""),
        "line_ending": _line_ending(head),
        "bytes": len(raw),
    }
    if cut_line is not None:
        structured["cut_line"] = cut_line
    return ToolResult.from_text(text, structured)


def _split_lf(text: str) -> list[str]:
    """Split on ``\\n`` only (``str.splitlines`` would also split on a lone ``\\r`` and others)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


# ---------------------------------------------------------------------------- decoding for edits


@dataclass
class _Decoded:
    text: str  # with CRLF converted to LF when crlf is True
    encoding: str  # "utf-8", "utf-8-sig" or "latin-1"
    crlf: bool


def _decode_for_edit(data: bytes, shown: str) -> _Decoded:
    bom = _sniff(data[:SNIFF_BYTES], shown, len(data))
    encoding = bom or "utf-8"
    try:
        text: str | None = data.decode(encoding)
    except UnicodeDecodeError:
        text = None
    if text is None:
        if not _looks_like_text(data[:SNIFF_BYTES]):
            raise _binary_error(shown, len(data), "it is not UTF-8 and is full of control bytes")
        text = data.decode("latin-1")
        encoding = "latin-1"
    crlf_count = text.count("\r\n")
    crlf = crlf_count > 0 and crlf_count == text.count("\n")
    if crlf:
        text = text.replace("\r\n", "\n")
    return _Decoded(text, encoding, crlf)


def _encode(text: str, encoding: str, shown: str, what: str) -> bytes:
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in bad):
            raise ToolError(
                f"{what} contains an unpaired surrogate ({bad.encode('unicode_escape').decode()}) at "
                f"character {exc.start}; send complete characters (e.g. a whole emoji). "
                f"{shown} is unchanged.",
                {"path": shown, "position": exc.start},
                code=ErrorCode.UNENCODABLE,
            ) from None
        raise ToolError(
            f"{shown} is {encoding} text and cannot hold {bad!r} (character {exc.start}). Use characters "
            f"{encoding} can encode, or convert the file to UTF-8 first (e.g. bash: "
            f"iconv -f latin1 -t utf-8). {shown} is unchanged.",
            {"path": shown, "encoding": encoding, "position": exc.start},
            code=ErrorCode.UNENCODABLE,
        ) from None


# ---------------------------------------------------------------------------- diff


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


def _diff(before: str, after: str, shown: str, *, created: bool = False, context: int = 3) -> str:
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
    lead = _split_lf(before[lead_start:start])
    trail = _split_lf(before[end_a:trail_end])
    offset = before.count("\n", 0, lead_start)
    lines = difflib.unified_diff(
        lead + _split_lf(before[start:end_a]) + trail,
        lead + _split_lf(after[start:end_b]) + trail,
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
        if size + len(piece) > DIFF_MAX_CHARS:
            out.append(f"[diff cut at {DIFF_MAX_CHARS:,} characters; read the file with read_file]\n")
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)


def _diff_for_text(diff: str) -> str:
    lines = diff.splitlines()
    if len(lines) <= DIFF_TEXT_MAX_LINES:
        return diff.rstrip("\n")
    kept = "\n".join(lines[:DIFF_TEXT_MAX_LINES])
    return (
        f"{kept}\n[diff cut after {DIFF_TEXT_MAX_LINES} of {len(lines)} lines; the whole diff is in "
        "structured_content.diff, or read the file with read_file]"
    )


# ---------------------------------------------------------------------------- atomic write


def _changed_while_writing(shown: str, real: str, what: str) -> ToolError:
    return ToolError(
        f"{shown} changed while writing: {what}. Nothing was written; read it again and retry.",
        {"path": real, "reason": "changed"},
        code=ErrorCode.CHANGED_MEANWHILE,
    )


def _atomic_write(found: Walk, data: bytes, shown: str, old: os.stat_result | None) -> None:
    """Replace the located file with ``data`` atomically, keeping ``old``'s mode and owner.

    Everything goes through the walk's descriptors: missing directories are made with
    ``mkdirat`` and opened without following links, the temp file is created with ``openat`` and
    renamed with ``renameat`` in the same directory, so nothing swapped in after the sandbox check
    can redirect a byte. ``old`` is the file that was read (None: create a new one, and fail if
    the name appears meanwhile).

    Raises:
        ToolError: The write failed; the original file (if any) is intact and no temp file is left.
    """
    dfd = found.parent_fd
    opened: list[int] = []
    try:
        for part in found.missing_dirs:
            try:
                os.mkdir(part, 0o777, dir_fd=dfd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise _os_error(exc, "create the directory for", shown) from exc
            try:
                dfd = open_at(dfd, part, os.O_PATH | os.O_DIRECTORY)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise _changed_while_writing(
                        shown, found.path, f"directory {part!r} was replaced by a symlink or a file"
                    ) from None
                raise _os_error(exc, "create the directory for", shown) from exc
            opened.append(dfd)
        _replace_in(dfd, found.name, data, shown, found.path, old)
    finally:
        for fd in opened:
            os.close(fd)


def _replace_in(dfd: int, name: str, data: bytes, shown: str, real: str, old: os.stat_result | None) -> None:
    tmp = f".{name[:48]}.{secrets.token_hex(4)}.codemode-tmp"  # within NAME_MAX for any 255-byte name
    made_tmp = False
    try:
        if old is not None:
            try:
                now: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (old.st_dev, old.st_ino):
                raise _changed_while_writing(shown, real, "it was replaced, removed or turned into a symlink")
        fd = open_at(dfd, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        made_tmp = True
        try:
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
                if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(fd, old.st_uid, old.st_gid)
                    except PermissionError:
                        pass  # not ours to give away; the mode is still kept
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            rename_into(dfd, tmp, name, replace=old is not None)
        except FileExistsError:
            raise _changed_while_writing(shown, real, "something else created it meanwhile") from None
        made_tmp = False
        try:
            sync_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
        except PermissionError:
            return  # a directory we may write but not list: the rename is done, only not synced
        try:
            os.fsync(sync_fd)
        finally:
            os.close(sync_fd)
    except OSError as exc:
        raise _os_error(exc, "write", shown) from exc
    finally:
        if made_tmp:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass


# ---------------------------------------------------------------------------- edit_file


EDIT_DESCRIPTION = (
    "Replace exact text in a file. `old_text` must occur exactly once (include enough surrounding lines "
    "to make it unique) unless `replace_all` is true. No match or several matches change nothing and "
    "report the matching line numbers or the closest near-miss. Keeps encoding, BOM, CRLF line endings "
    "(give LF; they are converted) and a missing final newline. Returns a unified diff. Files up to "
    f"{EDIT_MAX_BYTES // (1024 * 1024)} MiB."
)


def edit_file(args: EditFileArgs, ctx: ToolContext) -> ToolResult:
    """Replace exact text in a file."""
    with locate_writable(ctx.policy, ctx.workspace, args.path) as found:
        return _edit(args, ctx, found)


def _edit(args: EditFileArgs, ctx: ToolContext, found: Walk) -> ToolResult:
    real = Path(found.path)
    shown = _display(ctx, real)
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
    st = _regular(found, shown, hint="Create new files with write_file.")
    if st.st_size > EDIT_MAX_BYTES:
        raise ToolError(
            f"{shown} is {_fmt_bytes(st.st_size)}, over edit_file's {EDIT_MAX_BYTES // (1024 * 1024)} MiB "
            "limit. Edit it with bash (e.g. sed -i).",
            {"path": str(real), "bytes": st.st_size, "limit": EDIT_MAX_BYTES},
            code=ErrorCode.TOO_LARGE,
        )
    data = _read_all(found, shown, EDIT_MAX_BYTES)
    decoded = _decode_for_edit(data, shown)
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
    payload = _encode(out_text, decoded.encoding, shown, "new_text")
    _atomic_write(found, payload, shown, st)
    diff = _diff(text, updated, shown)
    summary = (
        f"Edited {shown}: {count} replacement{'s' if count != 1 else ''}, "
        f"{len(data):,} -> {len(payload):,} bytes."
    )
    return ToolResult.from_text(
        f"{summary}\n{_diff_for_text(diff)}",
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
        return ranked[:NEAR_MISS_CANDIDATES]
    if sum(len(line) for line in file_lines) > NEAR_MISS_FUZZY_CHARS:
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
    for _, i in line_scores[:NEAR_MISS_CANDIDATES]:
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
    searched = len(file_lines) <= NEAR_MISS_MAX_LINES
    for start in _candidate_starts(text, file_lines, wanted, k) if searched else []:
        matcher.set_seq1("\n".join(file_lines[start : start + k]))
        ratio = matcher.ratio()
        if best is None or ratio > best[0]:
            best = (ratio, start)
    data: dict[str, Any] = {"path": real, "match_count": 0}
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


# ---------------------------------------------------------------------------- write_file


WRITE_DESCRIPTION = (
    "Write a whole file (UTF-8, exactly `content`), creating missing parent directories. "
    "`create_only: true` fails if the file exists. Replacing an existing file larger than "
    f"{OVERWRITE_THRESHOLD // 1024} KiB needs `overwrite: true`; for small changes use edit_file. "
    "Atomic; keeps the file mode. Returns a unified diff."
)


def write_file(args: WriteFileArgs, ctx: ToolContext) -> ToolResult:
    """Write a whole file."""
    if args.path.endswith("/"):
        raise ToolError(
            f"path {args.path!r} ends with '/', so it names a directory; give the file's path.",
            {"path": args.path},
            code=ErrorCode.NOT_A_FILE,
        )
    with locate_writable(ctx.policy, ctx.workspace, args.path) as found:
        return _write(args, ctx, found)


def _write(args: WriteFileArgs, ctx: ToolContext, found: Walk) -> ToolResult:
    real = Path(found.path)
    shown = _display(ctx, real)
    payload = _encode(args.content, "utf-8", shown, "content")
    st = found.st
    before = ""
    old_bytes = 0
    binary_before = False
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(
                f"{shown} is a directory; give a file path.",
                {"path": str(real), "kind": "directory"},
                code=ErrorCode.NOT_A_FILE,
            )
        _refuse_unreadable_kind(found, st, shown)
        old_bytes = st.st_size
        if args.create_only:
            raise ToolError(
                f"{shown} already exists ({_fmt_bytes(st.st_size)}) and create_only is set; nothing was "
                "written. Use edit_file to change it, or drop create_only to replace it.",
                {"path": str(real), "exists": True, "bytes": st.st_size},
                code=ErrorCode.ALREADY_EXISTS,
            )
        if st.st_size > OVERWRITE_THRESHOLD and not args.overwrite:
            raise ToolError(
                f"{shown} exists and is {_fmt_bytes(st.st_size)}, over {OVERWRITE_THRESHOLD // 1024} KiB; "
                "replacing it needs overwrite: true. For small changes use edit_file instead.",
                {"path": str(real), "exists": True, "bytes": st.st_size, "threshold": OVERWRITE_THRESHOLD},
                code=ErrorCode.OVERWRITE_REQUIRED,
            )
        if st.st_size <= EDIT_MAX_BYTES:
            old_data = _read_all(found, shown, EDIT_MAX_BYTES)
            binary_before = b"\x00" in old_data[:SNIFF_BYTES]
            before = old_data.decode("utf-8", errors="replace")
    _atomic_write(found, payload, shown, st)
    created = st is None
    lines = args.content.count("\n") + (1 if args.content and not args.content.endswith("\n") else 0)
    if binary_before:
        diff = f"[binary file {shown} replaced by text]\n"
    elif st is not None and st.st_size > EDIT_MAX_BYTES:
        diff = f"[previous content ({_fmt_bytes(st.st_size)}) too large to diff]\n"
    else:
        diff = _diff(before, args.content, shown, created=created)
    if created:
        summary = f"Created {shown}: {len(payload):,} bytes, {lines} lines."
    elif before == args.content:
        summary = f"Wrote {shown}: content unchanged ({len(payload):,} bytes)."
    else:
        summary = f"Replaced {shown}: {old_bytes:,} -> {len(payload):,} bytes, {lines} lines."
    text = f"{summary}\n{_diff_for_text(diff)}" if diff else summary
    return ToolResult.from_text(
        text, {"path": str(real), "created": created, "bytes": len(payload), "lines": lines, "diff": diff}
    )


# ---------------------------------------------------------------------------- registration


def file_tools() -> list[Tool]:
    """The three file tools: read_file, edit_file, write_file."""
    return [
        make_tool(
            read_file,
            name="read_file",
            title="Read file",
            description=READ_DESCRIPTION,
            input_model=ReadFileArgs,
            result_model=ReadFileResult,
            read_only=True,
        ),
        make_tool(
            edit_file,
            name="edit_file",
            title="Edit file",
            description=EDIT_DESCRIPTION,
            input_model=EditFileArgs,
            result_model=EditFileResult,
            destructive=True,
        ),
        make_tool(
            write_file,
            name="write_file",
            title="Write file",
            description=WRITE_DESCRIPTION,
            input_model=WriteFileArgs,
            result_model=WriteFileResult,
            destructive=True,
        ),
    ]
