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
from typing import Any

from codemode.adapters._fields import field
from codemode.adapters._host_tools import HostTools, ToolOutput

__all__ = ["tool_results", "tools"]


def tools(host_tools: HostTools) -> list[dict[str, Any]]:
    """The ``tools`` parameter of a Messages request."""
    return [
        {"name": s.name, "description": s.description, "input_schema": s.input_schema}
        for s in host_tools.specs()
    ]


async def tool_results(host_tools: HostTools, content: Sequence[Any]) -> list[dict[str, Any]]:
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


def _content(out: ToolOutput) -> str | list[dict[str, Any]]:
    """The text, or with images the text block (the API refuses an empty one) and image blocks."""
    if not out.images:
        return out.text
    blocks: list[dict[str, Any]] = [{"type": "text", "text": out.text}] if out.text else []
    blocks += [
        {"type": "image", "source": {"type": "base64", "media_type": i.mime_type, "data": i.data}}
        for i in out.images
    ]
    return blocks
