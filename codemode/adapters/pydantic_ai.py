"""A pydantic-ai toolset: ``run_code`` plus the direct tools (``pip install 'codemode[pydantic-ai]'``).

Example:
    ```python
    async with Host(workspace=".") as host:
        agent = Agent("openai:gpt-5", toolsets=[codemode_toolset(HostTools(host))])
        result = await agent.run("How many TODOs are in src/?")
    ```

A failed call (a program that threw, a tool that refused) reaches the model as a failed tool
result with codemode's text (`ToolFailed`: the model adapts; no retry budget is spent). A call
that shows images returns a ``ToolReturn``: the text, and a ``BinaryContent`` each.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import FunctionToolset, Tool
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import BinaryContent, ToolReturn

from codemode.adapters._host_tools import HostTools, ToolSpec

__all__ = ["codemode_toolset"]


def codemode_toolset(tools: HostTools) -> FunctionToolset[Any]:
    """The tools as a pydantic-ai ``FunctionToolset`` (their schemas are codemode's own)."""
    return FunctionToolset([_tool(tools, spec) for spec in tools.specs()])


def _tool(tools: HostTools, spec: ToolSpec) -> Tool[Any]:
    def calling(name: str) -> Callable[..., Awaitable[str | ToolReturn]]:
        async def call(**arguments: Any) -> str | ToolReturn:
            output = await tools.call(name, arguments)
            if output.is_error:
                raise ToolFailed(output.text)
            if not output.images:
                return output.text
            images = [
                BinaryContent(data=base64.b64decode(i.data), media_type=i.mime_type) for i in output.images
            ]
            return ToolReturn(return_value=output.text, content=images)

        return call

    return Tool.from_schema(calling(spec.name), spec.name, spec.description, spec.input_schema)
