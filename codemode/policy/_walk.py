"""Walking one bash run for the command policy: every command it would start, found through
the shell's syntax, wrappers, ``eval`` and ``-c`` strings, here-docs, aliases, package.json
scripts and script files (see `_commands` for what is checked, `_scripts` for the text fed to
a shell). Loaded with the first command checked, not with the policy: a host that runs no
command never loads the parser (bench/bench_start.py)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from codemode.policy._commands import CommandPolicy
from codemode.policy._escalation import ELEVATORS, elevator_refusal
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
from codemode.policy._wrappers import WRAPPERS, _Split, _unwrap
from codemode.sandbox import UnsafePath, read_file_beneath

_MAX_DEPTH = 8  # nested sh -c / eval / alias strings
_MAX_SCRIPT_LEVELS = 4  # package.json scripts followed through one another
_PACKAGE_JSON_BYTES = 1 << 20


_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


def only_looks(found: list[Found], walk: Walk) -> bool:
    """Whether a run only looks: see `CommandVerdict.read_only`."""
    return (
        bool(found)
        and not walk.problems
        and all(target in _HARMLESS_TARGETS for target in walk.written)
        and all(is_read_only(f.words) or f.name in NEUTRAL_WRAPPERS for f in found)
    )


@dataclass(frozen=True)
class Found:
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


SYSTEM_DIRS = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/opt/", "/nix/store/", "/snap/")


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


class Walk:
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

    def script(self, text: str, cwd: Path, via: tuple[str, ...], depth: int) -> Iterator[Found]:
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

    def command(self, command: Command, cwd: Path, via: tuple[str, ...], depth: int) -> Iterator[Found]:
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
    ) -> Iterator[Found]:
        """The commands one argv starts: itself, then what it runs in turn (``feed``: the
        command whose redirections and pipe give its stdin; None: the call's stdin)."""
        if not words:
            return
        if words[0] is None:
            self.problems.append(Problem("a computed command name", "…", line))
            return
        yield Found(words, via)
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
    ) -> Iterator[Found]:
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
    ) -> Iterator[Found]:
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
    ) -> Iterator[Found]:
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

    def rewritten_scripts(self, found: list[Found]) -> None:
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
    ) -> Iterator[Found]:
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


def escalation_refusal(found: list[Found], argv_mode: bool) -> str | None:
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
