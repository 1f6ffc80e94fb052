"""codemode: Code Mode for LLM agents.

The model writes one JavaScript program; it runs in a QuickJS sandbox, calls the agent's
tools as ``await tools.<name>(args)``, and only what it prints comes back, cut to a token
budget (the rest archived behind a recovery reference).
"""

import typing as _typing

from codemode._lazy import lazy_exports as _lazy_exports
from codemode._version import __version__

if _typing.TYPE_CHECKING:
    from codemode._progress import Progress
    from codemode._results import CallResult, HostConfig, RunError, RunImage, RunResult, Usage
    from codemode.errors import (
        CodemodeError,
        ErrorCode,
        HostFault,
        ProcessNotFound,
        SandboxDenied,
        SandboxUnavailable,
        StateDirError,
        ToolError,
        UnknownRefError,
        UserError,
    )
    from codemode.host import Host, run_code
    from codemode.policy import ApprovalRequest, CommandPolicy, Decision
    from codemode.sandbox import SandboxMode, SandboxPolicy
    from codemode.tools import Extension, TextContent, Tool, ToolContext, ToolResult, make_tool, tool
    from codemode.tools.bash import Notification
    from codemode.tools.upstream import McpServerConfig, load_mcp_config

# Each public name is imported at its first use (codemode._lazy), so that a command that needs
# a few of them (`codemode run` loads the engine before the host, to start its zygote early)
# does not pay for all of them.
if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "codemode.policy": (
                "ApprovalRequest",
                "CommandPolicy",
                "Decision",
            ),
            "codemode._results": (
                "CallResult",
                "HostConfig",
                "RunError",
                "RunImage",
                "RunResult",
                "Usage",
            ),
            "codemode.errors": (
                "CodemodeError",
                "ErrorCode",
                "HostFault",
                "ProcessNotFound",
                "SandboxDenied",
                "SandboxUnavailable",
                "StateDirError",
                "ToolError",
                "UnknownRefError",
                "UserError",
            ),
            "codemode.tools": (
                "Extension",
                "TextContent",
                "Tool",
                "ToolContext",
                "ToolResult",
                "make_tool",
                "tool",
            ),
            "codemode.host": ("Host",),
            "codemode.tools.upstream": (
                "McpServerConfig",
                "load_mcp_config",
            ),
            "codemode.tools.bash": ("Notification",),
            "codemode._progress": ("Progress",),
            "codemode.sandbox": (
                "SandboxMode",
                "SandboxPolicy",
            ),
            "codemode._sync": ("run_code",),
        },
    )


__all__ = [
    "ApprovalRequest",
    "CallResult",
    "CodemodeError",
    "CommandPolicy",
    "Decision",
    "ErrorCode",
    "Extension",
    "Host",
    "HostConfig",
    "HostFault",
    "McpServerConfig",
    "Notification",
    "ProcessNotFound",
    "Progress",
    "RunError",
    "RunImage",
    "RunResult",
    "SandboxDenied",
    "SandboxMode",
    "SandboxPolicy",
    "SandboxUnavailable",
    "StateDirError",
    "TextContent",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "UnknownRefError",
    "Usage",
    "UserError",
    "__version__",
    "load_mcp_config",
    "make_tool",
    "run_code",
    "tool",
]
