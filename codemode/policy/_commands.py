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
import json
import os
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pydantic

from codemode.errors import ErrorCode
from codemode.policy._escalation import ELEVATORS, argv_refusal, elevator_refusal
from codemode.policy._evaluated import (
    REBINDING_VARIABLES,
    assigned_names,
    evaluated_strings,
    refused_builtin,
    risky_option,
    variable_problem,
)
from codemode.policy._readonly import NEUTRAL_WRAPPERS, is_read_only
from codemode.policy._scripts import (
    SHELLS,
    SOURCE_BUILTINS,
    STDIN_PATHS,
    VARIABLE_SETTERS,
    read_script,
    shebang_shell,
    shell_input,
)
from codemode.policy._shell import Command, Problem, parse
from codemode.policy._watchers import watcher
from codemode.policy._wrappers import WRAPPERS, _Split, _unwrap
from codemode.sandbox import UnsafePath, read_file_beneath

__all__ = ["REDACTION_MARKER", "CommandPolicy", "CommandVerdict", "Verdict"]

REDACTION_MARKER = "[REDACTED:"
"""What every value the redactor masked starts with (see `codemode.state.Redactor`)."""

_MAX_DEPTH = 8  # nested sh -c / eval / alias strings
_MAX_SCRIPT_LEVELS = 4  # package.json scripts followed through one another
_PACKAGE_JSON_BYTES = 1 << 20


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
        walk = _Walk(self, workspace, background)
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
        shape = _escalation_refusal(found, argv is not None) or self._path_refusal(found, argv is not None)
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
            read_only=_only_looks(found, walk),
        )

    def _path_refusal(self, found: list[_Found], argv_mode: bool) -> str | None:
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

    def _refusal(self, item: _Found, background: bool) -> tuple[ErrorCode, str] | None:
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


_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


def _only_looks(found: list[_Found], walk: _Walk) -> bool:
    """Whether a run only looks: see `CommandVerdict.read_only`."""
    return (
        bool(found)
        and not walk.problems
        and all(target in _HARMLESS_TARGETS for target in walk.written)
        and all(is_read_only(f.words) or f.name in NEUTRAL_WRAPPERS for f in found)
    )


# -- what runs what -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Found:
    """One command a run would start: its words (None: computed) and how it was reached."""

    words: tuple[str | None, ...]
    via: tuple[str, ...]

    @property
    def name(self) -> str:
        first = self.words[0] if self.words else None
        return os.path.basename(first) if first else "?"

    def shown(self) -> str:
        return " ".join(w if w is not None else "…" for w in self.words)[:80]


_WRAPPER_BY_NAME = {name: w for w in WRAPPERS for name in w.names}
WRITERS = frozenset("cp mv ln install tee rsync sed dd curl wget patch truncate unzip tar".split())
"""Commands that write files named in their words (a script file they name is not checked as is)."""
SYSTEM_DIRS = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/opt/", "/nix/store/", "/snap/")
"""Where installed programs live (read-only to a confined command): a program named by a path
elsewhere (the workspace, $TMPDIR, /tmp) is checked by what it is, not by its name."""
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


@dataclass(frozen=True)
class ScriptRunner:
    """A package manager whose words can name a package.json script.

    Attributes:
        names: Its executable names.
        run_words: Subcommands followed by a script name (``run``).
        lifecycle: Subcommands that are scripts of the same name (``start``, ``test``).
        bare_scripts: A bare first word that is not one of its own commands names a script
            (``pnpm dev``, ``yarn build``, ``bun dev``).
        builtins: Its own commands (never a script when bare).
        dir_options: Options whose value is the directory of the package.json.
        extra_after_dashdash: Arguments reach the script only after ``--`` (npm).
    """

    names: frozenset[str]
    run_words: frozenset[str]
    lifecycle: frozenset[str]
    bare_scripts: bool
    builtins: frozenset[str] = frozenset()
    dir_options: frozenset[str] = frozenset()
    extra_after_dashdash: bool = False


SCRIPT_RUNNERS: tuple[ScriptRunner, ...] = (
    ScriptRunner(
        frozenset({"npm"}),
        frozenset({"run", "run-script", "rum", "urn"}),
        frozenset({"start", "test", "t", "tst", "stop", "restart"}),
        bare_scripts=False,
        dir_options=frozenset({"--prefix", "-C"}),
        extra_after_dashdash=True,
    ),
    ScriptRunner(
        frozenset({"pnpm"}),
        frozenset({"run", "run-script"}),
        frozenset({"start", "test", "t", "stop", "restart"}),
        bare_scripts=True,
        builtins=frozenset(
            "add install i update up remove rm uninstall link unlink import rebuild prune fetch exec dlx "
            "create init publish pack list ls outdated why audit store config env setup licenses "
            "patch deploy".split()
        ),
        dir_options=frozenset({"-C", "--dir"}),
    ),
    ScriptRunner(
        frozenset({"yarn"}),
        frozenset({"run"}),
        frozenset({"start", "test", "stop", "restart"}),
        bare_scripts=True,
        builtins=frozenset(
            "add install remove upgrade up init info link unlink pack publish why workspace workspaces "
            "config cache global dlx exec bin set node plugin constraints dedupe explain".split()
        ),
        dir_options=frozenset({"--cwd"}),
    ),
    ScriptRunner(
        frozenset({"bun"}),
        frozenset({"run"}),
        frozenset({"start"}),
        bare_scripts=True,
        builtins=frozenset(
            "add install i remove rm update link unlink pm build init create x upgrade repl exec "
            "publish outdated patch audit".split()
        ),
        dir_options=frozenset({"--cwd"}),
    ),
)
_RUNNER_BY_NAME = {name: r for r in SCRIPT_RUNNERS for name in r.names}


class _Walk:
    """Finds every command one run would start (see the module docstring)."""

    def __init__(self, policy: CommandPolicy, workspace: Path, background: bool) -> None:
        self.policy = policy
        self.workspace = workspace
        self.background = background
        self.problems: list[Problem] = []
        self.written: list[str | None] = []  # files the run's redirections write
        self.scripts: list[tuple[str, int]] = []  # script files read and checked, with their line
        self.rebinding: list[Problem] = []  # changes of what a command name runs (PATH=...)

    def assigned(self, variable: str, text: str, line: int) -> None:
        """A variable the run assigns: one a shell or a program runs as code is a problem."""
        why = variable_problem(variable)
        if why is not None:
            self.problems.append(Problem(why, _cut(text), line))
            if variable in REBINDING_VARIABLES:
                self.rebinding.append(Problem(f"an assignment to {variable}", _cut(text), line))

    def script(self, text: str, cwd: Path, via: tuple[str, ...], depth: int) -> Iterator[_Found]:
        if depth > _MAX_DEPTH:
            self.problems.append(Problem("scripts nested too deep", _cut(text), 1))
            return
        parsed = parse(text)
        self.problems.extend(parsed.problems)
        self.written.extend(parsed.written)
        for variable, line in parsed.assigned:
            self.assigned(variable, variable, line)
        for command in parsed.commands:
            if command.words and command.words[0] == "cd" and len(command.words) == 2:
                target = command.words[1]
                if target is not None and not target.startswith("-"):
                    cwd = cwd / target  # later commands of this script run there (checks only)
            yield from self.command(command, cwd, via, depth)

    def command(self, command: Command, cwd: Path, via: tuple[str, ...], depth: int) -> Iterator[_Found]:
        words = command.words
        if not words or words[0] is None:
            return
        if words[0] == "alias":
            for word in words[1:]:
                if word is not None and "=" in word:
                    alias, _, value = word.partition("=")
                    yield from self.script(value, cwd, (*via, f"alias {alias}"), depth + 1)
            return
        yield from self.argv(words, cwd, via, depth, line=command.line, feed=command)

    def argv(
        self,
        words: tuple[str | None, ...],
        cwd: Path,
        via: tuple[str, ...],
        depth: int,
        line: int = 1,
        feed: Command | None = None,
    ) -> Iterator[_Found]:
        """The commands one argv starts: itself, then what it runs in turn (``feed``: the
        command whose redirections and pipe give its stdin; None: the call's stdin)."""
        if not words:
            return
        if words[0] is None:
            self.problems.append(Problem("a computed command name", "…", line))
            return
        yield _Found(words, via)
        name = os.path.basename(words[0])
        rest = words[1:]
        if name in VARIABLE_SETTERS:
            for word in rest:
                if "=" in (word or ""):
                    self.assigned((word or "").split("=", 1)[0], word or "", line)
        for variable in assigned_names(words):
            self.assigned(variable, " ".join(w or "…" for w in words), line)
        why = refused_builtin(words, tuple(w or "…" for w in words)) or risky_option(words)
        if why is not None:
            self.problems.append(Problem(why, _cut(" ".join(w or "…" for w in words)), line))
        for text in evaluated_strings(words):
            if text is None:
                self.problems.append(Problem(f"a computed command string of {name}", "…", line))
            else:
                yield from self.script(text, cwd, (*via, name), depth + 1)
        if name in SHELLS:
            yield from self.shell(words, feed, cwd, via, depth, line)
            return
        if name in SOURCE_BUILTINS:
            if rest and rest[0] in STDIN_PATHS:
                yield from self.shell((name,), feed, cwd, via, depth, line)  # `. /dev/stdin <<EOF`
            elif rest:
                yield from self.script_file(
                    rest[0], f"a computed {name} file", cwd, (*via, f"{name} {rest[0]}"), depth, line
                )
            return
        if "/" in words[0]:
            yield from self.executed_file(words[0], cwd, via, depth, line)
        if name == "eval":
            if any(w is None for w in rest):
                self.problems.append(Problem("a computed eval string", "…", line))
            else:
                yield from self.script(
                    " ".join(w for w in rest if w is not None), cwd, (*via, "eval"), depth + 1
                )
            return
        if name == "find":
            for index, word in enumerate(rest):
                if word in FIND_EXEC:
                    tail: list[str | None] = []
                    for part in rest[index + 1 :]:
                        if part in (";", "+"):
                            break
                        tail.append(None if part is None or "{}" in part else part)
                    if tail and tail[0] is None:
                        self.problems.append(Problem("a found file run as a command", "{}", line))
                    elif tail:
                        yield from self.argv(tuple(tail), cwd, (*via, f"find {word}"), depth + 1, line)
            return
        runner = _RUNNER_BY_NAME.get(name)
        if runner is not None:
            yield from self.package_script(runner, name, rest, cwd, via, depth, line)
            return
        wrapper = _WRAPPER_BY_NAME.get(name)
        if wrapper is not None:
            inner = _unwrap(wrapper, rest)
            if isinstance(inner, str):
                label = f"{name} {wrapper.script_option}" if wrapper.script_option else f"inside {name}"
                yield from self.script(inner, cwd, (*via, label), depth + 1)
            elif isinstance(inner, _Split):
                if inner.words is None:
                    what = (
                        f"an {name} -S string env expands itself"
                        if wrapper.split_options
                        else (f"a computed command string of {name}")
                    )
                    self.problems.append(Problem(what, _cut(inner.text), line))
                else:
                    yield from self.argv(
                        (name, *inner.words), cwd, (*via, f"{name} -S"), depth + 1, line, feed
                    )
            elif inner:
                if wrapper.appends_input:
                    inner, feed = (*inner, None), None  # xargs adds words read from its input
                yield from self.argv(inner, cwd, (*via, f"via {name}"), depth, line, feed)

    def shell(
        self,
        words: tuple[str | None, ...],
        feed: Command | None,
        cwd: Path,
        via: tuple[str, ...],
        depth: int,
        line: int,
    ) -> Iterator[_Found]:
        """What a shell runs: its -c string, the script on its stdin, or its script file."""
        for index, word in enumerate(words[1:-1], 1):
            if word in ("--rcfile", "--init-file"):  # a startup file: a script it runs first
                start = words[index + 1]
                yield from self.script_file(
                    start, f"a computed {word} file", cwd, (*via, f"{words[0]} {word} {start}"), depth, line
                )
        given = shell_input(words, feed, background=self.background)
        if given.kind == "unknown" or (given.kind == "string" and given.text is None):
            self.problems.append(Problem(given.what, _cut(" ".join(w or "…" for w in words)), line))
        elif given.kind == "string" and given.text is not None:
            yield from self.script(given.text, cwd, (*via, given.via), depth + 1)
        elif given.kind == "file":
            yield from self.script_file(given.text, given.what, cwd, (*via, given.via), depth, line)

    def script_file(
        self, path: str | None, computed: str, cwd: Path, via: tuple[str, ...], depth: int, line: int
    ) -> Iterator[_Found]:
        """The commands of the script file ``path`` (None: computed), read from the workspace."""
        if path is None:
            self.problems.append(Problem(computed, "…", line))
            return
        read = read_script(path, cwd, self.workspace)
        if read.text is None:
            self.problems.append(Problem(f"a script file that was not read ({read.why})", _cut(path), line))
            return
        self.scripts.append((path, line))
        yield from self.script(read.text, cwd, via, depth + 1)

    def executed_file(
        self, path: str, cwd: Path, via: tuple[str, ...], depth: int, line: int
    ) -> Iterator[_Found]:
        """A workspace file run by path: followed when it is a shell script (see `shebang_shell`);
        a program (a NUL byte in it) or another interpreter's script is not."""
        target = os.path.normpath(cwd / path)
        if Path(os.path.normpath(self.workspace)) not in Path(target).parents:
            if not target.startswith(SYSTEM_DIRS):
                what = "a program run from outside the system directories (a writable place can hold a copy of any program)"
                self.problems.append(Problem(what, _cut(path), line))
            return  # an installed program
        read = read_script(path, cwd, self.workspace)
        if read.missing:
            self.scripts.append((path, line))  # it fails to start, unless this run writes it first
            return
        if read.binary:
            what = (
                "a program in the workspace (built or copied there, it may be any program under another name)"
            )
            self.problems.append(Problem(what, _cut(path), line))
            return
        if read.text is None:
            self.problems.append(
                Problem(f"a file run as a command that was not read ({read.why})", _cut(path), line)
            )
            return
        self.scripts.append((path, line))
        shell = shebang_shell(read.text)
        if shell is not None:
            yield from self.script(read.text, cwd, (*via, f"{shell} {path}"), depth + 1)

    def rewritten_scripts(self, found: list[_Found]) -> None:
        """A script file this same run may write before it runs was checked as it is now: a problem."""
        names = {os.path.basename(w) for w in self.written if w is not None}
        for item in found:
            if item.name in WRITERS:
                names.update(os.path.basename(w.rstrip("/")) for w in item.words[1:] if w is not None)
        for path, line in self.scripts:
            if None in self.written or os.path.basename(path) in names:
                self.problems.append(
                    Problem("a script file that this same command line writes", _cut(path), line)
                )

    def package_script(
        self,
        runner: ScriptRunner,
        name: str,
        rest: tuple[str | None, ...],
        cwd: Path,
        via: tuple[str, ...],
        depth: int,
        line: int,
    ) -> Iterator[_Found]:
        words = list(rest)
        where = cwd
        script: str | None = None
        index = 0
        while index < len(words):
            word = words[index]
            if word is None:
                return
            if word in runner.dir_options and index + 1 < len(words):
                target = words[index + 1]
                if target is None:
                    return
                where = cwd / target
                index += 2
                continue
            if word.startswith("-"):
                index += 1
                continue
            break
        if index >= len(words):
            return
        first = words[index]
        assert first is not None
        if first in runner.run_words:
            if index + 1 >= len(words) or words[index + 1] is None:
                return
            script, extra = words[index + 1], words[index + 2 :]
        elif first in runner.lifecycle:
            script, extra = {"t": "test", "tst": "test"}.get(first, first), words[index + 1 :]
        elif runner.bare_scripts and first not in runner.builtins:
            script, extra = first, words[index + 1 :]
        elif first in ("exec", "dlx", "x"):
            yield from self.argv(tuple(words[index + 1 :]), cwd, (*via, f"{name} {first}"), depth, line)
            return
        else:
            return
        assert script is not None
        levels = sum(1 for v in via if v.startswith("script "))
        if levels >= _MAX_SCRIPT_LEVELS:
            self.problems.append(Problem("package scripts nested deeper than 4", f"{name} {script}", line))
            return
        body = _package_script(where, self.workspace, script)
        if body is None:
            return
        if runner.extra_after_dashdash:
            extra = extra[extra.index("--") + 1 :] if "--" in extra else []
        if any(e is None for e in extra):
            return
        text = body + "".join(" " + shlex.quote(e) for e in extra if e is not None)
        yield from self.script(text, where, (*via, f"script {script!r} of {name}"), depth + 1)


def _escalation_refusal(found: list[_Found], argv_mode: bool) -> str | None:
    """A sudo, su, doas... anywhere but as the first word of an argv run (see `_escalation`)."""
    for index, item in enumerate(found):
        if item.name not in ELEVATORS:
            continue
        if argv_mode and index == 0 and item.words[0] == "sudo":
            continue
        where = f" ({', '.join(item.via)})" if item.via else ""
        return elevator_refusal(item.words[0] or item.name, where)
    return None


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:59] + "…"


def _package_script(cwd: Path, workspace: Path, script: str) -> str | None:
    """The text of ``script`` in the nearest package.json from ``cwd`` up to the workspace root."""
    try:
        here = Path(os.path.normpath(cwd if cwd.is_absolute() else workspace / cwd))
    except ValueError:
        return None
    root = Path(os.path.normpath(workspace))
    while True:
        candidate = here / "package.json"
        try:  # a workspace file: through safe-open (a FIFO or a link there is refused, not waited on)
            data = json.loads(read_file_beneath(root, candidate.relative_to(root), cap=_PACKAGE_JSON_BYTES))
        except (UnsafePath, ValueError):
            data = None
        if isinstance(data, dict):
            scripts = data.get("scripts")
            value = scripts.get(script) if isinstance(scripts, dict) else None
            return value if isinstance(value, str) else None
        if here == root or root not in here.parents:
            return None
        here = here.parent
