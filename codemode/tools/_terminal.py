"""Turn raw command output into what a terminal would finally show.

Commands write colour codes, cursor movement, hyperlinks, progress bars redrawn with carriage
returns and spinners redrawn with backspaces. A model reading the output wants the final screen,
not the keystrokes, so :func:`clean_terminal_text` removes the control sequences and replays the
in-line redraws. It is a line-level emulation: carriage return, backspace, ``ESC[K`` (erase in
line) and the horizontal cursor moves ``ESC[nG``, ``ESC[nC``, ``ESC[nD`` are honoured; vertical
cursor moves (multi-line progress displays) are dropped, so every frame of those stays visible.
"""

from __future__ import annotations

import re

__all__ = ["clean_terminal_text", "strip_ansi"]

# Strings introduced by OSC, DCS, SOS, PM or APC (7-bit ESC form or 8-bit C1 form) run until
# BEL or ST. An unterminated one (a cut excerpt, a stray ESC ]) stops at the end of its line
# rather than swallowing the rest of the output.
_STRING_RE = re.compile(r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?")
# CSI: parameters 0x30-0x3F, intermediates 0x20-0x2F, final 0x40-0x7E. The final byte is optional
# so that a sequence cut at the end of an excerpt is removed too.
_CSI_RE = re.compile(r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?")
# nF escapes (charset selects such as ESC ( B), two-character escapes (ESC 7, ESC =, ESC M), a lone
# ESC. ESC [ is left alone (removed by _CSI_RE before, or kept by the byte-level variant below).
_OTHER_ESC_RE = re.compile(r"\x1b(?:[\x20-\x2f]+[\x30-\x7e]?|(?!\[)[\x30-\x7e]|(?!\[))")

# clean_terminal_text works on bytes first: the escape syntax is ASCII, and bytes regexes with a
# literal prefix plus bytes.translate are several times faster than the str equivalents. The
# 8-bit C1 forms are not interpreted there (0x80-0x9F are UTF-8 continuation bytes); the C1
# characters U+0080-U+009F are removed after decoding.
_B_STRING_RE = re.compile(rb"\x1b[\]PX^_][^\x07\x1b\n]*(?:\x07|\x1b\\)?")
_B_STRING_STARTS = (b"\x1b]", b"\x1bP", b"\x1bX", b"\x1b^", b"\x1b_")
# CSI except the in-line cursor/erase sequences the line replay honours (ESC[nK/G/C/D).
_B_CSI_DROP_RE = re.compile(rb"\x1b\[(?![0-9]*[KGCD])[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?")
_B_OTHER_ESC_RE = re.compile(_OTHER_ESC_RE.pattern.encode())
# C0 controls except \b \t \n \r and ESC (ESC only survives as a kept CSI), plus DEL.
_B_CONTROLS = bytes(b for b in range(32) if b not in (0x08, 0x09, 0x0A, 0x0D, 0x1B)) + b"\x7f"
_C1_RE = re.compile(r"[\x80-\x9f]+")
# Tokens that move the cursor or erase within a line.
_REDRAW_SPLIT_RE = re.compile(r"(\r|\x08|\x1b\[[0-9]*[KGCD])")


def strip_ansi(text: str) -> str:
    """Remove ANSI/VT escape sequences (CSI, OSC, DCS, SOS, PM, APC, two-character escapes).

    Control characters and redraws are left alone; use :func:`clean_terminal_text` for the
    full treatment.

    Args:
        text: Text that may contain escape sequences.

    Returns:
        The text without escape sequences.
    """
    if "\x1b" not in text and not any(c in text for c in "\x90\x98\x9b\x9d\x9e\x9f"):
        return text
    text = _STRING_RE.sub("", text)
    text = _CSI_RE.sub("", text)
    return _OTHER_ESC_RE.sub("", text)


def _replay_line(line: str) -> str:
    """Replay carriage returns, backspaces and in-line cursor/erase sequences on one line."""
    cells: list[str] = []
    col = 0
    for token in _REDRAW_SPLIT_RE.split(line):
        if not token:
            continue
        if token == "\r":
            col = 0
        elif token == "\x08":
            col = max(0, col - 1)
        elif token[0] == "\x1b":
            final = token[-1]
            arg = token[2:-1]
            n = int(arg) if arg else None
            if final == "K":
                if n in (None, 0):
                    del cells[col:]
                elif n == 1:
                    cells[: col + 1] = [" "] * min(col + 1, len(cells))
                else:
                    cells = [" "] * len(cells)
            elif final == "G":
                col = max(0, (n or 1) - 1)
            elif final == "C":
                col += n or 1
            else:  # "D"
                col = max(0, col - (n or 1))
        else:
            if col > len(cells):
                cells.extend(" " * (col - len(cells)))
            cells[col : col + len(token)] = token
            col += len(token)
    return "".join(cells).rstrip(" ")


def clean_terminal_text(data: bytes) -> str:
    """Return what a terminal would finally show for ``data``.

    Decodes UTF-8 (invalid bytes become U+FFFD, never an error), drops NUL bytes, removes
    escape sequences and control characters other than newline and tab, and collapses
    carriage-return and backspace redraws to the final frame of each line: text after a
    carriage return overwrites the line from column 0 (``"abcdef\\rXY"`` shows ``"XYcdef"``),
    ``"\\r\\n"`` is a plain line end.

    Args:
        data: Raw bytes as a command wrote them.

    Returns:
        The cleaned text.
    """
    if b"\x1b" in data:
        if any(start in data for start in _B_STRING_STARTS):
            data = _B_STRING_RE.sub(b"", data)
        data = _B_CSI_DROP_RE.sub(b"", data)
        data = _B_OTHER_ESC_RE.sub(b"", data)
    data = data.translate(None, _B_CONTROLS)
    if b"\r\n" in data:
        data = data.replace(b"\r\n", b"\n")
    text = data.decode("utf-8", errors="replace")
    if b"\xc2" in data:  # the UTF-8 lead byte of U+0080-U+00BF
        text = _C1_RE.sub("", text)
    if b"\r" not in data and b"\x08" not in data and b"\x1b" not in data:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\r" in line or "\x08" in line or "\x1b" in line:
            lines[i] = _replay_line(line)
    return "\n".join(lines)
