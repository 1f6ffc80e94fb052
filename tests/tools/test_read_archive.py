"""read_archive tool over a real archive: exact concatenation, UTF-8 boundaries, binary, hints."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codemode.errors import ErrorCode, ToolError, UnknownRefError
from codemode.sandbox._policy import SandboxPolicy
from codemode.state import COMPACT_KEEP_BYTES, Redactor, State
from codemode.tools._model import ToolContext, ToolResult
from codemode.tools._read_archive import ReadArchiveArgs, ReadArchiveResult, read_archive_tool

TOOL = read_archive_tool()


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ToolContext]:
    archive_state = State(tmp_path / "state", Redactor(environ={}))
    archive = archive_state.archive
    yield ToolContext(session_id="s", workspace=tmp_path, policy=SandboxPolicy(), archive=archive)
    archive_state.close()


def call(ctx: ToolContext, **args: Any) -> ToolResult:
    result = TOOL.handler(**TOOL.bind(TOOL.parse(args), ctx))
    assert isinstance(result, ToolResult)
    assert TOOL.check_result(result) is None, "the result matches ReadArchiveResult"
    return result


def read_pages(ctx: ToolContext, ref: str, limit: int) -> tuple[bytes, int]:
    out, offset, pages = b"", 0, 0
    while True:
        res = call(ctx, ref=ref, offset=offset, limit=limit)
        sc = res.structured_content
        assert sc["offset"] == offset
        chunk = sc["text"].encode() if sc["encoding"] == "utf-8" else base64.b64decode(sc["text"])
        out += chunk
        assert sc["next_offset"] == offset + len(chunk)
        offset = sc["next_offset"]
        pages += 1
        if sc["eof"]:
            return out, pages
        assert sc["next_offset"] > sc["offset"]


def test_tool_shape() -> None:
    assert TOOL.name == "read_archive" and TOOL.context_param == "ctx" and not TOOL.is_async
    props = TOOL.input_schema["properties"]
    assert set(props) == {"ref", "offset", "limit"}
    assert props["limit"]["maximum"] == 1048576 and props["offset"]["minimum"] == 0


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 10, 4093, 65536])
def test_concatenation_exact_over_cjk_and_emoji(ctx: ToolContext, limit: int) -> None:
    text = "".join(f"{i}: 数字のテキスト 🎉👩‍👩‍👧 ünïcödé\n" for i in range(200 if limit < 100 else 3000))
    ref = ctx.archive.put(text, kind="output", session_id="s")
    data, pages = read_pages(ctx, ref.ref, limit)
    assert data == text.encode()
    assert pages >= len(data) // limit // 4  # a split character costs at most 3 bytes of a page


def test_page_text_and_hint(ctx: ToolContext) -> None:
    ref = ctx.archive.put("a" * 100 + "é" + "b" * 50, kind="output", session_id="s")
    res = call(ctx, ref=ref.ref, limit=101)  # would split "é"
    sc = res.structured_content
    assert sc["text"] == "a" * 100 and sc["next_offset"] == 100 and not sc["eof"]
    assert sc["total_bytes"] == 152 and sc["retained_from"] == 0
    hint = res.text.splitlines()[-1]
    assert hint == f'[52 more bytes: read_archive({{ref: "{ref.ref}", offset: 100, limit: 101}}) reads on]'
    last = call(ctx, ref=ref.ref, offset=100)
    assert last.structured_content["eof"] and last.text == "é" + "b" * 50


def test_binary_comes_back_base64(ctx: ToolContext) -> None:
    blob = bytes(range(256)) * 10
    ref = ctx.archive.put(blob, kind="blob", session_id="s")
    res = call(ctx, ref=ref.ref, limit=1000)
    assert res.structured_content["encoding"] == "base64"
    assert base64.b64decode(res.structured_content["text"]) == blob[:1000]
    data, _ = read_pages(ctx, ref.ref, 777)
    assert data == blob


def test_unknown_ref_message(ctx: ToolContext) -> None:
    with pytest.raises(UnknownRefError, match="truncation notice"):
        call(ctx, ref="ar_" + "q" * 20)


def test_bad_arguments_are_refused_with_their_path() -> None:
    for args, path in [
        ({"ref": "ar_x", "limit": 0}, "$.limit"),
        ({"ref": "ar_x", "offset": -1}, "$.offset"),
        ({"ref": "ar_x", "extra": 1}, "$.extra"),
    ]:
        with pytest.raises(ToolError) as info:
            TOOL.parse(args)
        assert info.value.code is ErrorCode.INVALID_ARGUMENTS and info.value.data["path"] == path


def test_null_for_an_optional_argument_means_absent() -> None:
    parsed = TOOL.parse({"ref": "ar_x", "offset": None, "limit": None})
    assert parsed == ReadArchiveArgs(ref="ar_x")
    with pytest.raises(ToolError, match=r"at \$\.ref: Input should be a valid string \(got null\)"):
        TOOL.parse({"ref": None})


def test_the_result_type_is_declared() -> None:
    assert TOOL.read_only and TOOL.title == "Read archive"
    assert TOOL.output_schema is not None and "next_offset" in TOOL.output_schema["required"]
    assert ReadArchiveResult.model_json_schema(by_alias=True)["properties"]["dropped"]


def test_compacted_log_says_where_it_resumes(ctx: ToolContext) -> None:
    log = ctx.archive.open_log(kind="log", session_id="s")
    log.write(b"z" * (COMPACT_KEEP_BYTES + 5000))
    log.close()
    ctx.archive.maintain()
    res = call(ctx, ref=log.ref, offset=0, limit=10)
    sc = res.structured_content
    assert sc["retained_from"] == 5000 and sc["offset"] == 5000 and sc["next_offset"] == 5010
    assert sc["dropped"] == {"from": 0, "to": 5000}
    assert re.match(
        r"\[bytes before offset 5,000 were compacted away; showing from 5,000\]\nzzzzzzzzzz\n", res.text
    )


@pytest.mark.parametrize("owner", ["other", None])
def test_another_sessions_ref_is_unknown_in_the_same_words(ctx: ToolContext, owner: str | None) -> None:
    # Issue 8, item 6: session B read session A's overflow by its ref.
    theirs = ctx.archive.put("their secret", kind="output", session_id=owner)
    made_up = "ar_" + "q" * 20
    with pytest.raises(UnknownRefError) as refused:
        call(ctx, ref=theirs.ref)
    with pytest.raises(UnknownRefError) as never:
        call(ctx, ref=made_up)
    assert refused.value.message.replace(theirs.ref, "REF") == never.value.message.replace(made_up, "REF")
    assert refused.value.data == {"ref": theirs.ref}
    # Their log too, also while it is still being written.
    log = ctx.archive.open_log(kind="log", session_id=owner, redact=False)
    log.write(b"their log\n")
    with pytest.raises(UnknownRefError, match="no archived text"):
        call(ctx, ref=log.ref)
    log.close()
    with pytest.raises(UnknownRefError, match="no archived text"):
        call(ctx, ref=log.ref)
    # The operator (no session) reads any entry.
    assert ctx.archive.read(theirs.ref).data == b"their secret"
    assert ctx.archive.read(log.ref).data == b"their log\n"


def test_a_capped_log_says_which_bytes_were_not_kept(tmp_path: Path) -> None:
    archive_state = State(tmp_path / "state", Redactor(environ={}), log_cap_bytes=1 << 20)
    archive = archive_state.archive
    ctx = ToolContext(session_id="s", workspace=tmp_path, policy=SandboxPolicy(), archive=archive)
    try:
        log = archive.open_log(kind="log", session_id="s", redact=False)
        for i in range(8):
            log.write(str(i).encode() * (1 << 20))
        ref = log.close()
        if ref.dropped is None:
            pytest.skip("the file system cannot punch holes")
        start, end = ref.dropped
        assert start == 256 * 1024
        res = call(ctx, ref=ref.ref, offset=start + 5, limit=10)
        sc = res.structured_content
        assert sc["dropped"] == {"from": start + 5, "to": end} and sc["offset"] == end
        assert sc["text"] == "7" * 10 and sc["retained_from"] == 0
        assert res.text.startswith(
            f"[bytes {start + 5:,} to {end:,} of this log were not kept (it outgrew its cap, which keeps "
            f"its head and its tail); showing from {end:,}]\n7777777777\n"
        )
        head = call(ctx, ref=ref.ref, offset=0, limit=10)
        assert head.structured_content["dropped"] is None and head.structured_content["text"] == "0" * 10
    finally:
        archive_state.close()
