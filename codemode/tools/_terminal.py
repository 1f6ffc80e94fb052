"""Turn raw command output into what a terminal shows.

Commands write colour codes, cursor movement, hyperlinks, progress bars redrawn with carriage
returns, spinners redrawn with backspaces and multi-line displays redrawn with cursor-up. A
model reading the output wants the screen, not the keystrokes. :func:`clean_terminal_text`
picks one of two paths per piece of output, by a cheap bytes scan:

* **Line level** (the fast path, for plain output, colour and progress within a line): escape
  sequences and control characters are removed with bytes regexes, and only the lines holding
  carriage returns, backspaces or in-line cursor moves (``ESC[nK``/``G``/``C``/``D``) are
  replayed: by overlaying their frames when each fits the width (the usual progress bar and
  spinner), else on a :class:`_Screen` of the terminal's width.
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

The screen is this module's own rather than pyte's: pyte 0.8.2 shaped 0.1-0.3 MB/s on the same
output (``bench/bench_terminal.py`` times it when installed), about a hundred times slower, and
keeps no mark of wrapped rows to join them again.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

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

# The screen's tokens: CSI (params, intermediates, final), other escapes (intermediates,
# final), and single control characters (C0 but ESC, DEL, C1). Everything between is text.
_TOKEN_RE = re.compile(
    r"(\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?|\x1b[\x20-\x2f]*[\x30-\x7e]?|[\x00-\x1a\x1c-\x1f\x7f-\x9f])"
)
# A count or position that large is as good as infinite; parsing more digits costs for nothing.
_HUGE = 999_999

# DEC Special Graphics (ESC ( 0): the line-drawing set that curses programs select.
_DEC_GRAPHICS = str.maketrans(
    {
        "`": "◆",
        "a": "▒",
        "b": "␉",
        "c": "␌",
        "d": "␍",
        "e": "␊",
        "f": "°",
        "g": "±",
        "h": "␤",
        "i": "␋",
        "j": "┘",
        "k": "┐",
        "l": "┌",
        "m": "└",
        "n": "┼",
        "o": "⎺",
        "p": "⎻",
        "q": "─",
        "r": "⎼",
        "s": "⎽",
        "t": "├",
        "u": "┤",
        "v": "┴",
        "w": "┬",
        "x": "│",
        "y": "≤",
        "z": "≥",
        "{": "π",
        "|": "≠",
        "}": "£",
        "~": "·",
    }
)


@lru_cache(maxsize=8192)
def _cell_width(ch: str) -> int:
    """Cells a character takes: 0 for combining and format characters, 2 for wide, else 1."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


_NOT_NARROW: list[re.Pattern[str]] = []


def _all_narrow(run: str) -> bool:
    """Whether every character of ``run`` takes exactly one cell (so it can be written in bulk).

    Decided by a character class built once, on first use, from :func:`_cell_width` over
    U+00A0-U+2FFF (Latin, Greek, Cyrillic, punctuation, box drawing, blocks...); anything
    above that range counts as not narrow and is written one character at a time.
    """
    if not _NOT_NARROW:
        narrow = [c for c in range(0xA0, 0x3000) if _cell_width(chr(c)) == 1]
        spans: list[str] = []
        start = prev = narrow[0]
        for c in [*narrow[1:], -1]:
            if c != prev + 1:
                spans.append(f"{re.escape(chr(start))}-{re.escape(chr(prev))}")
                start = c
            prev = c
        _NOT_NARROW.append(re.compile(f"[^\\x20-\\x7e{''.join(spans)}]"))
    return _NOT_NARROW[0].search(run) is None


@lru_cache(maxsize=2048)
def _parse_csi(token: str) -> tuple[str, str, str, tuple[int, ...]] | None:
    """A CSI token as (private marker, intermediates, final, parameters); None when cut short.

    An empty parameter is 0 (each sequence reads 0 as its default).
    """
    final = token[-1]
    if not "@" <= final <= "~":
        return None
    body = token[2:-1]
    private = ""
    if body and body[0] in "<=>?":
        private, body = body[0], body[1:]
    end = len(body)
    while end and body[end - 1] < "0":
        end -= 1
    intermediates, body = body[end:], body[:end]
    params = tuple((int(p) if len(p) < 7 else _HUGE) if p.isdigit() else 0 for p in body.split(";"))
    return private, intermediates, final, params


# What DECSC saves: column, row, pending wrap, origin mode, G0/G1 charsets, the shift.
_Cursor = tuple[int, int, bool, bool, list[str], int]


class _Screen:
    """A VT100/xterm screen of ``columns`` x ``lines`` cells with scrollback.

    Rows are lists of cells (one string each: a character with any combining marks, or ``""``
    for the right half of a wide character), only as long as written; rows appear as the
    cursor reaches them. ``wrapped[i]`` says row ``i`` continues on the next row (the text
    reached the right margin), so the render joins them into one logical line again.
    """

    def __init__(self, view: TerminalView) -> None:
        self.columns = max(2, view.columns)
        self.lines = max(1, view.lines)
        self.newline_returns = view.newline_returns
        self.history: list[str] = []
        self._blank()

    def _blank(self) -> None:
        """A blank screen, the cursor home, every mode at its default (history untouched)."""
        self.rows: list[list[str]] = [[]]
        self.wrapped: list[bool] = [False]
        # The buffer not shown (the alternate screen while on the main one, and back).
        self.other: tuple[list[list[str]], list[bool]] = ([[]], [False])
        self.in_alt = False
        self.x = 0
        self.y = 0
        self.pending = False  # the cursor is past the right margin: the next character wraps
        self.top = 0
        self.bottom = self.lines - 1
        self.autowrap = True
        self.origin = False
        self.insert = False
        self.charsets = ["B", "B"]  # G0, G1: "B" ASCII, "0" DEC line drawing
        self.shift = 0  # 0: G0 shown, 1: G1 shown (SO/SI)
        self.tabstops: set[int] | None = None  # None: every 8 columns
        self.saved: _Cursor | None = None
        self.saved_main: _Cursor | None = None
        self.last = ""  # the character REP repeats

    # ----------------------------------------------------------------- feeding

    def feed(self, text: str) -> None:
        """Play ``text`` (escape strings such as OSC already removed)."""
        parts = _TOKEN_RE.split(text)
        draw, control, index = self.draw, self.control, self.index
        # parts alternate: text, token, text, ..., text.
        for i in range(1, len(parts), 2):
            chunk = parts[i - 1]
            if chunk:
                draw(chunk)
            else:
                self.last = ""  # REP repeats a character only right after it (as tmux does)
            token = parts[i]
            if token == "\n":
                if self.newline_returns:
                    self.x = 0
                index()
            elif len(token) == 1:
                control(token)
            elif token[1] == "[":
                if token[-1] != "m":  # SGR (colour) shows nothing
                    parsed = _parse_csi(token)
                    if parsed is not None:
                        self.csi(*parsed)
            elif len(token) > 1:
                self.esc(token[1:-1], token[-1])
        if parts[-1]:
            draw(parts[-1])

    def control(self, ch: str) -> None:
        if ch == "\n":
            if self.newline_returns:
                self.x = 0
            self.index()
        elif ch == "\r":
            self.x = 0
            self.pending = False
        elif ch == "\x08":
            if self.x > 0:
                self.x -= 1
            self.pending = False
        elif ch == "\t":
            self.tab(1)
        elif ch in ("\x0b", "\x0c"):
            self.index()
        elif ch == "\x0e":
            self.shift = 1
        elif ch == "\x0f":
            self.shift = 0
        # NUL, BEL, DEL, C1 and the rest show nothing.

    def draw(self, run: str) -> None:
        """Write printable text at the cursor."""
        if self.charsets[self.shift] == "0":
            run = run.translate(_DEC_GRAPHICS)
        self.last = run[-1]
        if self.insert or not (run.isascii() or _all_narrow(run)):
            for ch in run:
                self._draw_char(ch)
            return
        # Every character takes one cell: write the run in slices, one per row it reaches.
        cols = self.columns
        while run:
            if self.pending:
                self._wrap()
            x = self.x
            room = cols - x
            if not self.autowrap and len(run) > room:
                # Past the right margin every character lands on the last column.
                run = run[: room - 1] + run[-1]
            if len(run) > room:
                part, run = run[:room], run[room:]
            else:
                part, run = run, ""
            end = x + len(part)
            row = self.rows[self.y]
            size = len(row)
            if size < x:
                row.extend(" " * (x - size))
            elif x < size and row[x] == "":
                row[x - 1] = " "  # overwriting the right half of a wide character
            if end < size and row[end] == "":
                row[end] = " "  # ... or the left half of one
            row[x:end] = part
            if end >= cols:
                self.x = cols - 1
                self.pending = self.autowrap
            else:
                self.x = end

    def _wrap(self) -> None:
        self.pending = False
        if self.autowrap:
            self.wrapped[self.y] = True
            self.x = 0
            self.index()

    def _draw_char(self, ch: str) -> None:
        width = _cell_width(ch)
        row = self.rows[self.y]
        if width == 0:
            # Combining marks join the character before the cursor.
            at = self.x if self.pending else self.x - 1
            if 0 <= at < len(row):
                if row[at] == "" and at > 0:
                    at -= 1
                row[at] += ch
            return
        cols = self.columns
        if self.pending:
            self._wrap()
            row = self.rows[self.y]
        if width == 2 and self.x == cols - 1:
            if not self.autowrap:
                return
            self.wrapped[self.y] = True  # a wide character does not fit: it goes to the next row
            self.x = 0
            self.index()
            row = self.rows[self.y]
        x = self.x
        if len(row) < x:
            row.extend(" " * (x - len(row)))
        if x < len(row) and row[x] == "":
            row[x - 1] = " "
        cells = [ch] if width == 1 else [ch, ""]
        if self.insert:
            row[x:x] = cells
            del row[cols:]
        else:
            end = x + width
            if end < len(row) and row[end] == "":
                row[end] = " "
            row[x:end] = cells
        if x + width >= cols:
            self.x = cols - 1
            self.pending = self.autowrap
        else:
            self.x = x + width

    # ----------------------------------------------------------------- motion

    def _fill(self, y: int) -> None:
        """Make rows exist down to ``y``."""
        while len(self.rows) <= y:
            self.rows.append([])
            self.wrapped.append(False)

    def _goto(self, x: int, y: int) -> None:
        self.x = 0 if x < 0 else x if x < self.columns else self.columns - 1
        self.y = y = 0 if y < 0 else y if y < self.lines else self.lines - 1
        self.pending = False
        if y >= len(self.rows):
            self._fill(y)

    def index(self) -> None:
        """Move down one row, scrolling the region at its bottom margin."""
        self.pending = False
        if self.y == self.bottom:
            if self.top == 0 and not self.in_alt and self.bottom == len(self.rows) - 1:
                # The common case, inlined: the whole screen scrolls one row into history.
                row = self.rows.pop(0)
                self.history.append("".join(row) if self.wrapped.pop(0) else "".join(row).rstrip(" ") + "\n")
                self.rows.insert(self.bottom, [])
                self.wrapped.insert(self.bottom, False)
            else:
                self.scroll_up(1)
        elif self.y < self.lines - 1:
            self.y += 1
            if self.y == len(self.rows):
                self.rows.append([])
                self.wrapped.append(False)

    def reverse_index(self) -> None:
        self.pending = False
        if self.y == self.top:
            self.scroll_down(1)
        elif self.y > 0:
            self.y -= 1

    def _shift(self, start: int, end: int, n: int, up: bool) -> list[tuple[list[str], bool]]:
        """Move rows ``start..end`` up (or down) ``n`` rows, blank rows coming in at the other
        end; return the rows pushed out (with their wrap flags), top first."""
        self._fill(end)
        n = min(n, end - start + 1)
        rows, wrapped = self.rows, self.wrapped
        cut = start if up else end + 1 - n
        gone = list(zip(rows[cut : cut + n], wrapped[cut : cut + n], strict=True))
        del rows[cut : cut + n]
        del wrapped[cut : cut + n]
        at = end + 1 - n if up else start
        rows[at:at] = [[] for _ in range(n)]
        wrapped[at:at] = [False] * n
        return gone

    def scroll_up(self, n: int) -> None:
        """Scroll the region up ``n`` rows; rows leaving the top of the screen go to history."""
        gone = self._shift(self.top, self.bottom, n, up=True)
        if self.top == 0 and not self.in_alt:
            self.history.extend(
                "".join(row) if wrap else "".join(row).rstrip(" ") + "\n" for row, wrap in gone
            )

    def scroll_down(self, n: int) -> None:
        self._shift(self.top, self.bottom, n, up=False)
        self.wrapped[self.bottom] = False

    def tab(self, n: int) -> None:
        x = self.x
        for _ in range(min(n, self.columns)):
            if self.tabstops is None:
                x = (x // 8 + 1) * 8
            else:
                x = min((s for s in self.tabstops if s > x), default=self.columns - 1)
            if x >= self.columns - 1:
                x = self.columns - 1
                break
        self.x = x
        self.pending = False

    def back_tab(self, n: int) -> None:
        x = self.x
        for _ in range(min(n, self.columns)):
            if self.tabstops is None:
                x = (x - 1) // 8 * 8 if x > 0 else 0
            else:
                x = max((s for s in self.tabstops if s < x), default=0)
        self.x = max(x, 0)
        self.pending = False

    # ----------------------------------------------------------------- erasing and editing

    def _erase_cells(self, row: list[str], start: int, end: int) -> None:
        """Blank cells ``start:end`` of ``row`` (a row shorter than ``end`` is blanked to its end)."""
        end = min(end, len(row))
        if start >= end:
            return
        if row[start] == "" and start > 0:
            row[start - 1] = " "
        if end < len(row) and row[end] == "":
            row[end] = " "
        if end == len(row):
            del row[start:]
        else:
            row[start:end] = " " * (end - start)

    def erase_line(self, mode: int) -> None:
        row = self.rows[self.y]
        if mode == 0:
            x = self.x
            if x < len(row):
                if x and row[x] == "":
                    row[x - 1] = " "
                del row[x:]
            self.wrapped[self.y] = False
        elif mode == 1:
            self._erase_cells(row, 0, self.x + 1)
        elif mode == 2:
            row.clear()
            self.wrapped[self.y] = False
        if not row and self.y:
            self.wrapped[self.y - 1] = False  # the row a wrapped line went on to is gone

    def erase_display(self, mode: int) -> None:
        if mode == 0:
            self.erase_line(0)
            for i in range(self.y + 1, len(self.rows)):
                self.rows[i] = []
                self.wrapped[i] = False
        elif mode == 1:
            self.erase_line(1)
            for i in range(self.y):
                self.rows[i] = []
                self.wrapped[i] = False
        elif mode == 2:
            self.rows = [[] for _ in self.rows]
            self.wrapped = [False] * len(self.rows)
        elif mode == 3:
            self.history.clear()  # xterm: erase the saved lines

    def insert_lines(self, n: int, delete: bool) -> None:
        if not self.top <= self.y <= self.bottom:
            return
        self._shift(self.y, self.bottom, n, up=delete)
        self.x = 0
        self.pending = False

    def insert_chars(self, n: int) -> None:
        row = self.rows[self.y]
        x = self.x
        if x < len(row):
            if row[x] == "" and x > 0:
                row[x - 1] = " "
                row[x] = " "
            row[x:x] = " " * min(n, self.columns)
            del row[self.columns :]
            if len(row) == self.columns and row[-1] != "" and _cell_width(row[-1][:1]) == 2:
                row[-1] = " "  # a wide character pushed half off the row
        self.pending = False

    def delete_chars(self, n: int) -> None:
        row = self.rows[self.y]
        x = self.x
        if x < len(row):
            if row[x] == "" and x > 0:
                row[x - 1] = " "
            end = min(x + n, len(row))
            if end < len(row) and row[end] == "":
                row[end] = " "
            del row[x:end]
        self.pending = False

    # ----------------------------------------------------------------- state

    def _cursor_state(self) -> _Cursor:
        return (self.x, self.y, self.pending, self.origin, list(self.charsets), self.shift)

    def save_cursor(self) -> None:
        self.saved = self._cursor_state()

    def restore_cursor(self) -> None:
        if self.saved is None:
            self.origin = False
            self.charsets = ["B", "B"]
            self.shift = 0
            self._goto(0, 0)
            return
        x, y, pending, origin, charsets, shift = self.saved
        self._goto(x, y)
        self.pending, self.origin, self.charsets, self.shift = pending, origin, list(charsets), shift

    def _swap_buffers(self) -> None:
        self.rows, self.wrapped, self.other = self.other[0], self.other[1], (self.rows, self.wrapped)
        self.in_alt = not self.in_alt
        self._fill(self.y)

    def set_alternate(self, on: bool, mode: int) -> None:
        if on == self.in_alt:
            return
        if on:
            if mode == 1049:
                self.save_cursor()
                self.saved_main = self.saved
            self._swap_buffers()
            if mode == 1049:
                self.rows, self.wrapped = [[] for _ in range(self.y + 1)], [False] * (self.y + 1)
        else:
            if mode == 1047:
                self.rows, self.wrapped = [[]], [False]
            self._swap_buffers()
            if mode == 1049:
                self.restore_cursor()
            self.saved_main = None

    def reset(self) -> None:
        """RIS: a blank screen and default modes (the scrollback stays, as in xterm)."""
        self._blank()

    def _set_modes(self, private: bool, params: tuple[int, ...], on: bool) -> None:
        for mode in params:
            if not private:
                if mode == 4:
                    self.insert = on
                elif mode == 20:
                    self.newline_returns = on
            elif mode == 6:
                self.origin = on
                self._goto(0, self.top if on else 0)
            elif mode == 7:
                self.autowrap = on
                if not on:
                    self.pending = False
            elif mode in (47, 1047, 1049):
                self.set_alternate(on, mode)
            elif mode == 1048:
                if on:
                    self.save_cursor()
                else:
                    self.restore_cursor()

    # ----------------------------------------------------------------- sequences

    def csi(self, private: str, intermediates: str, final: str, params: tuple[int, ...]) -> None:
        """Play one CSI sequence (parsed by :func:`_parse_csi`; SGR never comes here)."""
        if intermediates:
            if intermediates == "!" and final == "p":  # DECSTR soft reset
                self.insert = self.origin = False
                self.autowrap = True
                self.top, self.bottom = 0, self.lines - 1
                self.charsets, self.shift, self.saved = ["B", "B"], 0, None
            return
        if private:
            if private != "?":
                return
            if final in "hl":
                self._set_modes(True, params, final == "h")
            elif final == "J":
                self.erase_display(params[0])
            elif final == "K":
                self.erase_line(params[0])
            return
        n = params[0] or 1
        if final == "K":
            self.erase_line(params[0])
        elif final == "H" or final == "f":  # CUP, HVP
            col = (params[1] or 1) if len(params) > 1 else 1
            if self.origin:
                self._goto_origin(col - 1, n - 1)
            else:
                self._goto(col - 1, n - 1)
        elif final == "A" or final == "F":  # CUU, CPL
            limit = self.top if self.y >= self.top else 0
            self._goto(0 if final == "F" else self.x, max(limit, self.y - n))
        elif final == "B" or final == "E" or final == "e":  # CUD, CNL, VPR
            limit = self.bottom if self.y <= self.bottom else self.lines - 1
            self._goto(0 if final == "E" else self.x, min(limit, self.y + n))
        elif final == "C" or final == "a":  # CUF, HPR
            self._goto(self.x + n, self.y)
        elif final == "D":
            self._goto(self.x - n, self.y)
        elif final == "G" or final == "`":  # CHA, HPA
            self._goto(n - 1, self.y)
        elif final == "d":  # VPA
            self._goto_origin(self.x, n - 1)
        elif final == "J":
            self.erase_display(params[0])
        elif final == "L" or final == "M":
            self.insert_lines(n, final == "M")
        elif final == "S":
            self.scroll_up(n)
        elif final == "T":
            self.scroll_down(n)
        elif final == "@":
            self.insert_chars(n)
        elif final == "P":
            self.delete_chars(n)
        elif final == "X":  # ECH
            self._erase_cells(self.rows[self.y], self.x, self.x + n)
            self.pending = False
        elif final == "b":  # REP
            if self.last:
                self.draw(self.last * min(n, self.columns * self.lines))
        elif final == "I":
            self.tab(n)
        elif final == "Z":
            self.back_tab(n)
        elif final == "g":  # TBC
            if params[0] == 3:
                self.tabstops = set()
            elif params[0] == 0:
                self._own_tabstops().discard(self.x)
        elif final == "r":  # DECSTBM
            top = n - 1
            bottom = min(((params[1] if len(params) > 1 else 0) or self.lines) - 1, self.lines - 1)
            if top < bottom:
                self.top, self.bottom = top, bottom
                self._goto_origin(0, 0)
        elif final == "s" and params == (0,):
            self.save_cursor()
        elif final == "u" and params == (0,):
            self.restore_cursor()
        elif final in "hl":
            self._set_modes(False, params, final == "h")

    def _goto_origin(self, x: int, y: int) -> None:
        """Go to ``x, y``, relative to the scroll region and kept in it in origin mode."""
        if self.origin:
            self._goto(x, min(self.top + max(y, 0), self.bottom))
        else:
            self._goto(x, y)

    def _own_tabstops(self) -> set[int]:
        if self.tabstops is None:
            self.tabstops = set(range(8, self.columns, 8))
        return self.tabstops

    def esc(self, intermediates: str, final: str) -> None:
        if not intermediates:
            if final == "D":
                self.index()
            elif final == "E":
                self.x = 0
                self.index()
            elif final == "M":
                self.reverse_index()
            elif final == "7":
                self.save_cursor()
            elif final == "8":
                self.restore_cursor()
            elif final == "c":
                self.reset()
            elif final == "H":
                self._own_tabstops().add(self.x)
        elif intermediates == "#" and final == "8":  # DECALN: fill the screen with E
            self._fill(self.lines - 1)
            self.rows = [["E"] * self.columns for _ in range(self.lines)]
            self.wrapped = [False] * self.lines
            self.top, self.bottom = 0, self.lines - 1
            self._goto(0, 0)
        elif intermediates in ("(", ")"):
            self.charsets[0 if intermediates == "(" else 1] = "0" if final == "0" else "B"

    # ----------------------------------------------------------------- output

    @staticmethod
    def _render(rows: list[list[str]], wrapped: list[bool], keep: int) -> str:
        """The rows as logical lines, down to the last non-blank row or row ``keep``."""
        texts = ["".join(row) for row in rows]
        last = len(texts) - 1
        while last > keep and not texts[last].strip(" "):
            last -= 1
        parts: list[str] = []
        for i in range(last + 1):
            if wrapped[i] and i < last:
                parts.append(texts[i])
            else:
                parts.append(texts[i].rstrip(" "))
                if i < last:
                    parts.append("\n")
        return "".join(parts)

    def render(self) -> str:
        """The scrollback and the main screen; then the alternate screen if it is still shown."""
        if not self.in_alt:
            return "".join(self.history) + self._render(self.rows, self.wrapped, self.y)
        main_rows, main_wrapped = self.other
        keep = self.saved_main[1] if self.saved_main is not None else -1
        main = "".join(self.history) + self._render(main_rows, main_wrapped, keep)
        alt = self._render(self.rows, self.wrapped, self.y)
        if not alt.strip():
            return main
        return main + ("\n" if main and not main.endswith("\n") else "") + alt


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
    screen = _Screen(view)
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
    if "\t" in line or not (line.isascii() or _all_narrow(line)):
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
    screen = _Screen(TerminalView(view.columns, _MAX_LINES, True))
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
