"""clean_terminal_text on output from real programs and on hand-made control sequences."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from codemode.tools._terminal import clean_terminal_text, strip_ansi


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
