"""codemode: Code Mode for LLM agents.

The model writes one JavaScript program; it runs in a QuickJS sandbox, calls the agent's
tools as ``await tools.<name>(args)``, and only what it prints comes back, cut to a token
budget (the rest archived behind a recovery reference).
"""

import importlib as _importlib
import typing as _typing

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

# Where each public name lives: imported at its first use (PEP 562), so that a command that
# needs a few of them (`codemode run` loads the engine before the host, to start its zygote
# early) does not pay for all of them.
_HOMES = {
    "ApprovalRequest": "codemode.policy",
    "CallResult": "codemode._results",
    "CodemodeError": "codemode.errors",
    "CommandPolicy": "codemode.policy",
    "Decision": "codemode.policy",
    "ErrorCode": "codemode.errors",
    "Extension": "codemode.tools",
    "Host": "codemode.host",
    "HostConfig": "codemode._results",
    "HostFault": "codemode.errors",
    "McpServerConfig": "codemode.tools.upstream",
    "Notification": "codemode.tools.bash",
    "ProcessNotFound": "codemode.errors",
    "Progress": "codemode._progress",
    "RunError": "codemode._results",
    "RunImage": "codemode._results",
    "RunResult": "codemode._results",
    "SandboxDenied": "codemode.errors",
    "SandboxMode": "codemode.sandbox",
    "SandboxPolicy": "codemode.sandbox",
    "SandboxUnavailable": "codemode.errors",
    "StateDirError": "codemode.errors",
    "TextContent": "codemode.tools",
    "Tool": "codemode.tools",
    "ToolContext": "codemode.tools",
    "ToolError": "codemode.errors",
    "ToolResult": "codemode.tools",
    "UnknownRefError": "codemode.errors",
    "Usage": "codemode._results",
    "UserError": "codemode.errors",
    "load_mcp_config": "codemode.tools.upstream",
    "make_tool": "codemode.tools",
    "run_code": "codemode._sync",
    "tool": "codemode.tools",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'codemode' has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # found here from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


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
