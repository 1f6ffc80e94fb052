"""LangChain tools: ``run_code`` plus the direct tools (``pip install 'codemode[langchain]'``).

Example:
    ```python
    async with Host(workspace=".") as host:
        tools = codemode_tools(HostTools(host))
        model = ChatOpenAI(model="gpt-5").bind_tools(tools)
        reply = await model.ainvoke(messages)
        for call in reply.tool_calls:
            messages.append(await by_name[call["name"]].ainvoke(call))   # a ToolMessage
    ```

The tools are async (``ainvoke``; the Host is). A failed call gives a ``ToolMessage`` with
``status="error"`` and codemode's text. A call that shows images gives a ``ToolMessage`` whose
content is a list: a text block, then a standard ``image`` block (base64, mime_type) each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypedDict

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from codemode.adapters._host_tools import HostTools, ToolSpec

__all__ = ["codemode_tools"]


def codemode_tools(tools: HostTools) -> list[BaseTool]:
    """The tools as LangChain ``StructuredTool`` s (their JSON schemas are codemode's own)."""
    return [_tool(tools, spec) for spec in tools.specs()]


class _TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class _ImageBlock(TypedDict):
    type: Literal["image"]
    base64: str
    mime_type: str


_Block = _TextBlock | _ImageBlock
"""A LangChain standard content block: text, or a base64 image."""


def _tool(tools: HostTools, spec: ToolSpec) -> BaseTool:
    def calling(name: str) -> Callable[..., Awaitable[str | list[_Block]]]:
        async def call(**arguments: Any) -> str | list[_Block]:
            output = await tools.call(name, arguments)
            if output.is_error:
                raise ToolException(output.text)
            if not output.images:
                return output.text
            blocks: list[_Block] = [{"type": "text", "text": output.text}] if output.text else []
            return blocks + [
                {"type": "image", "base64": i.data, "mime_type": i.mime_type} for i in output.images
            ]

        return call

    return StructuredTool(
        name=spec.name,
        description=spec.description,
        args_schema=spec.input_schema,
        coroutine=calling(spec.name),
        handle_tool_error=True,
    )
