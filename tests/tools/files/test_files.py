"""File tools on real files: paging, edits, writes, encodings, atomicity, sandbox checks.

Every test runs twice: paths resolved with openat2 and with the O_NOFOLLOW openat walk. Races,
pseudo-files and the state directory are tested in test_files_safety.py.
"""

from __future__ import annotations

import os
import resource
import signal
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import pydantic
import pytest

import codemode.tools.files._limits as files_module
from codemode.errors import ErrorCode, SandboxDenied, ToolError
from codemode.sandbox._policy import SandboxMode, SandboxPolicy
from codemode.tools import typescript_signature
from codemode.tools._model import Tool, ToolContext, ToolResult
from codemode.tools.files import (
    MAX_LINES,
    MAX_PAGE_BYTES,
    OVERWRITE_THRESHOLD,
    EditFileArgs,
    EditFileResult,
    ReadFileArgs,
    ReadFileResult,
    WriteFileResult,
    file_tools,
)

# Every test runs with openat2 (where the kernel has it) and with the O_NOFOLLOW openat walk.
pytestmark = pytest.mark.usefixtures("resolver")


@dataclass
class Env:
    workspace: Path
    outside: Path
    state: Path
    ctx: ToolContext
    tools: dict[str, Tool]

    def call(self, name: str, **args: Any) -> ToolResult:
        tool = self.tools[name]
        model = tool.parse(args)
        # write_file and edit_file are async: they wait for the session's writers first.
        result = anyio.run(tool.handler, model, self.ctx) if tool.is_async else tool.handler(model, self.ctx)
        assert isinstance(result, ToolResult)
        assert tool.check_result(result) is None, "the result matches the tool's result model"
        return result

    def fails(self, name: str, exc: type[ToolError] = ToolError, **args: Any) -> ToolError:
        with pytest.raises(exc) as info:
            self.call(name, **args)
        return info.value

    def with_mode(self, mode: SandboxMode) -> Env:
        ctx = ToolContext(
            session_id="s",
            workspace=self.workspace,
            policy=self.ctx.policy.with_mode(mode),
            archive=self.ctx.archive,
        )
        return Env(self.workspace, self.outside, self.state, ctx, self.tools)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    workspace, outside, state = tmp_path / "ws", tmp_path / "outside", tmp_path / "state"
    for directory in (workspace, outside, state):
        directory.mkdir()
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, writable_roots=(workspace,), protected=(state,))
    # The file tools never touch the archive.
    ctx = ToolContext(session_id="s", workspace=workspace, policy=policy, archive=cast(Any, None))
    return Env(workspace, outside, state, ctx, {t.name: t for t in file_tools()})


def leftovers(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if "codemode-tmp" in name]


# ---------------------------------------------------------------------------- registration


def test_three_tools_with_context_and_schemas(env: Env) -> None:
    assert sorted(env.tools) == ["edit_file", "read_file", "write_file"]
    schema = env.tools["read_file"].input_schema
    assert schema["required"] == ["path"]
    assert set(schema["properties"]) == {"path", "offset", "limit"}
    assert set(env.tools["edit_file"].input_schema["properties"]) == {
        "path",
        "old_text",
        "new_text",
        "replace_all",
    }
    assert set(env.tools["write_file"].input_schema["properties"]) == {
        "path",
        "content",
        "create_only",
        "overwrite",
    }
    for tool in env.tools.values():
        assert tool.is_async is (tool.name != "read_file")  # the writers wait for their turn
        assert tool.description
    with pytest.raises(pydantic.ValidationError):
        ReadFileArgs.model_validate({"path": "x", "offset": 0})
    with pytest.raises(pydantic.ValidationError):
        EditFileArgs.model_validate({"path": "x", "old_text": "a", "new_text": "b", "extra": 1})


# ---------------------------------------------------------------------------- read_file


def test_read_numbers_lines_like_cat_n(env: Env) -> None:
    (env.workspace / "a.txt").write_text("alpha\nbeta\n")
    result = env.call("read_file", path="a.txt")
    assert result.text == "     1\talpha\n     2\tbeta"
    data = result.structured_content
    assert data["content"] == "alpha\nbeta\n"
    assert (data["start_line"], data["end_line"], data["total_lines"]) == (1, 2, 2)
    assert data["next_offset"] is None and data["truncated"] is False
    assert data["encoding"] == "utf-8" and data["line_ending"] == "lf"
    assert data["path"] == str(env.workspace / "a.txt")


def test_pagination_concatenates_to_the_file(env: Env) -> None:
    lines = [f"line {i} " + "x" * (i % 17) + ("\r\n" if i % 5 == 0 else "\n") for i in range(1, 5001)]
    original = "".join(lines) + "no final newline é"
    (env.workspace / "big.txt").write_bytes(original.encode())
    pages, offset = [], 1
    while True:
        data = env.call("read_file", path="big.txt", offset=offset, limit=700).structured_content
        pages.append(data["content"])
        assert data["end_line"] - data["start_line"] + 1 <= 700
        assert data["total_lines"] == 5001
        if data["next_offset"] is None:
            break
        assert data["next_offset"] == data["end_line"] + 1
        offset = data["next_offset"]
    assert "".join(pages) == original
    assert len(pages) == 8


def test_continuation_line_names_the_exact_call(env: Env) -> None:
    (env.workspace / "f.txt").write_text("".join(f"{i}\n" for i in range(1, 11)))
    result = env.call("read_file", path="f.txt", offset=3, limit=4)
    assert result.text.splitlines()[0] == "     3\t3"
    assert (
        result.text.splitlines()[-1]
        == '[showing lines 3-6 of 10; continue with read_file({path: "f.txt", offset: 7})]'
    )
    assert result.structured_content["next_offset"] == 7


def test_continuation_quotes_odd_paths(env: Env) -> None:
    (env.workspace / 'my "notes" file.txt').write_text("1\n2\n")
    text = env.call("read_file", path='my "notes" file.txt', limit=1).text
    assert text.endswith('continue with read_file({path: "my \\"notes\\" file.txt", offset: 2})]')


def test_limit_is_capped_at_max_lines(env: Env) -> None:
    (env.workspace / "f.txt").write_text("x\n" * (MAX_LINES + 10))
    data = env.call("read_file", path="f.txt", limit=MAX_LINES * 5).structured_content
    assert data["end_line"] == MAX_LINES
    assert data["next_offset"] == MAX_LINES + 1


def test_byte_cap_ends_the_page_before_the_line_cap(env: Env) -> None:
    line = "y" * 999 + "\n"  # 1000 bytes
    (env.workspace / "wide.txt").write_text(line * 600)
    data = env.call("read_file", path="wide.txt").structured_content
    assert data["bytes"] <= MAX_PAGE_BYTES
    assert data["end_line"] == MAX_PAGE_BYTES // 1000
    assert data["next_offset"] == data["end_line"] + 1
    assert data["truncated"] is True


def test_single_line_longer_than_byte_cap_is_cut_with_instructions(env: Env) -> None:
    long_line = "€" * (MAX_PAGE_BYTES // 3 + 100)  # 3 bytes each: over the cap
    (env.workspace / "one.txt").write_text(long_line + "\nafter\n")
    result = env.call("read_file", path="one.txt")
    data = result.structured_content
    assert data["cut_line"]["line"] == 1
    assert data["cut_line"]["line_bytes"] == len(long_line.encode()) + 1
    assert data["bytes"] <= MAX_PAGE_BYTES
    assert set(data["content"]) == {"€"}  # cut on a character boundary
    assert data["next_offset"] == 2
    assert "sed -n '1p'" in result.text and f"cut -b {data['cut_line']['shown_bytes'] + 1}-" in result.text
    follow = env.call("read_file", path="one.txt", offset=2).structured_content
    assert follow["content"] == "after\n"


def test_offset_past_end_is_an_error(env: Env) -> None:
    (env.workspace / "f.txt").write_text("a\nb\n")
    error = env.fails("read_file", path="f.txt", offset=3)
    assert "past the end" in error.message and "2 lines" in error.message


def test_empty_file(env: Env) -> None:
    (env.workspace / "empty.txt").write_bytes(b"")
    result = env.call("read_file", path="empty.txt")
    assert "empty" in result.text
    assert result.structured_content["content"] == ""
    assert result.structured_content["total_lines"] == 0


def test_binary_file_refused(env: Env) -> None:
    (env.workspace / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02" + bytes(range(256)) * 10)
    error = env.fails("read_file", path="blob.bin")
    assert "binary" in error.message and "xxd" in error.message
    assert "2,567 bytes" in error.message or "2.5 KiB" in error.message
    assert error.data["binary"] is True


def test_non_utf8_text_falls_back_to_latin1(env: Env) -> None:
    (env.workspace / "latin.txt").write_bytes("café olé\n".encode("latin-1"))
    data = env.call("read_file", path="latin.txt").structured_content
    assert data["encoding"] == "latin-1"
    assert data["content"] == "café olé\n"


def test_utf8_bom_is_not_part_of_the_content(env: Env) -> None:
    (env.workspace / "bom.txt").write_bytes(b"\xef\xbb\xbfhello\n")
    data = env.call("read_file", path="bom.txt").structured_content
    assert data["content"] == "hello\n"
    assert data["encoding"] == "utf-8-sig"


def test_crlf_reported_and_content_exact(env: Env) -> None:
    (env.workspace / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    result = env.call("read_file", path="dos.txt")
    assert result.text == "     1\tone\n     2\ttwo"
    assert result.structured_content["content"] == "one\r\ntwo\r\n"
    assert result.structured_content["line_ending"] == "crlf"


def test_only_newline_splits_lines(env: Env) -> None:
    (env.workspace / "odd.txt").write_text("a\x0cb\u2028c\rd\n", newline="")
    data = env.call("read_file", path="odd.txt").structured_content
    assert data["total_lines"] == 1 and data["end_line"] == 1


def test_emoji_and_cjk_roundtrip(env: Env) -> None:
    text = "你好，世界\n🙂 emoji 👩‍💻\n"
    env.call("write_file", path="u.txt", content=text)
    assert (env.workspace / "u.txt").read_bytes() == text.encode()
    assert env.call("read_file", path="u.txt").structured_content["content"] == text
    env.call("edit_file", path="u.txt", old_text="世界", new_text="🌏")
    assert (env.workspace / "u.txt").read_text() == text.replace("世界", "🌏")


def test_missing_file_suggests_close_names(env: Env) -> None:
    (env.workspace / "config.yaml").write_text("x")
    error = env.fails("read_file", path="config.yml")
    assert "does not exist" in error.message and "config.yaml" in error.message


def test_missing_directory_named(env: Env) -> None:
    error = env.fails("read_file", path="nope/deeper/f.txt")
    assert str(env.workspace / "nope" / "deeper") in error.message
    assert error.data["existing_ancestor"] == str(env.workspace)


def test_directory_refused(env: Env) -> None:
    (env.workspace / "d").mkdir()
    assert "is a directory" in env.fails("read_file", path="d").message


def test_fifo_refused_without_blocking(env: Env) -> None:
    os.mkfifo(env.workspace / "pipe")
    assert "not a regular file" in env.fails("read_file", path="pipe").message


def test_reading_outside_the_workspace_allowed(env: Env) -> None:
    (env.outside / "o.txt").write_text("outside\n")
    result = env.call("read_file", path=str(env.outside / "o.txt"))
    assert result.structured_content["content"] == "outside\n"
    assert (
        str(env.outside / "o.txt")
        in env.call("read_file", path="../outside/o.txt").structured_content["path"]
    )


def test_reading_state_dir_refused(env: Env) -> None:
    (env.state / "secrets.db").write_text("token")
    env.fails("read_file", SandboxDenied, path=str(env.state / "secrets.db"))


# ---------------------------------------------------------------------------- edit_file


def test_edit_single_match_with_diff(env: Env) -> None:
    path = env.workspace / "m.py"
    path.write_text("def f():\n    return 1\n")
    result = env.call("edit_file", path="m.py", old_text="return 1", new_text="return 2")
    assert path.read_text() == "def f():\n    return 2\n"
    assert result.text.startswith("Edited m.py: 1 replacement")
    assert "--- a/m.py\n+++ b/m.py" in result.text
    assert "-    return 1\n+    return 2" in result.text
    data = result.structured_content
    assert data["replacements"] == 1 and data["bytes_before"] == data["bytes_after"] == 22
    assert data["diff"].startswith("--- a/m.py")


def test_multiple_matches_report_line_numbers_and_leave_file(env: Env) -> None:
    path = env.workspace / "m.txt"
    original = "x = 1\ny = 2\nx = 1\n\nx = 1\n"
    path.write_text(original)
    error = env.fails("edit_file", path="m.txt", old_text="x = 1", new_text="x = 3")
    assert "3 times" in error.message and "lines 1, 3, 5" in error.message and "replace_all" in error.message
    assert [m["line"] for m in error.data["matches"]] == [1, 3, 5]
    assert path.read_text() == original


def test_replace_all(env: Env) -> None:
    path = env.workspace / "m.txt"
    path.write_text("x = 1\ny = 2\nx = 1\n")
    result = env.call("edit_file", path="m.txt", old_text="x = 1", new_text="x = 3", replace_all=True)
    assert path.read_text() == "x = 3\ny = 2\nx = 3\n"
    assert result.structured_content["replacements"] == 2


def test_no_match_reports_indentation_near_miss(env: Env) -> None:
    path = env.workspace / "code.py"
    body = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(50))
    body += "class A:\n    def go(self):\n        if ready:\n            run()\n"
    path.write_text(body)
    error = env.fails(
        "edit_file", path="code.py", old_text="def go(self):\n    if ready:\n        run()", new_text="x"
    )
    near = error.data["near_miss"]
    assert (near["start_line"], near["end_line"]) == (152, 154)
    assert "indentation" in near["hint"]
    assert "lines 152-154" in error.message
    assert path.read_text() == body


def test_no_match_reports_case_near_miss(env: Env) -> None:
    (env.workspace / "c.txt").write_text("alpha\nHello World\nomega\n")
    error = env.fails("edit_file", path="c.txt", old_text="hello world", new_text="bye")
    assert error.data["near_miss"]["start_line"] == 2
    assert error.data["near_miss"]["hint"] == "letter case differs"


def test_no_match_reports_typo_near_miss(env: Env) -> None:
    lines = [f"value_{i} = compute({i})" for i in range(300)]
    (env.workspace / "t.py").write_text("\n".join(lines) + "\n")
    error = env.fails("edit_file", path="t.py", old_text="value_123 = compite(123)", new_text="x")
    assert error.data["near_miss"]["start_line"] == 124
    assert "value_123 = compute(123)" in error.data["near_miss"]["hint"]


def test_no_match_without_anything_similar(env: Env) -> None:
    (env.workspace / "t.txt").write_text("aaaa\nbbbb\n")
    error = env.fails("edit_file", path="t.txt", old_text="zzzzzzzzzzzzzzzz", new_text="x")
    assert error.data["near_miss"] is None and "not found" in error.message


def test_crlf_preserved_with_lf_input(env: Env) -> None:
    path = env.workspace / "dos.txt"
    path.write_bytes(b"first\r\nsecond\r\nthird\r\n")
    env.call(
        "edit_file", path="dos.txt", old_text="first\nsecond\n", new_text="first\nsecond and more\nextra\n"
    )
    assert path.read_bytes() == b"first\r\nsecond and more\r\nextra\r\nthird\r\n"


def test_bom_and_missing_final_newline_preserved(env: Env) -> None:
    path = env.workspace / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfkey = old")
    env.call("edit_file", path="bom.txt", old_text="old", new_text="new ✓")
    assert path.read_bytes() == b"\xef\xbb\xbf" + "key = new ✓".encode()


def test_latin1_file_stays_latin1(env: Env) -> None:
    path = env.workspace / "l.txt"
    path.write_bytes("prix: 5 €uro café\n".replace("€", "").encode("latin-1"))
    env.call("edit_file", path="l.txt", old_text="café", new_text="thé")
    assert path.read_bytes() == "prix: 5 uro thé\n".encode("latin-1")
    error = env.fails("edit_file", path="l.txt", old_text="thé", new_text="茶")
    assert "latin-1" in error.message and "unchanged" in error.message
    assert path.read_bytes() == "prix: 5 uro thé\n".encode("latin-1")


def test_lone_surrogate_refused_cleanly(env: Env) -> None:
    path = env.workspace / "s.txt"
    path.write_text("hello\n")
    error = env.fails("edit_file", path="s.txt", old_text="hello", new_text="bad \ud83d")
    assert "surrogate" in error.message
    assert path.read_text() == "hello\n"
    assert "surrogate" in env.fails("write_file", path="new.txt", content="\udc80").message
    assert not (env.workspace / "new.txt").exists()
    assert leftovers(env.workspace) == []


def test_empty_and_identical_old_text_refused(env: Env) -> None:
    (env.workspace / "f.txt").write_text("a\n")
    assert "empty" in env.fails("edit_file", path="f.txt", old_text="", new_text="x").message
    assert "identical" in env.fails("edit_file", path="f.txt", old_text="a", new_text="a").message


def test_edit_missing_file_points_to_write_file(env: Env) -> None:
    assert "write_file" in env.fails("edit_file", path="ghost.txt", old_text="a", new_text="b").message


def test_edit_binary_refused(env: Env) -> None:
    (env.workspace / "b.bin").write_bytes(b"ab\x00cd")
    assert "binary" in env.fails("edit_file", path="b.bin", old_text="ab", new_text="x").message


def test_edit_keeps_mode(env: Env) -> None:
    path = env.workspace / "run.sh"
    path.write_text("echo hi\n")
    path.chmod(0o750)
    env.call("edit_file", path="run.sh", old_text="hi", new_text="bye")
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert leftovers(env.workspace) == []


def test_edit_through_inside_symlink_keeps_the_link(env: Env) -> None:
    (env.workspace / "real.txt").write_text("v1\n")
    (env.workspace / "link.txt").symlink_to("real.txt")
    env.call("edit_file", path="link.txt", old_text="v1", new_text="v2")
    assert (env.workspace / "link.txt").is_symlink()
    assert (env.workspace / "real.txt").read_text() == "v2\n"


# ---------------------------------------------------------------------------- write_file


def test_write_creates_parents_and_reports(env: Env) -> None:
    result = env.call("write_file", path="a/b/c.txt", content="one\ntwo\n")
    path = env.workspace / "a" / "b" / "c.txt"
    assert path.read_text() == "one\ntwo\n"
    assert result.text.startswith("Created a/b/c.txt: 8 bytes, 2 lines.")
    assert "+++ b/a/b/c.txt" in result.text
    assert result.structured_content["created"] is True and result.structured_content["bytes"] == 8
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~_umask()


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_write_replaces_small_file_with_diff_and_keeps_mode(env: Env) -> None:
    path = env.workspace / "s.txt"
    path.write_text("old\n")
    path.chmod(0o600)
    result = env.call("write_file", path="s.txt", content="new\n")
    assert path.read_text() == "new\n"
    assert result.structured_content["created"] is False
    assert "-old\n+new" in result.structured_content["diff"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_create_only_refuses_existing(env: Env) -> None:
    path = env.workspace / "exists.txt"
    path.write_text("keep\n")
    error = env.fails("write_file", path="exists.txt", content="x", create_only=True)
    assert "already exists" in error.message and "edit_file" in error.message
    assert path.read_text() == "keep\n"
    assert env.call("write_file", path="fresh.txt", content="x", create_only=True).structured_content[
        "created"
    ]


def test_overwrite_threshold(env: Env) -> None:
    path = env.workspace / "large.txt"
    big = "z" * (OVERWRITE_THRESHOLD + 1)
    path.write_text(big)
    error = env.fails("write_file", path="large.txt", content="small")
    assert "overwrite: true" in error.message and "edit_file" in error.message
    assert path.read_text() == big
    env.call("write_file", path="large.txt", content="small", overwrite=True)
    assert path.read_text() == "small"
    at_threshold = env.workspace / "edge.txt"
    at_threshold.write_text("q" * OVERWRITE_THRESHOLD)
    env.call("write_file", path="edge.txt", content="fine")
    assert at_threshold.read_text() == "fine"


def test_huge_diff_is_cut_and_says_so(env: Env) -> None:
    result = env.call("write_file", path="many.txt", content="".join(f"{i}\n" for i in range(5000)))
    assert "[diff cut after" in result.text and "structured_content.diff" in result.text
    added = [line for line in result.structured_content["diff"].splitlines() if line.startswith("+")]
    assert added[0] == "+++ b/many.txt" and added[1:] == [f"+{i}" for i in range(5000)]


def test_write_failure_leaves_original_and_no_temp(env: Env) -> None:
    path = env.workspace / "victim.txt"
    path.write_text("original\n")
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        error = env.fails("write_file", path="victim.txt", content="x" * 100_000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert "cannot write" in error.message
    assert path.read_text() == "original\n"
    assert leftovers(env.workspace) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_directory_leaves_original(env: Env) -> None:
    directory = env.workspace / "ro"
    directory.mkdir()
    (directory / "f.txt").write_text("original\n")
    directory.chmod(0o555)
    try:
        error = env.fails("write_file", path="ro/f.txt", content="new")
    finally:
        directory.chmod(0o755)
    assert "permission denied" in error.message
    assert (directory / "f.txt").read_text() == "original\n"
    assert leftovers(directory) == []


def test_write_directory_refused(env: Env) -> None:
    (env.workspace / "d").mkdir()
    assert "directory" in env.fails("write_file", path="d", content="x").message
    assert "directory" in env.fails("write_file", path="newdir/", content="x").message
    assert not (env.workspace / "newdir").exists()


def test_diff_of_an_edit_deep_in_a_file_has_the_right_line_numbers(env: Env) -> None:
    path = env.workspace / "long.txt"
    path.write_text("".join(f"row {i}\n" for i in range(1, 2001)))
    diff = env.call(
        "edit_file", path="long.txt", old_text="row 1000\n", new_text="row M\nrow N\n"
    ).structured_content["diff"]
    assert diff == (
        "--- a/long.txt\n+++ b/long.txt\n@@ -997,7 +997,8 @@\n row 997\n row 998\n row 999\n"
        "-row 1000\n+row M\n+row N\n row 1001\n row 1002\n row 1003\n"
    )


def test_diff_marks_missing_final_newline(env: Env) -> None:
    (env.workspace / "n.txt").write_text("a\nb")
    diff = env.call("edit_file", path="n.txt", old_text="b", new_text="c").structured_content["diff"]
    assert diff.endswith("-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n")
    assert (env.workspace / "n.txt").read_text() == "a\nc"


# ---------------------------------------------------------------------------- sandbox through the tools


def test_symlink_pointing_out_refused_for_write_and_edit(env: Env) -> None:
    victim = env.outside / "victim.txt"
    victim.write_text("safe\n")
    (env.workspace / "link.txt").symlink_to(victim)
    (env.workspace / "dirlink").symlink_to(env.outside)
    for name, args in [
        ("write_file", {"path": "link.txt", "content": "pwned"}),
        ("edit_file", {"path": "link.txt", "old_text": "safe", "new_text": "pwned"}),
        ("write_file", {"path": "dirlink/new.txt", "content": "pwned"}),
    ]:
        error = env.fails(name, SandboxDenied, **args)
        assert "outside the writable roots" in error.message
    assert victim.read_text() == "safe\n"
    assert not (env.outside / "new.txt").exists()


def test_dotdot_escape_refused(env: Env) -> None:
    error = env.fails("write_file", SandboxDenied, path="../outside/x.txt", content="x")
    assert str(env.outside / "x.txt") in error.message
    assert not (env.outside / "x.txt").exists()


def test_protected_dir_write_refused(env: Env) -> None:
    env.fails("write_file", SandboxDenied, path=str(env.state / "db.sqlite"), content="x")
    assert list(env.state.iterdir()) == []


def test_read_only_refuses_writes_but_reads(env: Env) -> None:
    (env.workspace / "f.txt").write_text("a\n")
    ro = env.with_mode(SandboxMode.READ_ONLY)
    assert "read-only" in ro.fails("write_file", SandboxDenied, path="g.txt", content="x").message
    ro.fails("edit_file", SandboxDenied, path="f.txt", old_text="a", new_text="b")
    assert ro.call("read_file", path="f.txt").structured_content["content"] == "a\n"
    assert not (env.workspace / "g.txt").exists()


def test_full_access_writes_outside(env: Env) -> None:
    full = env.with_mode(SandboxMode.FULL_ACCESS)
    full.call("write_file", path=str(env.outside / "ok.txt"), content="ok")
    assert (env.outside / "ok.txt").read_text() == "ok"


@pytest.fixture
def big_file(env: Env) -> Iterator[Path]:
    path = env.workspace / "large.log"
    with open(path, "wb") as fh:
        chunk = b"".join(b"%08d some log text here\n" % i for i in range(100_000))
        for _ in range(10):
            fh.write(chunk)
    yield path


def test_large_file_pages_from_the_middle(env: Env, big_file: Path) -> None:
    data = env.call("read_file", path="large.log", offset=777_001, limit=3).structured_content
    assert data["content"] == "".join(f"{i:08d} some log text here\n" for i in (77_000, 77_001, 77_002))
    assert data["total_lines"] == 1_000_000
    assert data["next_offset"] == 777_004


def test_beyond_scan_limit_total_is_unknown_and_pages_still_exact(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_module, "SCAN_LIMIT", 100)
    original = "".join(f"entry {i}\n" for i in range(50))
    (env.workspace / "log.txt").write_text(original)
    pages, offset = [], 1
    while True:
        result = env.call("read_file", path="log.txt", offset=offset, limit=20)
        data = result.structured_content
        assert data["total_lines"] is None
        pages.append(data["content"])
        if data["next_offset"] is None:
            break
        assert "uncounted" in result.text
        offset = data["next_offset"]
    assert "".join(pages) == original
    error = env.fails("read_file", path="log.txt", offset=60)
    assert "past the end" in error.message and "50 lines" in error.message


def test_near_miss_search_is_capped_on_huge_files(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files_module, "NEAR_MISS_MAX_LINES", 10)
    (env.workspace / "h.txt").write_text("".join(f"line {i}\n" for i in range(20)))
    error = env.fails("edit_file", path="h.txt", old_text="line 7 x", new_text="y")
    assert "too many to search" in error.message and "grep -n" in error.message
    assert error.data["near_miss"] is None


def test_control_heavy_non_utf8_is_binary(env: Env) -> None:
    (env.workspace / "ctl.dat").write_bytes(bytes([0x80, 1, 2, 3, 4, 5, 6, 0x90, 0x11, 0x12] * 50))
    assert "binary" in env.fails("read_file", path="ctl.dat").message
    assert "binary" in env.fails("edit_file", path="ctl.dat", old_text="a", new_text="b").message


def test_utf16_refused_with_conversion_hint(env: Env) -> None:
    (env.workspace / "w.txt").write_bytes("hello\n".encode("utf-16"))
    error = env.fails("read_file", path="w.txt")
    assert "UTF-16" in error.message and "iconv" in error.message


def test_mixed_line_endings_are_matched_exactly_and_kept(env: Env) -> None:
    path = env.workspace / "mixed.txt"
    path.write_bytes(b"a\r\nb\nc\r\n")
    env.call("edit_file", path="mixed.txt", old_text="b", new_text="B")
    assert path.read_bytes() == b"a\r\nB\nc\r\n"
    env.fails("edit_file", path="mixed.txt", old_text="a\nB", new_text="x")
    env.call("edit_file", path="mixed.txt", old_text="a\r\nB", new_text="x")
    assert path.read_bytes() == b"x\nc\r\n"


def test_lf_file_accepts_crlf_old_text(env: Env) -> None:
    path = env.workspace / "unix.txt"
    path.write_bytes(b"one\ntwo\n")
    env.call("edit_file", path="unix.txt", old_text="one\r\ntwo", new_text="1\r\n2")
    assert path.read_bytes() == b"1\n2\n"


def test_long_multibyte_name_fits_the_temp_file(env: Env) -> None:
    name = "漢" * 80 + ".txt"  # 244 bytes: a valid name whose temp name must stay within 255 bytes
    env.call("write_file", path=name, content="x\n")
    env.call("edit_file", path=name, old_text="x", new_text="y")
    assert (env.workspace / name).read_text() == "y\n"
    assert leftovers(env.workspace) == []


# ---------------------------------------------------------------------------- typed results and codes


def test_each_tool_declares_its_result_model_and_annotations(env: Env) -> None:
    declared = {name: (t.result_type, t.read_only, t.destructive, t.title) for name, t in env.tools.items()}
    assert declared == {
        "read_file": (ReadFileResult, True, None, "Read file"),
        "edit_file": (EditFileResult, False, True, "Edit file"),
        "write_file": (WriteFileResult, False, True, "Write file"),
    }
    assert "Promise<{ path: string" in typescript_signature(env.tools["read_file"])


def test_failures_carry_codes(env: Env) -> None:
    (env.workspace / "f.txt").write_text("a\nb\na\n")
    (env.workspace / "big.txt").write_text("x" * (OVERWRITE_THRESHOLD + 1))
    (env.workspace / "blob.bin").write_bytes(b"\x00\x01")
    (env.workspace / "d").mkdir()
    cases: list[tuple[str, dict[str, Any], ErrorCode]] = [
        ("read_file", {"path": "missing.txt"}, ErrorCode.NOT_FOUND),
        ("read_file", {"path": "d"}, ErrorCode.NOT_A_FILE),
        ("read_file", {"path": "blob.bin"}, ErrorCode.BINARY_FILE),
        ("read_file", {"path": "f.txt", "offset": 9}, ErrorCode.OUT_OF_RANGE),
        ("edit_file", {"path": "f.txt", "old_text": "zzz", "new_text": "y"}, ErrorCode.NO_MATCH),
        ("edit_file", {"path": "f.txt", "old_text": "a", "new_text": "y"}, ErrorCode.MULTIPLE_MATCHES),
        ("edit_file", {"path": "f.txt", "old_text": "b", "new_text": "b"}, ErrorCode.NO_CHANGE),
        ("edit_file", {"path": "f.txt", "old_text": "", "new_text": "b"}, ErrorCode.INVALID_ARGUMENTS),
        ("write_file", {"path": "f.txt", "content": "x", "create_only": True}, ErrorCode.ALREADY_EXISTS),
        ("write_file", {"path": "big.txt", "content": "x"}, ErrorCode.OVERWRITE_REQUIRED),
        ("write_file", {"path": "n.txt", "content": "\udc80"}, ErrorCode.UNENCODABLE),
        ("write_file", {"path": "../outside/x.txt", "content": "x"}, ErrorCode.DENIED_BY_SANDBOX),
    ]
    for name, args, code in cases:
        assert env.fails(name, **args).code is code, (name, args)
