"""Policy in front of the tools: the command policy (argv, every command of a shell script
checked, watchers, masked values), protected deletes (the trash), approvals of calls (batched),
per-tool permissions, per-call capabilities."""

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

if TYPE_CHECKING:
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

if not TYPE_CHECKING:  # each name loads its module at first use (codemode._lazy)
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._approval": (
                "ApprovalKind",
                "ApprovalRequest",
                "Approvals",
                "ApproveCallback",
                "CommandAsk",
                "CommandsHook",
                "Decision",
                "ToolPermission",
                "record_approval",
            ),
            "._commands": (
                "REDACTION_MARKER",
                "CommandPolicy",
                "CommandVerdict",
                "Verdict",
            ),
            "._guard": (
                "ApprovalCommands",
                "CommandGuard",
                "approval_commands",
                "plain_argv",
            ),
            "._trash": (
                "Trash",
                "TrashEntry",
            ),
        },
    )

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
