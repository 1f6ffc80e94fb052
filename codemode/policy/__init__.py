"""Policy in front of the tools: approvals of calls (batched), per-tool permissions, per-call
capabilities."""

from codemode.policy._approval import (
    ApprovalKind,
    ApprovalRequest,
    Approvals,
    ApproveCallback,
    Decision,
    ToolPermission,
)

__all__ = [
    "ApprovalKind",
    "ApprovalRequest",
    "Approvals",
    "ApproveCallback",
    "Decision",
    "ToolPermission",
]
