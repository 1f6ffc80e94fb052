"""Tools: the registry, the tool contract, and the built-in tools."""

from codemode.tools._model import (
    Extension,
    LazyExtension,
    ProgramScope,
    TextContent,
    Tool,
    ToolContext,
    ToolResult,
    make_tool,
    to_tool_result,
    tool,
)
from codemode.tools._registry import ArgumentProblem, ToolRegistry
from codemode.tools._signature import schema_to_ts, typescript_signature

__all__ = [
    "ArgumentProblem",
    "Extension",
    "LazyExtension",
    "ProgramScope",
    "TextContent",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "make_tool",
    "schema_to_ts",
    "to_tool_result",
    "tool",
    "typescript_signature",
]
