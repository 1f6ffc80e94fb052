"""Recognise test, build, lint and type-check commands from their command line.

:func:`classify_command` looks at a shell command line (through ``cd x &&``, environment
assignments, ``timeout``, ``python -m``, ``uv run``, ``npx`` and friends, and pipes) and says
which kind of verification it runs and with which tool (the tools are data: ``_runners``).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from codemode.tools._verification._rules import Kind
from codemode.tools._verification._runners import LAUNCHER_BY_NAME, RUNNER_BY_NAME, ClassifyHook, Runner

__all__ = ["Classification", "ClassificationData", "classify_command"]


class ClassificationData(TypedDict):
    """A `Classification` as JSON data (`Classification.to_dict`)."""

    kind: Kind
    tool: str


@dataclass(frozen=True)
class Classification:
    """What a command verifies and with which tool.

    Attributes:
        kind: ``"test"``, ``"build"``, ``"lint"`` or ``"typecheck"``.
        tool: The runner, e.g. ``"pytest"``, ``"cargo"``, ``"npm"``, ``"make"``.
    """

    kind: Kind
    tool: str

    def to_dict(self) -> ClassificationData:
        """Return the classification as a JSON-serialisable dict."""
        return {"kind": self.kind, "tool": self.tool}


_ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON_RE = re.compile(r"^(?:python(?:\d+(?:\.\d+)?)?|pypy3?)$")
_SEPARATOR_RE = re.compile(r"^[;&|()]+$")
_REDIRECT_RE = re.compile(r"^[0-9]*[<>&]+$")
_SHELL_WORDS = frozenset({"!", "if", "then", "do", "else", "elif", "while", "until", "{", "}", "time"})
# Commands that run the rest of their arguments as a command, after their own options.
_PASSTHROUGH = frozenset(
    {"exec", "command", "builtin", "nohup", "sudo", "stdbuf", "xvfb-run", "chronic", "time", "ionice"}
)
_RUNNER_VALUE_OPTS = frozenset(
    {"--prefix", "-C", "--dir", "--cwd", "-w", "--workspace", "--filter", "-F", "--cache", "--userconfig"}
)
_NPM_NON_SCRIPT = frozenset(
    {"install", "i", "ci", "add", "remove", "rm", "uninstall", "update", "up", "upgrade", "init", "create",
     "publish", "pack", "link", "outdated", "audit", "config", "info", "view", "why", "list", "ls",
     "login", "logout", "version", "cache", "store", "prune", "dedupe", "set", "import", "global"}
)  # fmt: skip


def _tokens(command: str) -> list[str]:
    """Split a shell command into words and operator tokens; never raises."""
    text = command.replace("\n", " ; ")
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:
        # Unbalanced quotes: a rougher split is enough to recognise the program names.
        return re.findall(r"&&|\|\||[;|&()]|[^\s;|&()]+", text)


def _segments(command: str) -> list[list[str]]:
    segments: list[list[str]] = [[]]
    skip_next = False
    for tok in _tokens(command):
        if skip_next:
            skip_next = False
            continue
        if _SEPARATOR_RE.match(tok):
            segments.append([])
        elif _REDIRECT_RE.match(tok):
            skip_next = True  # the redirection target
        else:
            segments[-1].append(tok)
    return [s for s in segments if s]


def _skip_options(words: list[str], i: int, value_opts: frozenset[str] = frozenset()) -> int:
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        i += 2 if words[i] in value_opts else 1
    if i < len(words) and words[i] == "--":
        i += 1
    return i


def _strip_prefix(words: list[str]) -> list[str]:
    """Drop what only sets up the command: assignments, env, timeout, nice, shell keywords."""
    i = 0
    while i < len(words):
        word = words[i]
        base = os.path.basename(word)
        if _ASSIGN_RE.match(word) or word in _SHELL_WORDS:
            i += 1
        elif base == "env":
            i = _skip_options(words, i + 1, frozenset({"-u", "--unset", "-C", "--chdir", "-S"}))
        elif base == "timeout":
            i = _skip_options(words, i + 1, frozenset({"-s", "--signal", "-k", "--kill-after"}))
            i += 1  # the duration
        elif base == "nice":
            i = _skip_options(words, i + 1, frozenset({"-n", "--adjustment"}))
        elif base in _PASSTHROUGH:
            i = _skip_options(words, i + 1, frozenset({"-u", "-g", "-o", "-e", "-i", "-n", "-s"}))
        else:
            break
    return words[i:]


def _classify_script(runner: str, name: str) -> Classification | None:
    parts = re.split(r"[:\-_.]", name.lower())
    if name in ("test", "t", "tst") or "test" in parts or "tests" in parts or "spec" in parts:
        return Classification("test", runner)
    if (
        "typecheck" in parts
        or "tsc" in parts
        or "types" in parts
        or name.lower() in ("type-check", "check-types")
    ):
        return Classification("typecheck", runner)
    if "lint" in parts or "eslint" in parts:
        return Classification("lint", runner)
    if "build" in parts or "compile" in parts:
        return Classification("build", runner)
    return None


def _classify_script_runner(runner: str, words: list[str], depth: int) -> Classification | None:
    i = _skip_options(words, 1, _RUNNER_VALUE_OPTS)
    if runner == "yarn" and words[i : i + 1] == ["workspace"]:
        i = _skip_options(words, i + 2, _RUNNER_VALUE_OPTS)  # yarn workspace <name> <command>
    if i >= len(words):
        return None
    sub = words[i]
    if runner == "npm" and sub in ("test", "t", "tst"):
        return Classification("test", runner)
    if runner != "npm" and sub in ("test", "t"):
        return Classification("test", runner)
    if sub in ("run", "run-script"):
        j = _skip_options(words, i + 1)
        return _classify_script(runner, words[j]) if j < len(words) else None
    if sub in ("exec", "dlx", "x"):
        return _classify_words(words[_skip_options(words, i + 1) :], depth)
    if runner == "npm" or sub in _NPM_NON_SCRIPT:
        return None
    # `yarn jest`, `pnpm vitest`: a package binary or a script of that name.
    return _classify_words(words[i:], depth) or _classify_script(runner, sub)


def _make_kind(runner: Runner, words: list[str], depth: int) -> Classification:
    # Code: each target gets a kind from its name (in this order), then the command gets the most
    # telling kind among its targets.
    targets: list[str] = []
    i = 1
    while i < len(words):
        w = words[i]
        if w in ("-C", "-f", "--file", "--directory", "-I", "-o", "-W"):
            i += 2
            continue
        if not w.startswith("-") and "=" not in w and not w.isdigit():
            targets.append(w)
        i += 1
    kinds: list[Kind] = []
    for t in targets:
        parts = re.split(r"[:\-_.]", t.lower())
        if "test" in parts or "tests" in parts or "check" in parts or "unittest" in parts:
            kinds.append("test")
        elif "lint" in parts:
            kinds.append("lint")
        elif "typecheck" in parts or "mypy" in parts or "types" in parts:
            kinds.append("typecheck")
        else:
            kinds.append("build")
    for kind in ("test", "typecheck", "lint"):
        if kind in kinds:
            return Classification(kind, runner.tool)
    return Classification("build", runner.tool)


def _gradle_kind(runner: Runner, words: list[str], depth: int) -> Classification | None:
    # Code: a task is named by its last path part (":app:test") and may end in "Test"/"Check";
    # the help tasks (dependencies, tasks, ...) build nothing.
    tasks: list[str] = []
    i = 1
    while i < len(words):
        a = words[i]
        if a.startswith("-"):
            i += 2 if a in _GRADLE_VALUE_OPTS else 1
            continue
        tasks.append(a.rsplit(":", 1)[-1])
        i += 1
    if any(t in ("test", "check") or t.endswith("Test") or t.endswith("Check") for t in tasks):
        return Classification("test", runner.tool)
    if tasks and all(t in _GRADLE_HELP_TASKS for t in tasks):
        return None
    return Classification("build", runner.tool)


def _script_runner_kind(runner: Runner, words: list[str], depth: int) -> Classification | None:
    return _classify_script_runner(runner.tool, words, depth)


_HOOKS: dict[ClassifyHook, Callable[[Runner, list[str], int], Classification | None]] = {
    "make": _make_kind,
    "gradle": _gradle_kind,
    "script": _script_runner_kind,
}
_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})
_COVERAGE_VALUE_OPTS = frozenset({"--rcfile", "--source", "--include", "--omit", "--data-file", "--context"})
_GRADLE_VALUE_OPTS = frozenset(
    {"--configuration", "--dependency", "-p", "--project-dir", "-c", "--settings-file", "-x", "--exclude-task",
     "-I", "--init-script", "-g", "--gradle-user-home", "--tests", "--console", "--warning-mode",
     "--max-workers", "--task"}
)  # fmt: skip
_GRADLE_HELP_TASKS = frozenset(
    {"dependencies", "dependencyInsight", "tasks", "help", "properties", "projects", "buildEnvironment",
     "wrapper", "init", "javaToolchains", "outgoingVariants", "resolvableConfigurations", "components",
     "model", "clean"}
)  # fmt: skip


def _classify_python(args: list[str], depth: int) -> Classification | None:
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m" and i + 1 < len(args):
            return _classify_words(args[i + 1 :], depth + 1)
        if a.startswith("-m") and len(a) > 2:
            return _classify_words([a[2:], *args[i + 1 :]], depth + 1)
        if not a.startswith("-") and os.path.basename(a) == "manage.py" and "test" in args[i + 1 : i + 2]:
            return Classification("test", "django")  # Django's runner prints unittest's summary
        if a == "-c" or not a.startswith("-"):
            return None  # inline code or another script: not recognised
        i += 2 if a in ("-W", "-X") else 1
    return None


def _classify_words(words: list[str], depth: int = 0) -> Classification | None:
    words = _strip_prefix(words)
    if not words or depth > 4:
        return None
    prog = os.path.basename(words[0])
    args = words[1:]
    if prog.endswith(".exe"):
        prog = prog[:-4]
    if runner := RUNNER_BY_NAME.get(prog):
        if runner.classify is not None:
            return _HOOKS[runner.classify](runner, words, depth + 1)
        kind = runner.select(args)
        return Classification(kind, runner.tool) if kind is not None else None
    if launcher := LAUNCHER_BY_NAME.get(prog):
        for verb in launcher.verbs:
            if tuple(args[: len(verb)]) == verb:
                rest = args[_skip_options(args, len(verb), launcher.value_opts) :]
                return _classify_words(rest, depth + 1)
        return None
    if _PYTHON_RE.match(prog):
        return _classify_python(args, depth)
    if prog in _SHELLS:
        for j, a in enumerate(args[:-1]):
            if a.startswith("-") and not a.startswith("--") and "c" in a:
                return classify_command(args[j + 1], _depth=depth + 1)
        return None
    if prog == "coverage" and args[:1] == ["run"]:
        # Code: the options end at "-m", which the usual option skipping would take for one.
        i = 1
        while i < len(args) and args[i].startswith("-") and args[i] != "-m":
            i += 2 if args[i] in _COVERAGE_VALUE_OPTS else 1
        return _classify_words(args[i + 1 :], depth + 1) if args[i : i + 1] == ["-m"] else None
    return None


def classify_command(command: str, _depth: int = 0) -> Classification | None:
    """Say whether a shell command runs tests, a build, a linter or a type checker.

    Looks through ``cd x && ...``, environment assignments, ``env``, ``timeout``, ``nice``,
    ``python -m``, ``uv run``, ``poetry run``, ``npx``, ``pnpm exec``, ``yarn``, ``bash -c`` and
    pipes. When several parts of the command line are recognised, the last test command wins,
    else the last recognised one (its summary is the one at the end of the output).

    Args:
        command: The command line as given to the shell.

    Returns:
        The classification, or None when the command is not a recognised verification.
    """
    found: list[Classification] = []
    for segment in _segments(command):
        cls = _classify_words(segment, _depth)
        if cls is not None:
            found.append(cls)
    tests = [c for c in found if c.kind == "test"]
    if tests:
        return tests[-1]
    return found[-1] if found else None
