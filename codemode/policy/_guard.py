"""The host's command gate: the command policy and the trash in front of every bash run."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codemode.errors import ErrorCode, ToolError
from codemode.policy._approval import CommandAsk
from codemode.policy._commands import REDACTION_MARKER, CommandPolicy, Verdict
from codemode.policy._escalation import escalation
from codemode.policy._trash import Trash, install_rm_shim
from codemode.tools import Tool, ToolContext
from codemode.tools.bash import AfterRun, CommandPlan

__all__ = ["ApprovalCommands", "CommandGuard", "approval_commands", "plain_argv"]

# A command line whose words hold none of these characters means the same to bash as its words
# split on spaces: it runs without a shell (see `plain_argv`).
_PLAIN = re.compile(r"[A-Za-z0-9_./:=,+@%-]+(?: +[A-Za-z0-9_./:=,+@%-]+)*")
# bash's builtins and keywords: such a first word needs the shell.
_SHELL_WORDS = frozenset(
    ". : [ alias bg bind break builtin caller cd command compgen complete compopt continue declare dirs "
    "disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill let local "
    "logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt source suspend "
    "test times trap true type typeset ulimit umask unalias unset wait if then else elif fi case esac "
    "for select while until do done in function time coproc".split()
)


def plain_argv(command: str) -> tuple[str, ...] | None:
    """The argv of a command line bash would run as its words split on spaces, or None.

    A line qualifies when it holds only letters, digits, spaces and ``_ . / : = , + @ % -``
    (no quote, escape, expansion, glob, redirection, list, comment, ``~``, tab or newline),
    its first word is no builtin or keyword and no ``NAME=value`` assignment.
    """
    text = command.strip(" ")
    if not _PLAIN.fullmatch(text):
        return None
    words = tuple(text.split())
    if words[0] in _SHELL_WORDS or "=" in words[0]:
        return None
    return words


class CommandGuard:
    """The `CommandGate` the host gives the process manager.

    Args:
        policy: The host's command policy.
        trash: The workspace's trash (protected deletes), or None.
    """

    def __init__(self, policy: CommandPolicy, trash: Trash | None) -> None:
        self.policy = policy
        self.trash = trash if policy.protected_deletes else None
        self.serialize_writers = policy.serialize_writers

    def plan(
        self,
        *,
        command: str | None,
        argv: Sequence[str] | None,
        cwd: Path,
        background: bool,
        ctx: ToolContext,
    ) -> CommandPlan:
        """Check one run (see `CommandPolicy.check`) and say how it starts.

        Raises:
            ToolError: The policy refuses it.
        """
        verdict = self.policy.check(
            command=command, argv=argv, cwd=cwd, workspace=ctx.workspace, background=background
        )
        # ASK: the host's approvals asked about this run before the call reached the tool
        # (Approvals' ``commands`` hook, `approval_commands`), and it was allowed.
        if verdict.verdict is Verdict.DENY:
            code = verdict.code or ErrorCode.DENIED_BY_POLICY
            raise ToolError(verdict.message, {"executables": list(verdict.executables)}, code=code)
        direct = plain_argv(command) if command is not None else None
        writes = not verdict.read_only
        temp = ctx.policy.temp_dir
        # `sudo rm` really deletes: sudo's program is never the rm shim (a plain rm still is).
        if self.trash is None or temp is None or (argv is not None and argv[0] == "sudo"):
            return CommandPlan(direct=direct, writes=writes)
        env = self.trash.env(temp, ctx.policy.trash_inbox)
        shim = str(install_rm_shim(self.trash.state_dir))
        return CommandPlan(direct=direct, env=env, path_prepend=(shim,), writes=writes)

    def check_input(self, text: str) -> None:
        """Refuse input that holds a redaction marker.

        Raises:
            ToolError: It does.
        """
        if self.policy.refuse_redacted and REDACTION_MARKER in text:
            raise ToolError(
                "the input holds a [REDACTED:…] marker: that value was masked before you saw it, so it "
                "cannot be sent; have the process read the secret itself",
                code=ErrorCode.REDACTED_VALUE,
            )

    def finished(self, ctx: ToolContext) -> AfterRun | None:
        """File what the run's ``rm`` moved into the session's inbox; a line saying where it went."""
        temp = ctx.policy.temp_dir
        if self.trash is None or temp is None:
            return None
        filed = self.trash.file(temp, ctx.policy.trash_inbox)
        if not filed:
            return None
        filed.sort(key=lambda e: (e.deleted_at, e.id))
        workspace = str(self.trash.workspace)
        shown = [
            f"{e.path.removeprefix(workspace + '/')}{'/' if e.kind == 'directory' else ''} ({e.id})"
            for e in filed
        ]
        listing = ", ".join(shown[:10]) + (f" and {len(shown) - 10} more" if len(shown) > 10 else "")
        text = (
            f"[protected deletes: rm moved {len(filed)} path(s) to this workspace's trash: {listing}; "
            "restore one with `codemode trash restore ID`, list them with `codemode trash list`]"
        )
        data = {"trashed": [{"id": e.id, "path": e.path, "kind": e.kind} for e in filed]}
        return AfterRun(text=text, data=data)


class ApprovalCommands:
    """The `Approvals` hook that names what a bash run needs decided: an escalation (argv
    ``["sudo", ...]`` or ``sandbox: false``, asked every time) the policy lets through, else the
    run's command line (or argv) when the policy says ``ask`` (``approve_commands``), else nothing.

    Calling it runs the command policy, which may read script files a command wrote: call it
    off the event loop. `applies` (cheap, reads nothing) says whether a call would run it.
    """

    def __init__(self, policy: CommandPolicy, workspace: Path) -> None:
        self.policy = policy
        self.workspace = workspace

    def applies(self, tool: Tool, arguments: Mapping[str, Any]) -> bool:
        """Whether calling the hook for this call runs the command policy (a bash run's valid
        command or argv while ``approve_commands`` is on, or an escalation); reads nothing."""
        return (
            tool.name == "bash"
            and arguments.get("action", "run") in (None, "run")
            and (isinstance(arguments.get("command"), str) or isinstance(arguments.get("argv"), list))
            and (self.policy.approve_commands or escalation(arguments) is not None)
        )

    def __call__(self, tool: Tool, arguments: Mapping[str, Any]) -> Sequence[CommandAsk]:
        if not self.applies(tool, arguments):
            return ()  # invalid arguments: the tool reports them
        command, argv = arguments.get("command"), arguments.get("argv")
        cwd = arguments.get("cwd")
        workspace = self.workspace
        verdict = self.policy.check(
            command=command if isinstance(command, str) else None,
            argv=[str(a) for a in argv] if isinstance(argv, list) else None,
            cwd=workspace / cwd if isinstance(cwd, str) else workspace,
            workspace=workspace,
            background=bool(arguments.get("run_in_background")),
        )
        if verdict.verdict is Verdict.DENY:
            return ()  # the tool refuses it with the policy's message: nobody is asked about it
        escalated = escalation(arguments)
        if escalated is not None:
            return [CommandAsk("escalation", escalated)]
        if verdict.verdict is not Verdict.ASK:
            return ()
        return [
            CommandAsk(
                "command", command if isinstance(command, str) else shlex.join(str(a) for a in argv or ())
            )
        ]


def approval_commands(policy: CommandPolicy, workspace: Path) -> ApprovalCommands:
    """The `Approvals` hook for this policy and workspace (see `ApprovalCommands`)."""
    return ApprovalCommands(policy, workspace)
