"""Bytes to text and back: binary and encoding sniffing, line endings, UTF-8 cutting, decoding for edits."""

from __future__ import annotations

import codecs
import shlex
from dataclasses import dataclass

from codemode.errors import ErrorCode, ToolError
from codemode.tools.files import _limits as limits
from codemode.tools.files._messages import fmt_bytes


def binary_error(shown: str, size: int, why: str) -> ToolError:
    return ToolError(
        f"{shown} is a binary file ({fmt_bytes(size)}; {why}); read_file shows text only. "
        f"Inspect it with bash, e.g. `file {shlex.quote(shown)}` or `xxd {shlex.quote(shown)} | head`.",
        {"path": shown, "bytes": size, "binary": True, "reason": why},
        code=ErrorCode.BINARY_FILE,
    )


_UTF16_32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def sniff(head: bytes, shown: str, size: int) -> str:
    """Refuse binary content; return ``"utf-8-sig"`` when the head carries a UTF-8 BOM, else ``""``."""
    if head.startswith(codecs.BOM_UTF8):
        bom = "utf-8-sig"
    elif head.startswith(_UTF16_32_BOMS):
        raise ToolError(
            f"{shown} is UTF-16/UTF-32 text ({fmt_bytes(size)}); the file tools handle UTF-8 and "
            f"Latin-1 only. Convert it with bash, e.g. `iconv -f UTF-16 -t UTF-8 {shlex.quote(shown)}`.",
            {"path": shown, "bytes": size, "encoding": "utf-16/32"},
            code=ErrorCode.BINARY_FILE,
        )
    else:
        bom = ""
    if b"\x00" in head:
        raise binary_error(shown, size, "it contains NUL bytes")
    return bom


def line_ending(sample: bytes) -> str:
    crlf = sample.count(b"\r\n")
    lf = sample.count(b"\n") - crlf
    if crlf and lf:
        return "mixed"
    if crlf:
        return "crlf"
    return "lf" if lf else "none"


def looks_like_text(data: bytes) -> bool:
    """For the Latin-1 fallback: refuse data dense in C0 control bytes (other than whitespace/ESC)."""
    controls = sum(data.count(bytes([b])) for b in (*range(1, 8), *range(14, 27), *range(28, 32)))
    return controls <= max(1, len(data) // 100)


def cut_utf8(data: bytes, limit: int) -> bytes:
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


def strip_eol(line: str) -> str:
    if line.endswith("\r\n"):
        return line[:-2]
    if line.endswith("\n"):
        return line[:-1]
    return line


def split_lf(text: str) -> list[str]:
    """Split on ``\\n`` only (``str.splitlines`` would also split on a lone ``\\r`` and others)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


@dataclass
class Decoded:
    text: str  # with CRLF converted to LF when crlf is True
    encoding: str  # "utf-8", "utf-8-sig" or "latin-1"
    crlf: bool


def decode_for_edit(data: bytes, shown: str) -> Decoded:
    bom = sniff(data[: limits.SNIFF_BYTES], shown, len(data))
    encoding = bom or "utf-8"
    try:
        text: str | None = data.decode(encoding)
    except UnicodeDecodeError:
        text = None
    if text is None:
        if not looks_like_text(data[: limits.SNIFF_BYTES]):
            raise binary_error(shown, len(data), "it is not UTF-8 and is full of control bytes")
        text = data.decode("latin-1")
        encoding = "latin-1"
    crlf_count = text.count("\r\n")
    crlf = crlf_count > 0 and crlf_count == text.count("\n")
    if crlf:
        text = text.replace("\r\n", "\n")
    return Decoded(text, encoding, crlf)


def encode(text: str, encoding: str, shown: str, what: str) -> bytes:
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
