"""``image(data, mimeType)``: a program shows the model an image (base64 text or bytes), checked
against the type table and its magic bytes, capped, counted in the budget and recorded."""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from codemode import Host

pytestmark = pytest.mark.anyio


def _png(width: int, height: int) -> bytes:
    """A PNG's signature and IHDR chunk (what the magic check and the size read look at)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0"


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    (tmp_path / "ws").mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state") as opened:
        yield opened


async def test_base64_and_bytes_reach_the_result_with_their_cost(host: Host) -> None:
    png = _png(100, 75)
    b64 = base64.b64encode(png).decode()
    program = (
        f"image('{b64}', 'image/png');"
        f"const u = new Uint8Array([{','.join(map(str, png))}]);"
        "image(u, 'image/png'); image(u.buffer, 'image/png'); print('shown')"
    )
    result = await host.run_code(program, call_id="img1")
    assert result.ok, result.text
    assert [(i.mime_type, i.data, i.tokens) for i in result.images] == [("image/png", b64, 10)] * 3
    assert result.usage.output_tokens >= 30
    replayed = await host.run_code(program, call_id="img1")
    assert replayed.images == result.images and replayed.text == result.text


@pytest.mark.parametrize(
    ("call", "code", "words"),
    [
        ("image(PNG, 'image/bmp')", "invalid_arguments", "mimeType must be one of image/png"),
        ("image(PNG, 'image/jpeg')", "invalid_arguments", "not a image/jpeg image"),
        ("image('not base64!', 'image/png')", "invalid_arguments", "not base64"),
        ("image(42, 'image/png')", "invalid_arguments", "got number"),
        ("image(new Uint8Array(6 * 1024 * 1024), 'image/png')", "too_large", "over the 5 MiB cap"),
        ("for (let i = 0; i < 9; i++) image(PNG, 'image/png')", "too_large", "at most 8 images"),
    ],
)
async def test_mistakes_are_coded_errors(host: Host, call: str, code: str, words: str) -> None:
    b64 = base64.b64encode(_png(4, 4)).decode()
    result = await host.run_code(
        f"const PNG = '{b64}'; try {{ {call} }} catch (e) {{ print(e.code, e.message) }}"
    )
    assert result.ok, result.text
    assert result.text.startswith(code) and words in result.text, result.text


async def test_an_image_over_the_budget_is_archived_and_named(host: Host) -> None:
    big = _png(2000, 2000)  # 1,600 tokens: more than half of a 1,000-token budget
    small = _png(10, 10)
    program = (
        f"image('{base64.b64encode(big).decode()}', 'image/png');"
        f"image('{base64.b64encode(small).decode()}', 'image/png')"
    )
    result = await host.run_code(program, max_output_tokens=1000)
    assert [i.tokens for i in result.images] == [1]
    (notice,) = [n for n in result.notices if "image 1" in n]
    ref = notice.split("archived as ")[1].split(";")[0]
    assert host.archive.read(ref, limit=1 << 20, session_id=result.session_id).data == big


async def test_an_image_block_a_tool_returned_is_shown_by_its_ref(host: Host) -> None:
    png = _png(30, 25)
    ref = host.archive.put(png, kind="mcp-image", session_id=host.config.session_id).ref
    block = f"{{type: 'image', mimeType: 'image/png', bytes: {len(png)}, ref: '{ref}'}}"
    result = await host.run_code(f"image({block}); print('shown')")
    assert result.ok, result.text
    assert [(i.mime_type, i.data, i.tokens) for i in result.images] == [
        ("image/png", base64.b64encode(png).decode(), 1)
    ]


@pytest.mark.parametrize(
    ("owner", "stored", "mime", "code", "words"),
    [
        ("other", _png(4, 4), "image/png", "unknown_ref", "no archived text"),
        ("mine", b"plain text, not an image", "image/png", "invalid_arguments", "not a image/png image"),
        ("mine", _png(4, 4), "image/bmp", "invalid_arguments", "mimeType must be one of"),
        ("mine", _png(4, 4) + bytes(5 * 1024 * 1024), "image/png", "too_large", "5 MiB"),
    ],
)
async def test_an_image_block_that_cannot_be_shown_is_a_coded_error(
    host: Host, owner: str, stored: bytes, mime: str, code: str, words: str
) -> None:
    session = host.config.session_id if owner == "mine" else "someone-else"
    ref = host.archive.put(stored, kind="mcp-image", session_id=session).ref
    result = await host.run_code(
        f"try {{ image({{type: 'image', mimeType: '{mime}', ref: '{ref}'}}) }}"
        " catch (e) { print(e.code, e.message) }"
    )
    assert result.ok, result.text
    assert result.text.startswith(code) and words in result.text, result.text
    assert result.images == []


async def test_a_list_of_blocks_is_refused_with_a_hint(host: Host) -> None:
    result = await host.run_code(
        "try { image([{type: 'image', ref: 'ar_x'}]) } catch (e) { print(e.code, e.message) }"
    )
    assert "invalid_arguments" in result.text and "pass one image block" in result.text, result.text
