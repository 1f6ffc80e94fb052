"""Tools: the registry, the tool contract, and the built-in tools."""

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

if TYPE_CHECKING:
    from codemode.tools._builtin import builtin_extensions
    from codemode.tools._model import (
        Extension,
        LazyExtension,
        ProgramScope,
        TextContent,
        Tool,
        ToolContext,
        ToolFailure,
        ToolResult,
        failure_of,
        make_tool,
        to_tool_result,
        tool,
    )
    from codemode.tools._registry import GUIDE_INLINE_CHARS, ArgumentProblem, ToolDescription, ToolRegistry
    from codemode.tools._signature import schema_to_ts, typescript_signature
    from codemode.tools._turns import Place, WriterTurn

if not TYPE_CHECKING:  # each name loads its module at first use (codemode._lazy)
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._builtin": ("builtin_extensions",),
            "._model": (
                "Extension",
                "LazyExtension",
                "ProgramScope",
                "TextContent",
                "Tool",
                "ToolContext",
                "ToolFailure",
                "ToolResult",
                "failure_of",
                "make_tool",
                "to_tool_result",
                "tool",
            ),
            "._registry": (
                "GUIDE_INLINE_CHARS",
                "ArgumentProblem",
                "ToolDescription",
                "ToolRegistry",
            ),
            "._signature": (
                "schema_to_ts",
                "typescript_signature",
            ),
            "._turns": (
                "Place",
                "WriterTurn",
            ),
        },
    )

__all__ = [
    "GUIDE_INLINE_CHARS",
    "ArgumentProblem",
    "Extension",
    "LazyExtension",
    "Place",
    "ProgramScope",
    "TextContent",
    "Tool",
    "ToolContext",
    "ToolDescription",
    "ToolFailure",
    "ToolRegistry",
    "ToolResult",
    "WriterTurn",
    "builtin_extensions",
    "failure_of",
    "make_tool",
    "schema_to_ts",
    "to_tool_result",
    "tool",
    "typescript_signature",
]
