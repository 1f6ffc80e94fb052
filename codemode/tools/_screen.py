"""The virtual terminal screen `codemode.tools._terminal` plays output that moves the cursor
across lines on: a VT100/xterm screen of the terminal's size with scrollback (`Screen`), its
tokens and CSI parameters, cell widths and DEC line drawing.

The screen is this module's own rather than pyte's: pyte 0.8.2 shaped 0.1-0.3 MB/s on the same
output (``bench/bench_terminal.py`` times it when installed), about a hundred times slower, and
keeps no mark of wrapped rows to join them again.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codemode.tools._terminal import TerminalView

__all__ = ["Screen", "all_narrow"]


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


def all_narrow(run: str) -> bool:
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


class Screen:
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
        if self.insert or not (run.isascii() or all_narrow(run)):
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
