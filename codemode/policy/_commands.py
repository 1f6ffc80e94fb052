"""The command policy: plain data the host sets, and the check of one bash run against it.

Every command a run would start is found (`_shell.parse` for shell strings; through the common
wrappers and ``env -S``, ``eval`` strings, ``find -exec``, aliases, npm/pnpm/yarn/bun scripts read
from package.json up to 4 levels, and the text fed to a shell: ``-c`` strings, here-docs,
here-strings and pipes into a shell, script files run by a shell, ``.``/``source`` or by path,
see `_scripts`) and checked:

* a denied executable (by its bare name, whatever path or quoting spells it) is refused;
* in the foreground, a file watcher (a command that never ends by itself) is refused before it
  starts, pointing to ``run_in_background``;
* an argument holding a ``[REDACTED:`` marker is refused (the value was masked for the model);
* under the strict policy, what cannot be checked (a syntax error, a computed command name, text
  of unknown content fed to a shell, a script file that cannot be read safely or that the same
  line writes, ``BASH_ENV``, scripts nested too deep) is refused naming the construct; the
  default policy lets it run unchecked and lists it in the verdict's ``unchecked``.

Interpreters other than shells (``python -c``, ``node -e``, ``make``) are not followed under any
policy: only their own name is checked.

Tables, not code, say what a wrapper, a watcher and a script runner are.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pydantic

from codemode.errors import ErrorCode

if TYPE_CHECKING:
    from codemode.policy._walk import Found

# What walks a run (the shell parser, the wrapper, script and watcher tables, `_walk`) loads
# with the first command checked: a host that runs none never pays for it (bench/bench_start.py).

__all__ = ["REDACTION_MARKER", "CommandPolicy", "CommandVerdict", "Verdict"]

REDACTION_MARKER = "[REDACTED:"
"""What every value the redactor masked starts with (see `codemode.state.Redactor`)."""


class Verdict(enum.StrEnum):
    """What the policy says about a run."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"
    """Needs an approval decision: with ``approve_commands``, a run that is not read-only."""


class CommandVerdict(pydantic.BaseModel):
    """The policy's answer for one run.

    Attributes:
        verdict: allow, deny or ask.
        code: The error code of a refusal.
        message: Why it is refused, and what to do instead ("" when allowed).
        executables: Every command name found, in order (wrappers included).
        unchecked: What could not be checked (the permissive policy runs it anyway).
        read_only: Every command is on the read-only list (or a neutral wrapper), everything
            could be checked and no redirection writes a file (``/dev/null`` aside): the run
            only looks, so it need not wait for the session's writers.
    """

    model_config = pydantic.ConfigDict(frozen=True)

    verdict: Verdict
    code: ErrorCode | None = None
    message: str = ""
    executables: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()
    read_only: bool = False

    @property
    def allowed(self) -> bool:
        """Whether the run may start."""
        return self.verdict is Verdict.ALLOW


class CommandPolicy(pydantic.BaseModel):
    """What commands the host lets the ``bash`` tool run: plain data, set by the host only.

    Attributes:
        deny: Executables refused wherever they appear (bare names: ``rm``, ``curl``).
        strict: Refuse what cannot be checked (syntax errors, computed command names, text of
            unknown content fed to a shell, script files not read safely, nesting deeper than 8);
            the default runs it unchecked.
        refuse_foreground_watchers: Refuse file watchers unless ``run_in_background``.
        protected_deletes: ``rm`` of workspace files moves them to the workspace's trash.
        refuse_redacted: Refuse arguments that hold a redaction marker.
        approve_commands: A run with any command off the read-only allowlist (git status,
            ls, cat, grep, find without -exec, ...; a sensitive path cancels a match) needs
            an approval decision (verdict ``ask``): the host's ``approve`` callback, or the
            MCP client's user, decides. Off by default.
        serialize_writers: Within a session, a run that is not read-only (see
            `CommandVerdict.read_only`; what cannot be checked counts as a writer), and every
            ``write_file``/``edit_file``, waits for the writers that came before it; read-only
            runs never wait. A background run holds the turn only until it has started. On by
            default.
    """

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    deny: frozenset[str] = frozenset()
    strict: bool = False
    refuse_foreground_watchers: bool = True
    protected_deletes: bool = True
    refuse_redacted: bool = True
    approve_commands: bool = False
    serialize_writers: bool = True

    @pydantic.field_validator("deny")
    @classmethod
    def _bare_names(cls, value: frozenset[str]) -> frozenset[str]:
        bad = sorted(name for name in value if not name or "/" in name or name != name.strip())
        if bad:
            raise ValueError(f"denied commands are bare executable names (no '/', no spaces): {bad}")
        return value

    def describe(self) -> str:
        """One line for ``codemode doctor`` and the README."""
        mode = "strict (what cannot be checked is refused)" if self.strict else "permissive"
        denied = ", ".join(sorted(self.deny)) or "none"
        return f"command policy {mode}; denied: {denied}"

    def check(
        self,
        *,
        command: str | None = None,
        argv: Sequence[str] | None = None,
        cwd: Path,
        workspace: Path,
        background: bool = False,
    ) -> CommandVerdict:
        """Check one run: a shell ``command`` string, or an ``argv`` run without a shell.

        Args:
            command: The bash command line.
            argv: The program and its arguments (no shell).
            cwd: Its working directory (package.json scripts are looked up from here).
            workspace: The workspace root (package.json is not looked for above it).
            background: It runs in the background (watchers allowed).
        """
        from codemode.policy._escalation import argv_refusal
        from codemode.policy._readonly import NEUTRAL_WRAPPERS, is_read_only
        from codemode.policy._walk import Walk, escalation_refusal, only_looks

        texts = list(argv) if argv is not None else [command or ""]
        if self.refuse_redacted and any(REDACTION_MARKER in text for text in texts):
            return CommandVerdict(
                verdict=Verdict.DENY,
                code=ErrorCode.REDACTED_VALUE,
                message=(
                    "the command holds a [REDACTED:…] marker: that value was masked before you saw it, "
                    "so it cannot be used as an argument; read the secret inside the same command "
                    'instead (for example `curl -H "Authorization: Bearer $(cat token.txt)"` or '
                    "`source .env && deploy`)"
                ),
            )
        if argv is not None and argv:
            refused = argv_refusal(argv)
            if refused is not None:
                return CommandVerdict(verdict=Verdict.DENY, code=refused[0], message=refused[1])
        walk = Walk(self, workspace, background)
        if argv is not None:
            found = list(walk.argv(tuple(argv), cwd, (), 0))
        else:
            found = list(walk.script(command or "", cwd, (), 0))
        walk.rewritten_scripts(found)
        executables = tuple(f.name for f in found)
        unchecked = tuple(p.describe() for p in walk.problems)
        if self.deny and walk.rebinding:
            return CommandVerdict(
                verdict=Verdict.DENY,
                code=ErrorCode.DENIED_BY_POLICY,
                message=(
                    f"{walk.rebinding[0].describe()} is refused while commands are denied: it changes "
                    "which program a command name runs, so a denied program could run under another "
                    "name; leave PATH as it is and name programs by their installed path or bare name"
                ),
                executables=executables,
                unchecked=unchecked,
            )
        for item in found:
            refusal = self._refusal(item, background)
            if refusal is not None:
                code, message = refusal
                return CommandVerdict(
                    verdict=Verdict.DENY,
                    code=code,
                    message=message,
                    executables=executables,
                    unchecked=unchecked,
                )
        shape = escalation_refusal(found, argv is not None) or self._path_refusal(found, argv is not None)
        if shape is not None:
            return CommandVerdict(
                verdict=Verdict.DENY,
                code=ErrorCode.DENIED_BY_POLICY,
                message=shape,
                executables=executables,
                unchecked=unchecked,
            )
        if self.strict and walk.problems:
            return CommandVerdict(
                verdict=Verdict.DENY,
                code=ErrorCode.DENIED_BY_POLICY,
                message=(
                    f"the strict command policy cannot check {walk.problems[0].describe()}"
                    + (f" (and {len(walk.problems) - 1} more)" if len(walk.problems) > 1 else "")
                    + "; write the commands in the command line itself with literal names (no computed "
                    "names, no text of unknown content fed to a shell; a script file only as a regular "
                    "file inside the workspace, not written by the same command line), or pass argv"
                ),
                executables=executables,
                unchecked=unchecked,
            )
        if self.approve_commands:
            looking = [f for f in found if not (is_read_only(f.words) or f.name in NEUTRAL_WRAPPERS)]
            if looking or walk.problems or not found:
                first = looking[0].shown() if looking else (command or " ".join(argv or ()))[:80]
                return CommandVerdict(
                    verdict=Verdict.ASK,
                    message=f"`{first}` is not read-only",
                    executables=executables,
                    unchecked=unchecked,
                )
        return CommandVerdict(
            verdict=Verdict.ALLOW,
            executables=executables,
            unchecked=unchecked,
            read_only=only_looks(found, walk),
        )

    def _path_refusal(self, found: list[Found], argv_mode: bool) -> str | None:
        """Under the strict policy, in argv mode and inside ``sh -c`` strings, every program is
        a bare name found on PATH: a path (``./x/touch``, ``/tmp/t``) may be any program."""
        if not self.strict:
            return None
        for item in found:
            first = item.words[0]
            inside_c = any(v.startswith("inside ") and v.endswith(" -c") for v in item.via)
            if first is not None and "/" in first and (argv_mode or inside_c):
                where = f" ({', '.join(item.via)})" if item.via else ""
                return (
                    f"`{first}`{where} is a path: the strict command policy runs programs by bare name "
                    f"only; use `{os.path.basename(first)}` (a script: `bash {first}`)"
                )
        return None

    def _refusal(self, item: Found, background: bool) -> tuple[ErrorCode, str] | None:
        from codemode.policy._watchers import watcher

        where = f" ({', '.join(item.via)})" if item.via else ""
        if item.name in self.deny:
            return ErrorCode.DENIED_BY_POLICY, (
                f"`{item.name}`{where} is denied by this host's command policy; do it another way or "
                "ask the user"
            )
        if self.refuse_foreground_watchers and not background:
            why = watcher(item.words)
            if why is not None:
                return ErrorCode.WATCHER_IN_FOREGROUND, (
                    f"`{item.shown()}`{where} {why} and never ends by itself, so it is not run in the "
                    "foreground; start it with run_in_background: true and read its output with "
                    'bash({action: "read", process_id, wait_ms})'
                )
        return None


# -- what runs what -------------------------------------------------------------------------


"""Commands that write files named in their words (a script file they name is not checked as is)."""
"""Where installed programs live (read-only to a confined command): a program named by a path
elsewhere (the workspace, $TMPDIR, /tmp) is checked by what it is, not by its name."""
