"""An upstream ``CallToolResult`` as codemode's `ToolResult`, and result shapes learned from data.

Producer data (what ``await tools.server.tool()`` resolves with): ``structuredContent``; else
one text block that parses as JSON, parsed; else the text. Images, audio and embedded resources
become descriptors (``{type, mimeType, bytes, ref}``) whose bytes are archived, never printed;
a result with any of them resolves with the list of its blocks. A program shows such an image
to the model with ``image(block)``; a direct call's result carries it as image content (both
read it back by ref, `codemode._images.archived_image`). ``isError`` raises a `ToolError`
carrying the server's text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, Required, TypedDict

from genson import SchemaBuilder  # type: ignore[import-untyped]
from mcp import types

from codemode.errors import ErrorCode, ToolError
from codemode.state import Archive, redact_json
from codemode.tools._model import TextContent, ToolResult

__all__ = ["observed_schema", "to_result"]

_ERROR_TEXT_MAX = 4000


class ContentBlock(TypedDict, total=False):
    """One content block of a result with binary or resource blocks, as the program gets it:
    ``text``; ``image``, ``audio`` or ``resource`` (archived: ``ref`` and its ``bytes``);
    ``resource_link``; or any other type (its name only)."""

    type: Required[str]
    text: str
    uri: str
    name: str
    mimeType: str | None
    bytes: int
    ref: str


def _archive_bytes(archive: Archive, data: bytes, kind: str, session: str) -> str:
    return archive.put(data, kind=kind, session_id=session).ref


def _block(block: Any, archive: Archive, session: str, redact: Callable[[str], str]) -> ContentBlock:
    """One content block as JSON data; binary and resource payloads archived (a ref)."""
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": redact(block.text)}
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        data = base64.b64decode(block.data)
        ref = _archive_bytes(archive, data, f"mcp-{kind}", session)
        return {"type": kind, "mimeType": block.mime_type, "bytes": len(data), "ref": ref}
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            payload = redact(res.text).encode("utf-8", "surrogatepass")
        else:
            payload = base64.b64decode(res.blob)
        ref = _archive_bytes(archive, payload, "mcp-resource", session)
        return {
            "type": "resource",
            "uri": str(res.uri),
            "mimeType": res.mime_type,
            "bytes": len(payload),
            "ref": ref,
        }
    if isinstance(block, types.ResourceLink):
        return {
            "type": "resource_link",
            "uri": str(block.uri),
            "name": block.name,
            "mimeType": block.mime_type,
        }
    return {"type": str(getattr(block, "type", "unknown"))}


def to_result(
    result: types.CallToolResult,
    *,
    label: str,
    archive: Archive,
    session: str,
    redact: Callable[[str], str],
) -> tuple[ToolResult, bool]:
    """The codemode result of one upstream call, and whether its data is structured (JSON).

    Args:
        result: What the server answered.
        label: ``server.tool``, for messages.
        archive: Where binary and resource payloads go.
        session: Their owner.
        redact: Applied to every string the server sent (its configured secrets).

    Raises:
        ToolError: The server flagged the result ``isError`` (code ``upstream_error``; the
            message is the server's text).
    """
    texts = [b.text for b in result.content if isinstance(b, types.TextContent)]
    if result.is_error:
        text = redact("\n".join(texts).strip()) or "(the server gave no message)"
        if len(text) > _ERROR_TEXT_MAX:
            text = text[:_ERROR_TEXT_MAX] + "..."
        raise ToolError(
            f"the MCP server reported an error: {text}",
            {"tool": label},
            code=ErrorCode.UPSTREAM_ERROR,
        )
    if result.structured_content is not None:
        data = redact_json(result.structured_content, redact)
        shown = redact("\n".join(texts)) if texts else json.dumps(data, ensure_ascii=False)
        return ToolResult(content=[TextContent(text=shown)], structured_content=data), True
    only_text = len(texts) == len(result.content)
    if only_text and len(texts) == 1:
        text = redact(texts[0])
        try:
            parsed = json.loads(text)
        except ValueError:
            return ToolResult(content=[TextContent(text=text)]), False
        return ToolResult(content=[TextContent(text=text)], structured_content=parsed), True
    if only_text:
        return ToolResult(content=[TextContent(text=redact("\n".join(texts)))]), False
    blocks = [_block(b, archive, session, redact) for b in result.content]
    shown = "\n".join(b["text"] if b["type"] == "text" else json.dumps(b, ensure_ascii=False) for b in blocks)
    return ToolResult(content=[TextContent(text=shown)], structured_content=blocks), False


def observed_schema(value: Any) -> dict[str, object]:
    """A JSON Schema of one observed value (genson), without its ``$schema`` line."""
    builder = SchemaBuilder(schema_uri=None)
    builder.add_object(value)
    schema: dict[str, object] = builder.to_schema()
    schema.pop("$schema", None)
    return schema
