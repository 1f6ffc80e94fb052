"""Anthropic tool definitions and ``tool_result`` blocks (Messages API), no dependency.

Example:
    ```python
    tools = HostTools(host)
    reply = client.messages.create(model=..., messages=messages, tools=anthropic.tools(tools), ...)
    messages.append({"role": "assistant", "content": reply.content})
    messages.append({"role": "user", "content": await anthropic.tool_results(tools, reply.content)})
    ```

The ``tool_use`` blocks of one reply run concurrently; the results keep their order and carry
``is_error``. A result with images (``image()`` in a program, or a mounted server's tool that
returned one) has a content list: its text block, then an ``image`` block (base64 source) each.
Blocks may be dicts or the ``anthropic`` SDK's objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypedDict

from codemode.adapters._fields import field
from codemode.adapters._host_tools import HostTools, ToolOutput

__all__ = ["tool_results", "tools"]


class ToolParam(TypedDict):
    """One entry of a Messages request's ``tools`` (``input_schema``: a JSON Schema)."""

    name: str
    description: str
    input_schema: dict[str, object]


class TextBlock(TypedDict):
    """A text block."""

    type: Literal["text"]
    text: str


class ImageSource(TypedDict):
    """An image's base64 data."""

    type: Literal["base64"]
    media_type: str
    data: str


class ImageBlock(TypedDict):
    """An image block."""

    type: Literal["image"]
    source: ImageSource


class ToolResultBlock(TypedDict):
    """A ``tool_result`` block: one call's text, or its text and images."""

    type: Literal["tool_result"]
    tool_use_id: Any  # the call's id, as the message gave it
    content: str | list[TextBlock | ImageBlock]
    is_error: bool


def tools(host_tools: HostTools) -> list[ToolParam]:
    """The ``tools`` parameter of a Messages request."""
    return [
        {"name": s.name, "description": s.description, "input_schema": s.input_schema}
        for s in host_tools.specs()
    ]


async def tool_results(host_tools: HostTools, content: Sequence[Any]) -> list[ToolResultBlock]:
    """One ``tool_result`` block per ``tool_use`` block of an assistant message's ``content``:
    the content of the next user message."""
    uses = [block for block in content if field(block, "type") == "tool_use"]
    outputs = await host_tools.call_all([(str(field(b, "name")), field(b, "input")) for b in uses])
    return [
        {
            "type": "tool_result",
            "tool_use_id": field(b, "id"),
            "content": _content(out),
            "is_error": out.is_error,
        }
        for b, out in zip(uses, outputs, strict=True)
    ]


def _content(out: ToolOutput) -> str | list[TextBlock | ImageBlock]:
    """The text, or with images the text block (the API refuses an empty one) and image blocks."""
    if not out.images:
        return out.text
    blocks: list[TextBlock | ImageBlock] = [{"type": "text", "text": out.text}] if out.text else []
    blocks += [
        {"type": "image", "source": {"type": "base64", "media_type": i.mime_type, "data": i.data}}
        for i in out.images
    ]
    return blocks
