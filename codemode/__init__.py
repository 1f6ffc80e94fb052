"""codemode: Code Mode for LLM agents.

The model writes one JavaScript program; it runs in a QuickJS sandbox, calls the agent's
tools as ``await tools.<name>(args)``, and only what it prints comes back, cut to a token
budget (the rest archived behind a recovery reference).
"""

from codemode._progress import Progress
from codemode._results import CallResult, HostConfig, RunError, RunImage, RunResult, Usage
from codemode._version import __version__
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
