"""Policy in front of the tools: the command policy (argv, every command of a shell script
checked, watchers, masked values), protected deletes (the trash), approvals of calls (batched),
per-tool permissions, per-call capabilities."""

from codemode.policy._approval import (
    ApprovalKind,
    ApprovalRequest,
    Approvals,
    ApproveCallback,
    CommandAsk,
    CommandsHook,
    Decision,
    ToolPermission,
    record_approval,
)
from codemode.policy._commands import REDACTION_MARKER, CommandPolicy, CommandVerdict, Verdict
from codemode.policy._guard import ApprovalCommands, CommandGuard, approval_commands, plain_argv
from codemode.policy._trash import Trash, TrashEntry

__all__ = [
    "REDACTION_MARKER",
    "ApprovalCommands",
    "ApprovalKind",
    "ApprovalRequest",
    "Approvals",
    "ApproveCallback",
    "CommandAsk",
    "CommandGuard",
    "CommandPolicy",
    "CommandVerdict",
    "CommandsHook",
    "Decision",
    "ToolPermission",
    "Trash",
    "TrashEntry",
    "Verdict",
    "approval_commands",
    "plain_argv",
    "record_approval",
]
