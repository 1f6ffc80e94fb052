"""Turn raw command output into what a terminal shows.

Commands write colour codes, cursor movement, hyperlinks, progress bars redrawn with carriage
returns, spinners redrawn with backspaces and multi-line displays redrawn with cursor-up. A
model reading the output wants the screen, not the keystrokes. :func:`clean_terminal_text`
picks one of two paths per piece of output, by a cheap bytes scan:

* **Line level** (the fast path, for plain output, colour and progress within a line): escape
  sequences and control characters are removed with bytes regexes, and only the lines holding
  carriage returns, backspaces or in-line cursor moves (``ESC[nK``/``G``/``C``/``D``) are
  replayed: by overlaying their frames when each fits the width (the usual progress bar and
  spinner), else on a :class:`Screen` of the terminal's width.
* **Screen** (output that moves the cursor across lines: IND, RI, NEL, VT, FF, cursor
  up/down/position, erase in display, scroll regions, insert/delete lines and characters,
  saved cursors, the alternate screen, DEC line drawing): the whole text is played on a virtual
  screen of the terminal's size with scrollback. The screen is a view: lines scrolled off the
  top stay in the result, in order, so nothing printed is lost unless the program erased it.

Either way, the result is one logical line per line the program wrote: a line the terminal
wrapped at its width is joined again (as a terminal's copy does), and trailing blanks of
rendered rows are dropped. Tabs in lines that are rendered move to the next multiple of 8 (or a
tab stop the program set) and show as spaces; plain lines keep their tab characters (what
``cat`` of a Makefile shows is what an edit must match).

The screen is `codemode.tools._screen`'s own (why not pyte: see there).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from codemode.tools._screen import Screen, all_narrow

__all__ = ["TerminalView", "clean_terminal_text", "strip_ansi", "terminal_view"]


@dataclass(frozen=True)
class TerminalView:
    """The terminal that output is rendered for.

    Attributes:
        columns: Width in cells (where text wraps and cursor moves stop).
        lines: Height in rows (where output starts scrolling).
        newline_returns: Whether a line feed also returns to column 0. True for output read
            from a pipe (on a terminal, the tty would have turned each ``\\n`` into ``\\r\\n``);
            False for output read from a PTY, where the tty already did, so a bare ``\\n``
            there moves down only, as on the terminal.
    """

    columns: int = 80
    lines: int = 24
    newline_returns: bool = True


# Bounds for sizes taken from the environment: enough for any real terminal, small enough that
# a screen stays cheap whatever a variable says.
_MAX_COLUMNS = 4096
_MAX_LINES = 1000


def _size(value: str | None, default: int, most: int) -> int:
    if value is None or not value.strip().isdigit():
        return default
    n = int(value.strip()[:6])
    return min(n, most) if n >= 2 else default


def terminal_view(environ: Mapping[str, str]) -> TerminalView:
    """The terminal output written to a pipe is rendered for: ``COLUMNS`` x ``LINES`` or 80 x 24.

    Args:
        environ: The command's environment.

    Returns:
        The view; values that are missing, not numbers or smaller than 2 give the defaults.
    """
    return TerminalView(
        columns=_size(environ.get("COLUMNS"), 80, _MAX_COLUMNS),
        lines=_size(environ.get("LINES"), 24, _MAX_LINES),
    )


_DEFAULT_VIEW = TerminalView()

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
_B_SGR_RE = re.compile(rb"\x1b\[[0-9;:]*+m")
# CSI except the in-line cursor/erase sequences the line replay honours (ESC[nK/G/C/D).
_B_CSI_DROP_RE = re.compile(rb"\x1b\[(?![0-9]*[KGCD])[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?")
_B_OTHER_ESC_RE = re.compile(_OTHER_ESC_RE.pattern.encode())
# C0 controls except \b \t \n \r and ESC (ESC only survives as a kept CSI), plus DEL.
_B_CONTROLS = bytes(b for b in range(32) if b not in (0x08, 0x09, 0x0A, 0x0D, 0x1B)) + b"\x7f"
_C1_RE = re.compile(r"[\x80-\x9f]+")

# What only the screen path renders right: vertical motion (VT, FF, IND, NEL, RI, DECSC/DECRC,
# RIS, cursor up/down/next/previous line, CUP/HVP, VPA/VPR, ED, scroll regions, IL/DL, SU/SD,
# SCOSC/SCORC), in-line edits the line replay does not know (ICH, DCH, ECH, REP, HPA/HPR,
# CHT/CBT, tab stops), DEC line drawing, DECALN, selective erase, and the modes that change
# where text goes (insert, newline, origin, autowrap, alternate screen).
_B_SCREEN_RE = re.compile(
    rb"[\x0b\x0c]"
    rb"|\x1b(?:[78DEMcH]|#8|[()]0"
    rb"|\[(?:[0-9;:]*+[\x20-\x2f]*+[ABEFHIJLMPSTXZ@`abdefgrsuhl]"
    rb"|\?(?:[0-9]*;)*(?:6|7|47|104[789])(?:;[0-9]*)*[hl]"
    rb"|\?[0-9;]*+[JK]))"
)


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


def _render_screen(data: bytes, view: TerminalView) -> str:
    """Play ``data`` (escape strings removed) on a fresh screen and return what it shows."""
    screen = Screen(view)
    screen.feed(data.decode("utf-8", errors="replace"))
    return screen.render()


_ERASE_PREFIXES = ("\x1b[K", "\x1b[0K", "\x1b[2K")


def _frame_cells(frame: str, columns: int) -> str | None:
    """The cells one frame writes from column 0, backspaces replayed; None if it would wrap."""
    if "\x08" not in frame:
        return frame if len(frame) <= columns else None
    pieces = frame.split("\x08")
    shown = pieces[0]
    if len(shown) > columns:
        return None
    cursor = len(shown)
    for piece in pieces[1:]:
        # Back one cell; from past the right margin (the wrap pending), to the cell before the last.
        cursor = max(0, min(cursor, columns - 1) - 1)
        if piece:
            end = cursor + len(piece)
            if end > columns:
                return None
            shown = shown[:cursor] + piece + shown[end:]
            cursor = end
    return shown


def _overlay_frames(line: str, columns: int) -> str | None:
    """The common progress line, replayed without a screen: frames separated by carriage
    returns, each plain text (backspaces allowed) that stays within the terminal's width,
    optionally opening with an erase of the line. Later frames overwrite earlier ones from
    column 0. None for anything else (the caller plays it on a screen)."""
    if "\t" in line or not (line.isascii() or all_narrow(line)):
        return None
    if "\x1b[" in line:  # going to column 1 is a carriage return
        line = line.replace("\x1b[G", "\r").replace("\x1b[1G", "\r").replace("\x1b[0G", "\r")
    shown = ""
    for frame in reversed(line.split("\r")):
        erased = frame.startswith(_ERASE_PREFIXES)
        if erased:
            frame = frame[frame.index("K") + 1 :]
        if "\x1b" in frame:
            return None
        cells = _frame_cells(frame, columns)
        if cells is None:
            return None
        if len(cells) > len(shown):
            shown += cells[len(shown) :]
        if erased:
            break
    return shown.rstrip(" ")


def _replay_line(line: str, view: TerminalView) -> str:
    """Replay carriage returns, backspaces, tabs and in-line cursor/erase sequences on one line."""
    shown = _overlay_frames(line, view.columns)
    if shown is not None:
        return shown
    screen = Screen(TerminalView(view.columns, _MAX_LINES, True))
    screen.feed(line)
    return screen.render()


def clean_terminal_text(data: bytes, view: TerminalView = _DEFAULT_VIEW) -> str:
    """Return what a terminal shows for ``data``.

    Decodes UTF-8 (invalid bytes become U+FFFD, never an error), removes escape sequences and
    control characters other than newline and tab, and plays what they do: text after a
    carriage return overwrites the line from column 0 (``"abcdef\\rXY"`` shows ``"XYcdef"``),
    ``"\\r\\n"`` is a plain line end, and output that moves the cursor across lines is played
    on a virtual screen of ``view``'s size, whose scrollback is kept (see the module doc).

    Args:
        data: Raw bytes as a command wrote them.
        view: The terminal's size, and whether the bytes came through a pipe or a PTY.

    Returns:
        The cleaned text.
    """
    escapes = b"\x1b" in data
    if escapes:
        if any(start in data for start in _B_STRING_STARTS):
            data = _B_STRING_RE.sub(b"", data)
        # Colour first: it is most of the escapes, and what is left is quick to scan.
        data = _B_SGR_RE.sub(b"", data)
        escapes = b"\x1b" in data
        if escapes and _B_SCREEN_RE.search(data):
            return _render_screen(data, view)
    stripped = data.translate(None, _B_CONTROLS)
    if len(stripped) != len(data) and (b"\x0b" in data or b"\x0c" in data):
        return _render_screen(data, view)  # VT and FF move down a line, keeping the column
    # From a PTY, a bare line feed moves down without returning (the program turned the tty's
    # translation off): only the screen shows that.
    if not view.newline_returns and data.count(b"\n") != data.count(b"\r\n"):
        return _render_screen(data, view)
    data = stripped
    if escapes:
        data = _B_CSI_DROP_RE.sub(b"", data)
        data = _B_OTHER_ESC_RE.sub(b"", data)
        escapes = b"\x1b" in data  # the in-line moves kept for the replay
    if b"\r\n" in data:
        data = data.replace(b"\r\n", b"\n")
    text = data.decode("utf-8", errors="replace")
    if b"\xc2" in data:  # the UTF-8 lead byte of U+0080-U+00BF
        text = _C1_RE.sub("", text)
    if not escapes and b"\r" not in data and b"\x08" not in data:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\r" in line or "\x08" in line or "\x1b" in line:
            lines[i] = _replay_line(line, view)
    return "\n".join(lines)
