"""Anthropic tool definitions and ``tool_result`` blocks (Messages API), no dependency.

Example:
    ```python
    tools = HostTools(host)
    reply = client.messages.create(model=..., messages=messages, tools=anthropic.tools(tools), ...)
    messages.append({"role": "assistant", "content": reply.content})
    messages.append({"role": "user", "content": await anthropic.tool_results(tools, reply.content)})
    ```

The ``tool_use`` blocks of one reply run concurrently; the results keep their order and carry
``is_error``. Blocks may be dicts or the ``anthropic`` SDK's objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from codemode.adapters._fields import field
from codemode.adapters._host_tools import HostTools

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
        {"type": "tool_result", "tool_use_id": field(b, "id"), "content": out.text, "is_error": out.is_error}
        for b, out in zip(uses, outputs, strict=True)
    ]
