"""clean_terminal_text on output from real programs and on hand-made control sequences."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codemode.tools._terminal import TerminalView, clean_terminal_text, strip_ansi, terminal_view


def _run(script: str) -> bytes:
    return subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout


def test_ls_color_always(tmp_path: Path) -> None:
    root = tmp_path
    (root / "subdir").mkdir()
    (root / "file.txt").write_text("x")
    exe = root / "run.sh"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    raw = subprocess.run(["ls", "--color=always", str(root)], capture_output=True, check=True).stdout
    assert b"\x1b[" in raw  # the program really coloured its output
    assert clean_terminal_text(raw) == "file.txt\nrun.sh\nsubdir\n"


def test_grep_color_always_with_erase_in_line() -> None:
    raw = _run("printf 'hello world\\nno match here\\nworld peace\\n' | grep --color=always world")
    assert b"\x1b[K" in raw
    assert clean_terminal_text(raw) == "hello world\nworld peace\n"


def test_printf_progress_bar_collapses_to_final_frame() -> None:
    raw = _run("for i in 0 25 50 75 100; do printf '\\rDownloading: %3d%%' $i; done; printf '\\n'; echo done")
    assert raw.count(b"\r") == 5
    assert clean_terminal_text(raw) == "Downloading: 100%\ndone\n"


def test_only_carriage_returns_never_a_newline() -> None:
    raw = _run(
        "for i in $(seq 1 200); do printf '\\r[%-20s] %d' $(printf '#%.0s' $(seq 1 $((i/10)))) $i; done"
    )
    assert b"\n" not in raw
    assert clean_terminal_text(raw) == "[####################] 200"


def test_carriage_return_overwrites_from_column_zero() -> None:
    assert clean_terminal_text(b"abcdef\rXY") == "XYcdef"
    assert clean_terminal_text(b"abcdef\rXY\nnext") == "XYcdef\nnext"


def test_crlf_is_a_line_end() -> None:
    assert clean_terminal_text(b"one\r\ntwo\r\n") == "one\ntwo\n"
    assert clean_terminal_text(b"50%\r100%\r\nok\r\n") == "100%\nok\n"


def test_erase_line_after_carriage_return() -> None:
    # The usual spinner/progress idiom: return, clear the line, print the new frame.
    assert clean_terminal_text(b"working... 50%\r\x1b[2Kdone\n") == "done\n"
    assert clean_terminal_text(b"working... 50%\r\x1b[Kdone\n") == "done\n"
    assert clean_terminal_text(b"working... 50%\x1b[1Gok\x1b[K\n") == "ok\n"


def test_python_spinner_with_backspaces() -> None:
    code = (
        "import sys\n"
        "sys.stdout.write('Loading ')\n"
        "for c in '|/-\\\\' * 3:\n"
        "    sys.stdout.write(c); sys.stdout.flush(); sys.stdout.write('\\b')\n"
        "sys.stdout.write('ok\\n')\n"
    )
    raw = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    assert b"\b" in raw
    assert clean_terminal_text(raw) == "Loading ok\n"


def test_backspace_overwrites_previous_cell() -> None:
    assert clean_terminal_text(b"ab\bc") == "ac"
    assert clean_terminal_text(b"abc\b\b\b") == "abc"
    assert clean_terminal_text(b"abc\b \b") == "ab"
    assert clean_terminal_text(b"\b\bx") == "x"


def test_invalid_utf8_is_replaced_never_raises() -> None:
    raw = _run("printf 'ok \\xff\\xfe bytes \\xe4\\xb8\\n'")
    text = clean_terminal_text(raw)
    assert text.startswith("ok \ufffd\ufffd bytes \ufffd")
    # Random binary never raises and leaves no control characters but newline and tab.
    blob = bytes(range(256)) * 40
    cleaned = clean_terminal_text(blob)
    assert all(ch in "\n\t" or ord(ch) >= 0x20 for ch in cleaned)
    assert not any(0x7F <= ord(ch) <= 0x9F for ch in cleaned)


def test_nul_bytes_dropped() -> None:
    raw = _run("printf 'a\\0b\\0\\0c\\n'")
    assert raw.count(b"\0") == 3
    assert clean_terminal_text(raw) == "abc\n"


def test_osc_hyperlinks_and_titles() -> None:
    link = b"\x1b]8;;https://example.com\x1b\\click here\x1b]8;;\x1b\\ after"
    assert clean_terminal_text(link) == "click here after"
    title = b"\x1b]0;my title\x07visible\n"
    assert clean_terminal_text(title) == "visible\n"


def test_unterminated_osc_stops_at_line_end() -> None:
    assert clean_terminal_text(b"before\x1b]0;title without end\nafter\n") == "before\nafter\n"


def test_dcs_apc_pm_sos_strings() -> None:
    raw = b"a\x1bPq#0;2;0;0;0\x1b\\b\x1b_apc data\x1b\\c\x1b^pm\x1b\\d\x1bXsos\x1b\\e"
    assert clean_terminal_text(raw) == "abcde"


def test_private_modes_charsets_and_keypad_escapes_show_nothing() -> None:
    raw = b"\x1b[?25l\x1b(B\x1b)0\x1b=text\x1b>\x1b[?2004h\x1b[?25h"
    assert clean_terminal_text(raw) == "text"


def test_c0_and_c1_controls_removed_tab_kept() -> None:
    raw = "a\x07b\x00c\x1ad\te\x7ff\u0085g\u0080\u0099h".encode()
    assert clean_terminal_text(raw) == "abcd\tefgh"


def test_cut_escape_sequence_at_end_removed() -> None:
    assert clean_terminal_text(b"text\x1b[38;5;") == "text"
    assert clean_terminal_text(b"text\x1b") == "text"


def test_cursor_moves_within_line() -> None:
    assert clean_terminal_text(b"abcdef\x1b[3DXY") == "abcXYf"
    assert clean_terminal_text(b"ab\x1b[2Ccd") == "ab  cd"


def test_vertical_moves_redraw_in_place() -> None:
    raw = b"layer 1: 10%\nlayer 2: 10%\n\x1b[2A\x1b[Klayer 1: 100%\n\x1b[Klayer 2: 100%\n"
    assert clean_terminal_text(raw) == "layer 1: 100%\nlayer 2: 100%\n"


def test_strip_ansi_only_removes_sequences() -> None:
    assert strip_ansi("\x1b[1;31mred\x1b[0m\r\n") == "red\r\n"
    assert strip_ansi("plain") == "plain"
    assert strip_ansi("\x1b]8;;u\x07x\x1b]8;;\x07") == "x"


def test_plain_text_unchanged() -> None:
    text = "line one\n\tindented — ünïcödé 中文\n\nlast"
    assert clean_terminal_text(text.encode()) == text


# ---------------------------------------------------------------------------------------------
# The virtual screen. Expectations follow the VT100/xterm documented behaviour: a line feed
# from a pipe returns to column 0 (a tty would have sent CR LF), IND/VT/FF move down keeping the
# column, the cursor stops at the margins, text wraps at the width and the terminal's copy
# joins a wrapped line again, lines scrolled off the top stay in the scrollback.


def _screen(data: bytes | str, columns: int = 80, lines: int = 24, *, pty: bool = False) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return clean_terminal_text(raw, TerminalView(columns, lines, newline_returns=not pty))


def test_index_reverse_index_and_next_line() -> None:
    assert _screen("ab\x1bDcd") == "ab\n  cd"  # IND: down, same column
    assert _screen("ab\x1bEcd") == "ab\ncd"  # NEL: down to column 0
    assert _screen("line1\nline2\x1bM\rX") == "Xine1\nline2"  # RI: up
    assert _screen("top\x1b[H\x1bMnew") == "new\ntop"  # RI at the top margin scrolls down


def test_vertical_tab_and_form_feed_move_down_keeping_the_column() -> None:
    assert _screen("ab\x0bcd") == "ab\n  cd"
    assert _screen("ab\x0ccd\n") == "ab\n  cd\n"
    # Real tput output: the terminfo "ind" capability of xterm is a line feed.
    assert _screen(_run("printf ab; tput -T xterm cud 1; printf cd")) == "ab\n  cd"


def test_cursor_up_down_forward_back() -> None:
    assert _screen("1\n2\n3\x1b[2AX") == "1X\n2\n3"
    assert _screen("a\x1b[2Bb") == "a\n\n b"
    assert _screen("\x1b[500Cx") == " " * 79 + "x"  # clamped at the right margin
    assert _screen("abcdef\x1b[3DXY") == "abcXYf"
    assert _screen("ab\x1b[9DX\x1b[9AY") == "XY"  # clamped at the left and top margins
    assert _screen("a\x1b[99Bz", lines=5) == "a\n\n\n\n z"  # ... and at the bottom
    assert _screen("1\n2\n3\x1b[2Fa\x1b[Eb") == "a\nb\n3"  # CPL, CNL: to column 0


def test_cursor_position() -> None:
    assert _screen("\x1b[3;5Hx") == "\n\n    x"
    assert _screen("abc\x1b[Hz") == "zbc"
    assert _screen("\x1b[99;99Hx", columns=10, lines=3) == "\n\n         x"
    assert _screen(
        _run("tput -T xterm clear; tput -T xterm cup 1 3; printf x; tput -T xterm cup 0 0; printf y")
    ) == ("y\n   x")


def test_erase_in_display() -> None:
    assert _screen("aaa\nbbb\nccc\x1b[2;2H\x1b[J") == "aaa\nb"
    assert _screen("aaa\nbbb\nccc\x1b[2;2H\x1b[1J") == "\n  b\nccc"
    assert _screen("old\nstuff\n\x1b[H\x1b[2Jnew\n") == "new\n"
    assert _screen(_run("echo old; tput -T xterm clear; echo new")) == "new\n"


def test_erase_in_line() -> None:
    assert _screen("abcdef\x1b[3D\x1b[K") == "abc"
    assert _screen("abcdef\x1b[3D\x1b[1K") == "    ef"
    assert _screen("abcdef\x1b[3D\x1b[2KX") == "   X"


def test_save_and_restore_cursor() -> None:
    assert _screen("\x1b7abc\n\ndef\x1b8X") == "Xbc\n\ndef"
    assert _screen("ab\x1b[s\ncd\x1b[uX") == "abX\ncd"
    assert _screen(
        _run("printf 'status: '; tput -T xterm sc; printf '\\nlog line\\n'; tput -T xterm rc; echo ok")
    ) == ("status: ok\nlog line")


def test_scroll_region_loses_only_what_scrolled_inside_it() -> None:
    rows = "1\n2\n3\n4\n5"
    # A region of rows 2-4: a line feed at its bottom scrolls it; row 1 and row 5 stay.
    assert _screen(rows + "\x1b[2;4r\x1b[4;1H\nnew", lines=5) == "1\n3\n4\nnew\n5"
    # A region at the top of the screen scrolls into the scrollback, as on xterm.
    assert _screen(rows + "\x1b[1;3r\x1b[3;1H\nx", lines=5) == "1\n2\n3\nx\n4\n5"
    # Reverse index at the region's top scrolls it down; below the region nothing moves.
    assert _screen(rows + "\x1b[2;4r\x1b[2;1H\x1bMtop", lines=5) == "1\ntop\n2\n3\n5"


def test_insert_and_delete_lines_and_characters() -> None:
    assert _screen("1\n2\n3\x1b[2;1H\x1b[L") == "1\n\n2\n3"
    assert _screen("1\n2\n3\x1b[2;1H\x1b[M") == "1\n3"
    assert _screen("abcdef\x1b[1G\x1b[2P") == "cdef"
    assert _screen("abc\x1b[1G\x1b[2@") == "  abc"
    assert _screen("abcdef\x1b[1G\x1b[3X") == "   def"
    assert _screen("a\x1b[4b") == "aaaaa"  # REP
    assert _screen("line\x1b[2S", lines=3) == "line\n\n"  # SU: the line goes to the scrollback


def test_wrap_at_the_width_and_join_the_logical_line() -> None:
    assert _screen("abcdefghijklm", columns=10) == "abcdefghijklm"
    # A carriage return goes to the start of the row the cursor is on: the second one.
    assert _screen("abcdefghijklm\rX", columns=10) == "abcdefghijXlm"
    # Exactly the width: the wrap is pending, so CR and LF stay on that row (no blank line).
    assert _screen("abcdefghij\rX", columns=10) == "Xbcdefghij"
    assert _screen("abcdefghij\nk\x1b[A", columns=10) == "abcdefghij\nk"
    # Cursor up counts rows on the screen, not logical lines.
    assert _screen("abcdefghijklm\x1b[AZ", columns=10) == "abcZefghijklm"
    # Without autowrap (DECAWM off) the last column is overwritten.
    assert _screen("\x1b[?7labcdefghijklm", columns=10) == "abcdefghim"


def test_wide_characters_take_two_cells() -> None:
    assert _screen("中文\x1b[2DX") == "中X"  # the half-overwritten character is blanked
    assert _screen("abcdefghi中", columns=10) == "abcdefghi中"  # wraps before a split
    assert _screen("e\u0301x\x1b[2DY") == "Yx"  # a combining mark rides on its base cell


def test_tabs_expand_to_the_next_multiple_of_eight_when_rendered() -> None:
    assert _screen("a\tb\x1b[H") == "a       b"
    assert _screen("abcdefghij\r\tX") == "abcdefghXj"  # a tab moves, it does not erase
    assert _screen("\r\t\t\tX", columns=10) == "         X"  # stops at the right margin
    assert _screen("\x1b[3g\x1b[5G\x1bH\r\tX") == "    X"  # TBC then HTS at column 5
    assert _screen("abcdefghijklmnop\x1b[ZX") == "abcdefghXjklmnop"  # CBT: back to column 9
    # Plain lines (nothing rendered) keep the tab characters the program wrote.
    assert clean_terminal_text(b"a\tb\n") == "a\tb\n"


def test_alternate_screen_is_gone_when_the_program_leaves_it() -> None:
    assert _screen("before\n\x1b[?1049h\x1b[Hfull screen app\x1b[?1049lafter\n") == "before\nafter\n"
    # Still on it (a live read): the main screen, then what the alternate one shows now.
    assert _screen("before\n\x1b[?1049h\x1b[2J\x1b[HTUI frame") == "before\nTUI frame"
    raw = _run("echo shell; tput -T xterm smcup; echo inside; tput -T xterm rmcup; echo back")
    assert b"\x1b[?1049h" in raw
    assert _screen(raw) == "shell\nback\n"


def test_dec_line_drawing_and_reset() -> None:
    assert _screen("\x1b(0lqqk\x1b(B ok") == "┌──┐ ok"
    assert _screen("\x1b)0a\x0eqx\x0fb") == "a─│b"  # G1 selected with SO, back with SI
    assert _screen("\x1b#8", columns=4, lines=2) == "EEEE\nEEEE"  # DECALN
    assert _screen("junk\x1bcclean") == "clean"  # RIS


def test_origin_mode_positions_relative_to_the_region() -> None:
    assert _screen("\x1b[3;5r\x1b[?6h\x1b[1;1Hx\x1b[9;1Hy", lines=6) == "\n\nx\n\ny"


def test_scrollback_keeps_every_line_in_order() -> None:
    lines = "".join(f"line {i}\n" for i in range(1, 11))
    # Ten lines on a 3-row screen, then a redraw of the top row of what is shown.
    assert _screen(lines + "\x1b[1;1HX\x1b[3;1H", lines=3).splitlines() == [
        *(f"line {i}" for i in range(1, 9)),
        "Xine 9",
        "line 10",
    ]


def test_docker_pull_style_multi_line_progress() -> None:
    ids = ["a1b2c3", "d4e5f6", "0789ab"]
    out = "".join(f"{i}: Pulling fs layer\n" for i in ids)
    for pct in (10, 50, 100):
        out += f"\x1b[{len(ids)}A"
        out += "".join(f"\x1b[2K\r{i}: Downloading {pct}%\n" for i in ids)
    out += f"\x1b[{len(ids)}A" + "".join(f"\x1b[2K\r{i}: Pull complete\n" for i in ids)
    out += "Status: Downloaded newer image\n"
    expected = "".join(f"{i}: Pull complete\n" for i in ids) + "Status: Downloaded newer image\n"
    assert _screen(out) == expected
    assert _screen(out.replace("\n", "\r\n"), pty=True) == expected


def test_package_manager_status_line_redrawn_above_the_cursor() -> None:
    # pnpm style: a status line rewritten in place by moving up and erasing it.
    out = "Packages: +3\n"
    for n in range(1, 4):
        out += ("\x1b[1A\x1b[2K" if n > 1 else "") + f"Progress: resolved {n}, downloaded {n}\n"
    out += "Done in 1.2s\n"
    assert _screen(out) == "Packages: +3\nProgress: resolved 3, downloaded 3\nDone in 1.2s\n"


def test_npm_style_gauge_cleared_before_each_log_line() -> None:
    out = ""
    for step, name in enumerate(["idealTree", "reify", "audit"]):
        out += f"\x1b[?25l\r\x1b[K⠋ {name} [{'#' * step:<3}]\x1b[0G"
        out += f"\r\x1b[Knpm info step {name}\n"
    out += "\r\x1b[K\x1b[?25hadded 12 packages in 2s\n"
    assert (
        _screen(out)
        == "npm info step idealTree\nnpm info step reify\nnpm info step audit\nadded 12 packages in 2s\n"
    )


def test_spinner_frames_collapse() -> None:
    frames = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    out = "".join(f"\r{f} installing" for f in frames) + "\r\x1b[K✔ installed\n"
    assert clean_terminal_text(out.encode()) == "✔ installed\n"
    # The same with a cursor-up redraw of a two-line spinner block.
    out = "".join(f"{f} task a\n{f} task b\n\x1b[2A" for f in frames) + "✔ task a\n✔ task b\n"
    assert _screen(out) == "✔ task a\n✔ task b\n"


def test_pty_line_feed_moves_down_only() -> None:
    assert _screen("ab\ncd", pty=True) == "ab\n  cd"  # the program turned the tty's CR off
    assert _screen("ab\r\ncd\r\n", pty=True) == "ab\ncd\n"
    assert _screen("ab\ncd", pty=False) == "ab\ncd"


def test_width_clamps_in_line_level_redraws_too() -> None:
    # No vertical motion, but a carriage return on a line longer than the width.
    assert _screen("0123456789abc\rXY", columns=10) == "0123456789XYc"
    assert _screen("ab\x1b[300Gz", columns=10) == "ab       z"


def test_cut_and_malformed_sequences_never_raise() -> None:
    assert _screen("\x1b[2Aabc\x1b[3") == "abc"
    # REP repeats at most a screenful (8 cells here), as one wrapped line; only right after text.
    assert _screen("x\x1b[999999999b", columns=4, lines=2) == "x" * 9
    assert _screen("x\x1b[99999999999999999999A\x1b[999999999b", columns=4, lines=2) == "x"
    assert _screen("\x1b[;H\x1b[0;0Hq\x1b[?r\x1b[>5Hz") == "qz"


def test_terminal_view_from_the_environment() -> None:
    assert terminal_view({}) == TerminalView(80, 24)
    assert terminal_view({"COLUMNS": "132", "LINES": "40"}) == TerminalView(132, 40)
    assert terminal_view({"COLUMNS": "wide", "LINES": "0"}) == TerminalView(80, 24)
    assert terminal_view({"COLUMNS": "99999999"}).columns == 4096


# ---------------------------------------------------------------------------------------------
# The same sequences on a real terminal: tmux, its pane fed the raw bytes (output processing
# off, so a line feed moves down only, as in a PTY log), read back with its scrollback and
# wrapped lines joined (capture-pane -J -S -). Left out where tmux differs from xterm: it keeps
# rows scrolled out of a region that does not start at the top, and pushes the screen into the
# scrollback on ED 2; its capture shows DEC line drawing untranslated.

_TMUX_CASES = [
    "ab\x1bDcd",
    "ab\x1bEcd",
    "line1\r\nline2\x1bM\rX",
    "top\x1b[H\x1bMnew",
    "ab\x0bcd\x0cef",
    "1\r\n2\r\n3\x1b[2AX\x1b[3B\ry",
    "\x1b[3;5Hx\x1b[H\x1b[2Cy",
    "aaa\r\nbbb\r\nccc\x1b[2;2H\x1b[J",
    "aaa\r\nbbb\r\nccc\x1b[2;2H\x1b[1J",
    "abcdef\x1b[3D\x1b[1K\x1b[3Cg",
    "\x1b7abc\r\n\r\ndef\x1b8X",
    "1\r\n2\r\n3\r\n4\r\n5\r\n6\x1b[1;3r\x1b[3;1H\nx\x1b[r",
    "abcdefghijklmnopqrstuvwxyz\rX",
    "abcdefghijklmnopqrst\rX\r\nnext",
    "abcdefghijklmnopqrstuvwxyz\x1b[AZ",
    "a\tb\tc\r\n\t\t\tX\x1b[H",
    "before\r\n\x1b[?1049h\x1b[Hfull screen\x1b[?1049lafter\r\n",
    "abcdef\x1b[1G\x1b[2P\r\nabc\x1b[1G\x1b[2@\r\nabcdef\x1b[1G\x1b[3X\r\na\x1b[4b",
    "".join(f"line {i}\r\n" for i in range(1, 16)) + "\x1b[1;1HX\x1b[6;1H",
    "l1: 0%\r\nl2: 0%\r\n"
    + "".join(f"\x1b[2A\x1b[2K\rl1: {p}%\r\n\x1b[2K\rl2: {p}%\r\n" for p in (10, 50, 100)),
    "\x1b[?7labcdefghijklmnopqrstuvwxyz\x1b[?7h",
]


def _tmux_shows(tmux: str, socket: Path, data: bytes, columns: int, lines: int) -> str:
    case = socket.with_suffix(".bin")
    case.write_bytes(data)
    run = [tmux, "-S", str(socket)]
    command = f"stty -opost; cat {case}; {tmux} -S {socket} wait-for -S shown; sleep 60"
    subprocess.run(
        [*run, "new-session", "-d", "-s", "t", "-x", str(columns), "-y", str(lines), command], check=True
    )
    try:
        subprocess.run([*run, "wait-for", "shown"], check=True, timeout=20)
        return subprocess.run(
            [*run, "capture-pane", "-p", "-J", "-S", "-", "-t", "t"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        subprocess.run([*run, "kill-server"], check=False, capture_output=True)


def _visible_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("case", _TMUX_CASES, ids=range(len(_TMUX_CASES)))
def test_rendering_matches_a_real_terminal(case: str, tmp_path: Path) -> None:
    tmux = shutil.which("tmux")
    assert tmux is not None
    data = case.encode()
    shown = _tmux_shows(tmux, tmp_path / "tmux", data, 20, 6)
    ours = clean_terminal_text(data, TerminalView(20, 6, newline_returns=False))
    assert _visible_lines(ours) == _visible_lines(shown)
