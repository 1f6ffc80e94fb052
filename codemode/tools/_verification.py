"""Recognise test, build, lint and type-check commands and read their summaries.

:func:`classify_command` looks at a shell command line (through ``cd x &&``, environment
assignments, ``timeout``, ``python -m``, ``uv run``, ``npx`` and friends, and pipes) and says
which kind of verification it runs and with which tool. :func:`parse_verification` reads that
tool's own summary from the end of the output into counts, and :func:`failure_summary` turns the
result into one line a model can read when the output itself was cut.

Counts are ``None`` when the output does not say. ``ok`` is the overall verdict: the exit code
was 0 and no failure or error was reported.

The tools are data: :data:`RUNNERS` (names, kind, the subcommands or arguments that select it,
its summary formats) and :data:`LAUNCHERS` (``uv run``, ``npx``, ... that run another command).
Most summary formats are data too (:class:`Summary` of :class:`Line` rules, :class:`Count`); a
function is kept only for a format that needs code, and says why.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from codemode.tools._capture import OMITTED_MARKER_RE
from codemode.tools._terminal import strip_ansi

__all__ = ["Classification", "Verification", "classify_command", "failure_summary", "parse_verification"]

Kind = Literal["test", "build", "lint", "typecheck"]

# Only the end of the output is read: runners print their summary last.
_TAIL_CHARS = 64 * 1024


@dataclass(frozen=True)
class Classification:
    """What a command verifies and with which tool.

    Attributes:
        kind: ``"test"``, ``"build"``, ``"lint"`` or ``"typecheck"``.
        tool: The runner, e.g. ``"pytest"``, ``"cargo"``, ``"npm"``, ``"make"``.
    """

    kind: Kind
    tool: str

    def to_dict(self) -> dict[str, Any]:
        """Return the classification as a JSON-serialisable dict."""
        return asdict(self)


@dataclass(frozen=True)
class Verification:
    """A verification command's outcome, read from its own summary.

    Attributes:
        kind: As in :class:`Classification`.
        tool: As in :class:`Classification`.
        ok: True when the exit code was 0 and no failure or error was reported; False when
            either says otherwise; None when the exit code is unknown and nothing failed.
        passed: Tests that passed, or None when unknown.
        failed: Tests that failed, or None when unknown.
        skipped: Tests skipped, or None when unknown.
        errors: Errors reported (test errors, compile errors, lint or type errors), or None.
        summary_line: The runner's own summary line (several joined by ``"; "``), or None.
    """

    kind: Kind
    tool: str
    ok: bool | None
    passed: int | None = None
    failed: int | None = None
    skipped: int | None = None
    errors: int | None = None
    summary_line: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the verification as a JSON-serialisable dict."""
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------

_ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_COUNT_RE = re.compile(r"(\d+) (\w+)")
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
_SCRIPT_RUNNERS = ("npm", "pnpm", "yarn", "bun")
_NPM_NON_SCRIPT = frozenset(
    {"install", "i", "ci", "add", "remove", "rm", "uninstall", "update", "up", "upgrade", "init", "create",
     "publish", "pack", "link", "outdated", "audit", "config", "info", "view", "why", "list", "ls",
     "login", "logout", "version", "cache", "store", "prune", "dedupe", "set", "import", "global"}
)  # fmt: skip
_UV_VALUE_OPTS = frozenset(
    {"--with", "--with-requirements", "--with-editable", "--python", "-p", "--package", "--extra",
     "--group", "--env-file", "--directory", "--project", "--index", "--index-url", "--extra-index-url",
     "--from", "-w", "--only-group", "--no-group", "--cache-dir", "--config-file"}
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


def _gradle_kind(runner: Runner, words: list[str], depth: int) -> Classification:
    # Code: a task is named by its last path part (":app:test") and may end in "Test"/"Check".
    tasks = [a.rsplit(":", 1)[-1] for a in words[1:] if not a.startswith("-")]
    if any(t in ("test", "check") or t.endswith("Test") or t.endswith("Check") for t in tasks):
        return Classification("test", runner.tool)
    return Classification("build", runner.tool)


def _script_runner_kind(runner: Runner, words: list[str], depth: int) -> Classification | None:
    return _classify_script_runner(runner.tool, words, depth)


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
    if runner := _RUNNER_BY_NAME.get(prog):
        if runner.classify is not None:
            return runner.classify(runner, words, depth + 1)
        kind = runner.select(args)
        return Classification(kind, runner.tool) if kind is not None else None
    if launcher := _LAUNCHER_BY_NAME.get(prog):
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


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


@dataclass
class _Parsed:
    passed: int | None = None
    failed: int | None = None
    skipped: int | None = None
    errors: int | None = None
    summary_line: str | None = None


# A summary format: reads the output's lines (``cut``: lines were left out) into counts, or None
# when the format is not there.
_Parser = Callable[[list[str], bool], "_Parsed | None"]

_Field = Literal["passed", "failed", "skipped", "errors"]
_FIELDS: tuple[_Field, ...] = ("passed", "failed", "skipped", "errors")


@dataclass(frozen=True)
class Line:
    """A summary rule: the last line that ``pattern`` matches (searched, not anchored).

    Named groups give the counts: ``passed``, ``failed``, ``skipped``, ``errors``; ``total``
    (``passed`` is then what the others leave); ``counts``, text such as ``3 passed, 1 failed``
    whose words ``words`` maps to fields (several words may add up into one field).

    Attributes:
        pattern: The line's pattern.
        words: For the ``counts`` group: word -> field.
        zero: Fields that are 0 when this line matches without giving them.
        summary: What the line adds to ``summary_line``: the match, the whole line, the match
            with runs of spaces squashed, or nothing; all stripped.
        tail: Only the last ``tail`` lines are searched (None: all).
        optional: The line only adds counts to the other lines; alone it is not a summary.
    """

    pattern: re.Pattern[str]
    words: Mapping[str, _Field] = field(default_factory=dict)
    zero: tuple[_Field, ...] = ()
    summary: Literal["match", "line", "squash", "none"] = "match"
    tail: int | None = None
    optional: bool = False

    def find(self, lines: list[str]) -> re.Match[str] | None:
        """The last matching line's match, or None."""
        stop = -1 if self.tail is None else max(-1, len(lines) - 1 - self.tail)
        search = self.pattern.search
        for i in range(len(lines) - 1, stop, -1):
            if m := search(lines[i]):
                return m
        return None

    def read(self, m: re.Match[str], into: dict[str, int]) -> str | None:
        """Put the match's counts into ``into``; return its part of the summary line."""
        for zeroed in self.zero:
            into[zeroed] = 0
        for name, value in m.groupdict().items():
            if value is None:
                continue
            if name == "counts":
                for n, word in _COUNT_RE.findall(value):
                    if target := self.words.get(word):
                        into[target] = into.get(target, 0) + int(n)
            else:
                into[name] = int(value)
        if self.summary == "match":
            return m.group(0).strip()
        if self.summary == "line":
            return m.string.strip()
        if self.summary == "squash":
            return _squash(m.group(0))
        return None


@dataclass(frozen=True, eq=False)
class Summary:
    """A summary format as data: its lines, read together (counts of later lines win; the
    summary line is their parts joined by ``"; "``)."""

    lines: tuple[Line, ...]

    def __call__(self, lines: list[str], cut: bool) -> _Parsed | None:
        values: dict[str, int] = {}
        parts: list[str] = []
        found = False
        for rule in self.lines:
            m = rule.find(lines)
            if m is not None:
                found = found or not rule.optional
                if (part := rule.read(m, values)) is not None:
                    parts.append(part)
        if not found:
            return None
        total = values.pop("total", None)
        if total is not None and "passed" not in values:
            values["passed"] = total - sum(values.get(f, 0) for f in ("failed", "errors", "skipped"))
        get = values.get
        return _Parsed(get("passed"), get("failed"), get("skipped"), get("errors"), "; ".join(parts))


@dataclass(frozen=True, eq=False)
class Count:
    """A summary format as data, for tools that print one line per problem and no total: the
    number of lines ``pattern`` matches are the errors (unknown when lines were cut); the first
    one is the summary line."""

    pattern: re.Pattern[str]

    def __call__(self, lines: list[str], cut: bool) -> _Parsed | None:
        search = self.pattern.search
        matching = [line for line in lines if search(line)]
        if not matching:
            return None
        return _Parsed(errors=None if cut else len(matching), summary_line=matching[0].strip())


def _counts(text: str) -> dict[str, int]:
    """``{"passed": 3, "failed": 1}`` from text such as ``3 passed, 1 failed``."""
    return {word: int(n) for n, word in _COUNT_RE.findall(text)}


def _last(lines: list[str], pattern: re.Pattern[str]) -> tuple[int, re.Match[str]] | None:
    for i in range(len(lines) - 1, -1, -1):
        m = pattern.search(lines[i])
        if m:
            return i, m
    return None


def _squash(line: str) -> str:
    return " ".join(line.split())


# The formats that need code (each says why); the ones that are data come after them.

_UNITTEST_RAN_RE = re.compile(r"^Ran (\d+) tests? in [\d.]+s$")
_UNITTEST_RESULT_RE = re.compile(r"^(OK|FAILED|NO TESTS RAN)(?: \(([^)]*)\))?$")


def _parse_unittest(lines: list[str], cut: bool) -> _Parsed | None:
    # Code: the verdict is on one of the next lines after "Ran N tests", as key=value details,
    # and the counts are unknown without it.
    hit = _last(lines, _UNITTEST_RAN_RE)
    if hit is None:
        return None
    index, ran_match = hit
    ran = int(ran_match.group(1))
    result = None
    for line in lines[index + 1 : index + 4]:
        result = _UNITTEST_RESULT_RE.match(line.strip())
        if result:
            break
    details: dict[str, int] = {}
    if result and result.group(2):
        for item in result.group(2).split(","):
            key, _, value = item.strip().partition("=")
            if value.isdigit():
                details[key] = int(value)
    failures, errors, skipped = (
        details.get("failures", 0),
        details.get("errors", 0),
        details.get("skipped", 0),
    )
    others = details.get("expected failures", 0) + details.get("unexpected successes", 0)
    summary = ran_match.group(0) + (f"; {result.group(0)}" if result else "")
    return _Parsed(
        passed=max(0, ran - failures - errors - skipped - others) if result else None,
        failed=failures if result else None,
        skipped=skipped if result else None,
        errors=errors if result else None,
        summary_line=summary,
    )


_CARGO_RESULT_RE = re.compile(
    r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored; "
    r"(\d+) measured; (\d+) filtered out"
)
_CARGO_NOT_COMPILE_RE = re.compile(
    r"^error: could not compile `[^`]+`(?:.*?due to (\d+) previous errors?)?.*$"
)
_CARGO_FINISHED_RE = re.compile(r"^\s*Finished .*target\(s\) in ")
_NEXTEST_RE = re.compile(r"^\s*Summary \[[^\]]*\]\s+(\d+) tests? run: (.*)$")


def _parse_cargo(lines: list[str], cut: bool) -> _Parsed | None:
    # Code: one "test result" per test binary, added up, plus compile errors, nextest, Finished.
    results = [m for m in (_CARGO_RESULT_RE.match(line.strip()) for line in lines) if m]
    compile_errors = [m for m in (_CARGO_NOT_COMPILE_RE.match(line.strip()) for line in lines) if m]
    errors = sum(int(m.group(1) or 1) for m in compile_errors) if compile_errors else None
    if results:
        failing = [m for m in results if m.group(1) == "FAILED"]
        summary = (failing or results)[-1 if not failing else 0].group(0)
        if len(results) > 1:
            summary += f" ({len(results)} test binaries, {len(failing)} failed)"
        return _Parsed(
            passed=sum(int(m.group(2)) for m in results),
            failed=sum(int(m.group(3)) for m in results),
            skipped=sum(int(m.group(4)) for m in results),
            errors=errors if errors is not None else 0,
            summary_line=summary,
        )
    nextest = _last(lines, _NEXTEST_RE)
    if nextest:
        counts = _counts(nextest[1].group(2))
        return _Parsed(
            passed=counts.get("passed", 0),
            failed=counts.get("failed", 0),
            skipped=counts.get("skipped", 0),
            errors=errors if errors is not None else 0,
            summary_line=nextest[1].group(0).strip(),
        )
    if compile_errors:
        return _Parsed(errors=errors, summary_line=compile_errors[-1].group(0).strip())
    finished = _last(lines, _CARGO_FINISHED_RE)
    if finished:
        return _Parsed(errors=0, summary_line=finished[1].string.strip())
    return None


# go prints "ok  \tpkg\t0.01s" and "FAIL\tpkg\t0.01s": the tab tells them from TAP's "ok 1 - name".
_GO_OK_RE = re.compile(r"^ok *\t(\S+)")
_GO_FAIL_PKG_RE = re.compile(r"^FAIL *\t(\S+)(?:\s+(.*))?$")
_GO_TEST_RE = re.compile(r"^--- (FAIL|PASS|SKIP): ")


def _parse_go_test(lines: list[str], cut: bool) -> _Parsed | None:
    # Code: no total line; packages and tests are tallied, and a summary line is made up.
    ok_pkgs: list[str] = []
    fail_pkgs: list[str] = []
    broken = 0
    tests = {"FAIL": 0, "PASS": 0, "SKIP": 0}
    for line in lines:
        if m := _GO_OK_RE.match(line):
            ok_pkgs.append(m.group(1))
        elif m := _GO_FAIL_PKG_RE.match(line):
            fail_pkgs.append(m.group(1))
            if m.group(2) and ("[build failed]" in m.group(2) or "[setup failed]" in m.group(2)):
                broken += 1
        elif m := _GO_TEST_RE.match(line):
            tests[m.group(1)] += 1
    if not ok_pkgs and not fail_pkgs:
        return None
    summary = f"ok: {len(ok_pkgs)} package{'s' if len(ok_pkgs) != 1 else ''}"
    if fail_pkgs:
        names = ", ".join(fail_pkgs[:3]) + (", ..." if len(fail_pkgs) > 3 else "")
        summary += f"; FAIL: {len(fail_pkgs)} ({names})"
    unknown_failures = bool(fail_pkgs) and tests["FAIL"] == 0 and broken < len(fail_pkgs)
    return _Parsed(
        passed=None if cut or not tests["PASS"] else tests["PASS"],
        failed=None if cut or unknown_failures else tests["FAIL"],
        skipped=None if cut or not tests["SKIP"] else tests["SKIP"],
        errors=broken,
        summary_line=summary,
    )


_JEST_RE = re.compile(r"^Tests:\s+(.*\d+ total)\s*$")
_JEST_SUITES_RE = re.compile(r"^Test Suites:\s+(.*\d+ total)\s*$")


def _parse_jest(lines: list[str], cut: bool) -> _Parsed | None:
    # Code: a suite that failed to run counts as an error only when no test failed.
    tests = _last(lines, _JEST_RE)
    suites = _last(lines, _JEST_SUITES_RE)
    if tests is None and suites is None:
        return None
    suite_counts = _counts(suites[1].group(1)) if suites else {}
    if tests is None:
        return _Parsed(
            errors=suite_counts.get("failed", 0), summary_line=_squash(suites[1].group(0)) if suites else None
        )
    counts = _counts(tests[1].group(1))
    # A suite that failed to run (syntax error, import error) is reported only in "Test Suites".
    suite_errors = suite_counts.get("failed", 0) if counts.get("failed", 0) == 0 else 0
    return _Parsed(
        passed=counts.get("passed", 0),
        failed=counts.get("failed", 0),
        skipped=counts.get("skipped", 0) + counts.get("todo", 0),
        errors=suite_errors,
        summary_line=_squash(tests[1].group(0)),
    )


_MOCHA_RE = re.compile(r"^\s*(\d+) (passing|failing|pending)(?: \(([^)]*)\))?\s*$")
_MOCHA_PASSING_RE = re.compile(r"^\s*\d+ passing \(")


def _parse_mocha(lines: list[str], cut: bool) -> _Parsed | None:
    # Code: the summary is a block of lines starting at the last "N passing (...)".
    hit = _last(lines, _MOCHA_PASSING_RE)
    if hit is None:
        return None
    counts = {"passing": 0, "failing": 0, "pending": 0}
    parts = []
    for line in lines[hit[0] : hit[0] + 4]:
        m = _MOCHA_RE.match(line)
        if m:
            counts[m.group(2)] = int(m.group(1))
            parts.append(line.strip())
    return _Parsed(
        passed=counts["passing"],
        failed=counts["failing"],
        skipped=counts["pending"],
        errors=0,
        summary_line=", ".join(parts),
    )


_NODE_RE = re.compile(r"^(?:#|ℹ) (tests|pass|fail|cancelled|skipped|todo) (\d+)\s*$")


def _parse_node(lines: list[str], cut: bool) -> _Parsed | None:
    # Code: one count per line near the end, joined back into a summary line.
    counts: dict[str, int] = {}
    for line in lines[-40:]:
        m = _NODE_RE.match(line.strip())
        if m:
            counts[m.group(1)] = int(m.group(2))
    if "tests" not in counts:
        return None
    summary = ", ".join(f"{k} {v}" for k, v in counts.items())
    return _Parsed(
        passed=counts.get("pass"),
        failed=counts.get("fail"),
        skipped=counts.get("skipped", 0) + counts.get("todo", 0),
        errors=counts.get("cancelled", 0),
        summary_line=summary,
    )


# The formats that are data.

PYTEST = Summary((
    Line(
        re.compile(
            r"^=*\s*(?P<counts>(?:\d+ (?:failed|passed|skipped|deselected|xfailed|xpassed|warnings?|errors?"
            r"|rerun)(?:, )?)+|no tests ran)\s+in\s+[\d.]+s(?:\s+\([\d:.]+\))?\s*=*$"
        ),
        words={"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "errors",
               "errors": "errors"},
        zero=_FIELDS,
    ),
))  # fmt: skip
VITEST = Summary((
    Line(
        re.compile(r"^\s*Tests\s+(?P<counts>\d+ \w+(?: \| \d+ \w+)*)\s+\(\d+\)\s*$"),
        words={"passed": "passed", "failed": "failed", "skipped": "skipped", "todo": "skipped"},
        zero=_FIELDS,
        summary="squash",
    ),
    Line(re.compile(r"^\s*Errors\s+(?P<errors>\d+) errors?"), summary="none", optional=True),
))  # fmt: skip
TSC = Summary((Line(re.compile(r"^Found (?P<errors>\d+) errors?\b.*$")),))
TSC_ERRORS = Count(re.compile(r"(?:\(\d+,\d+\): error TS\d+:|:\d+:\d+ - error TS\d+:)|^error TS\d+:"))
# Success and failure in one pattern: the later of the two lines wins.
MYPY = Summary((
    Line(
        re.compile(r"^(?:Found (?P<errors>\d+) errors? in \d+ files?.*|Success: no issues found.*)$"),
        zero=("errors",),
    ),
))  # fmt: skip
PYRIGHT = Summary((
    Line(re.compile(r"^(?P<errors>\d+) errors?, \d+ warnings?, \d+ (?:informations?|notes?|infos?)\s*$")),
))  # fmt: skip
# "Found 3 errors." or, after --fix, "Found 3 errors (2 fixed, 1 remaining).": the errors are the
# remaining ones, so group 1 skips the total, and then "remaining)" must follow.
RUFF = Summary((
    Line(
        re.compile(
            r"^(?:Found (\d+ errors? \(\d+ fixed, )?(?P<errors>\d+)(?(1) remaining\)| errors?)\."
            r"|All checks passed!)$"
        ),
        zero=("errors",),
    ),
))  # fmt: skip
ESLINT = Summary((
    Line(re.compile(r"^[✖✕xX] \d+ problems? \((?P<errors>\d+) errors?, \d+ warnings?\)"), summary="line"),
))  # fmt: skip
# flake8 --count prints the total last.
FLAKE8_TOTAL = Summary((Line(re.compile(r"^\s*(?P<errors>\d+)$"), tail=1),))
FLAKE8 = Count(re.compile(r"^[^\s:][^:]*:\d+:\d+: [A-Z]+\d+ "))
GO_ERRORS = Count(re.compile(r"^(?:\S+\.go:\d+(?::\d+)?: |vet: )"))
GRADLE = Summary((
    Line(
        re.compile(
            r"^(?P<total>\d+) tests? completed, (?P<failed>\d+) failed(?:, (?P<skipped>\d+) skipped)?"
        ),
        zero=("skipped",),
        summary="line",
    ),
    Line(re.compile(r"^BUILD (SUCCESSFUL|FAILED) in .*$")),
))  # fmt: skip
MVN = Summary((
    Line(
        re.compile(
            r"Tests run: (?P<total>\d+), Failures: (?P<failed>\d+), Errors: (?P<errors>\d+), "
            r"Skipped: (?P<skipped>\d+)"
        ),
    ),
    Line(re.compile(r"^\[(?:INFO|ERROR)\] BUILD (SUCCESS|FAILURE)\s*$")),
))  # fmt: skip
MAKE_ERROR = Summary((Line(re.compile(r"^g?make(?:\[\d+\])?: \*\*\* .*$")),))

# For runners that print the summary of whatever they run (npm test, make, tox), and for tools
# not in the table: every test format, then every check format (the other way round when the
# command is not a test run).
_TEST_FORMATS: tuple[_Parser, ...] = (
    PYTEST, _parse_unittest, _parse_cargo, _parse_jest, VITEST, _parse_mocha, _parse_node, _parse_go_test,
    GRADLE, MVN,
)  # fmt: skip
_CHECK_FORMATS: tuple[_Parser, ...] = (
    MYPY, PYRIGHT, RUFF, ESLINT, TSC, TSC_ERRORS, _parse_cargo, GRADLE, MVN,
)  # fmt: skip
_ANY_TEST = tuple(dict.fromkeys(_TEST_FORMATS + _CHECK_FORMATS))
_ANY_CHECK = tuple(dict.fromkeys(_CHECK_FORMATS + _TEST_FORMATS))


# ---------------------------------------------------------------------------------------------
# The runners
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runner:
    """A verification tool, as data: how a command line selects it and how its output reads.

    Attributes:
        tool: The name reported in :class:`Classification`.
        names: Executables (and ``python -m`` modules) that run it.
        kind: Its kind; with ``subcommands``, the kind of any subcommand not listed there; with
            ``flag``, the kind when the flag is given; with ``targets``, the kind when none is.
        subcommands: The first word after the options selects the kind (None: not a verification).
        options: The characters that start the options skipped before the subcommand ("" when
            the subcommand comes first); ``--`` ends them.
        flag: An argument that must appear anywhere (``node --test``).
        targets: Any argument among these selects that kind (``mvn clean verify``).
        classify: Code, for the runners whose command line needs it (make, gradle, npm & co.).
        kinds: The kinds that code reports (the other fields say so themselves).
        formats: Its summary formats, tried in order until one is found in the output.
        test_formats: Formats tried first when the command runs tests (``go test``).
        delegates: It prints the summary of what it runs (``npm test``, ``make``, ``tox``): every
            known format is tried before its own.
        quiet: Kinds for which it prints nothing when all is well: exit 0 with no summary means
            zero errors.
    """

    tool: str
    names: tuple[str, ...]
    kind: Kind | None = None
    subcommands: Mapping[str, Kind | None] | None = None
    options: str = "-"
    flag: str | None = None
    targets: Mapping[str, Kind] | None = None
    classify: Callable[[Runner, list[str], int], Classification | None] | None = None
    kinds: frozenset[Kind] = frozenset()
    formats: tuple[_Parser, ...] = ()
    test_formats: tuple[_Parser, ...] = ()
    delegates: bool = False
    quiet: frozenset[Kind] = frozenset()

    def reports(self) -> frozenset[Kind]:
        """The kinds it can report."""
        said = [self.kind, *(self.subcommands or {}).values(), *(self.targets or {}).values()]
        return self.kinds | frozenset(k for k in said if k is not None)

    def select(self, args: list[str]) -> Kind | None:
        """The kind this command line runs, or None."""
        if self.flag is not None:
            return self.kind if self.flag in args else None
        if self.targets is not None:
            for a in args:
                if a in self.targets:
                    return self.targets[a]
            return self.kind
        if self.subcommands is None:
            return self.kind
        i = 0
        if self.options:
            while i < len(args) and args[i][:1] and args[i][0] in self.options and args[i] != "--":
                i += 1
            if args[i : i + 1] == ["--"]:
                i += 1
        if i >= len(args) or not args[i]:
            return None
        return self.subcommands.get(args[i], self.kind)


@dataclass(frozen=True)
class Launcher:
    """A command that runs the rest of its arguments as a command (``uv run``, ``npx``).

    Attributes:
        names: Its executables.
        verbs: The words that must follow the name, tried in order (``()``: none).
        value_opts: Its options that take a value, skipped with it before the command.
    """

    names: tuple[str, ...]
    verbs: tuple[tuple[str, ...], ...] = ((),)
    value_opts: frozenset[str] = frozenset()


_CARGO_SUBCOMMANDS: dict[str, Kind | None] = {
    "test": "test", "t": "test", "nextest": "test", "build": "build", "b": "build", "check": "build",
    "c": "build", "clippy": "lint",
}  # fmt: skip
_RUFF_NOT_LINT = ("format", "version", "rule", "config", "linter", "clean", "server", "analyze", "help")

RUNNERS: tuple[Runner, ...] = (
    Runner("pytest", ("pytest", "py.test"), "test", formats=(PYTEST,)),
    Runner("unittest", ("unittest",), "test", formats=(_parse_unittest,)),
    # Django's runner prints unittest's summary.
    Runner("django", ("manage.py",), subcommands={"test": "test"}, options="", formats=(_parse_unittest,)),
    Runner("tox", ("tox",), "test", delegates=True),
    Runner("nox", ("nox",), "test", delegates=True),
    Runner("mypy", ("mypy", "dmypy"), "typecheck", formats=(MYPY,)),
    Runner("pyright", ("pyright", "basedpyright"), "typecheck", formats=(PYRIGHT,)),
    Runner("flake8", ("flake8",), "lint", formats=(FLAKE8_TOTAL, FLAKE8), quiet=frozenset({"lint"})),
    Runner("ruff", ("ruff",), "lint", subcommands=dict.fromkeys(_RUFF_NOT_LINT), formats=(RUFF,)),
    Runner("jest", ("jest",), "test", formats=(_parse_jest,)),
    Runner("vitest", ("vitest",), "test", formats=(VITEST,)),
    Runner("mocha", ("mocha", "_mocha"), "test", formats=(_parse_mocha,)),
    Runner("node", ("node",), "test", flag="--test", formats=(_parse_node,)),
    Runner("tsc", ("tsc", "vue-tsc"), "typecheck", formats=(TSC, TSC_ERRORS), quiet=frozenset({"typecheck"})),
    Runner("eslint", ("eslint",), "lint", formats=(ESLINT,), quiet=frozenset({"lint"})),
    *(Runner(name, (name,), classify=_script_runner_kind, delegates=True) for name in _SCRIPT_RUNNERS),
    Runner(
        "go",
        ("go",),
        subcommands={"test": "test", "build": "build", "vet": "lint"},
        options="",
        formats=(GO_ERRORS,),
        test_formats=(_parse_go_test,),
        quiet=frozenset({"build", "lint"}),
    ),
    # cargo +nightly -q test
    Runner("cargo", ("cargo",), subcommands=_CARGO_SUBCOMMANDS, options="-+", formats=(_parse_cargo,)),
    Runner("make", ("make", "gmake"), classify=_make_kind, formats=(MAKE_ERROR,), delegates=True),
    Runner(
        "gradle",
        ("gradle", "gradlew"),
        classify=_gradle_kind,
        kinds=frozenset({"test", "build"}),
        formats=(GRADLE,),
    ),
    Runner(
        "mvn",
        ("mvn", "mvnw"),
        "build",
        targets={"test": "test", "verify": "test", "integration-test": "test"},
        formats=(MVN,),
    ),
)

LAUNCHERS: tuple[Launcher, ...] = (
    Launcher(("uv",), (("run",), ("tool", "run")), _UV_VALUE_OPTS),
    Launcher(("uvx", "bunx", "pipx"), (("run",), ()), _UV_VALUE_OPTS),
    Launcher(
        ("poetry", "pipenv", "pdm", "hatch", "rye", "conda", "mamba"),
        (("run",),),
        frozenset({"-n", "--name", "-p", "--prefix", "-e", "--env"}),
    ),
    Launcher(("npx",), ((),), frozenset({"-p", "--package"})),
)

_RUNNER_BY_NAME = {name: r for r in RUNNERS for name in r.names}
_RUNNER_BY_TOOL = {r.tool: r for r in RUNNERS}
_LAUNCHER_BY_NAME = {name: launcher for launcher in LAUNCHERS for name in launcher.names}
_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})
_COVERAGE_VALUE_OPTS = frozenset({"--rcfile", "--source", "--include", "--omit", "--data-file", "--context"})


def _formats(runner: Runner, kind: Kind) -> tuple[_Parser, ...]:
    anything = _ANY_TEST if kind == "test" else _ANY_CHECK
    own = runner.test_formats + runner.formats if kind == "test" else runner.formats
    if runner.delegates:
        return anything + own
    return own if kind in runner.reports() else anything


# The formats to try for each (tool, kind); any other pair tries every format.
_FORMATS = {(r.tool, kind): _formats(r, kind) for r in RUNNERS for kind in get_args(Kind)}


def parse_verification(cls: Classification, output: str, exit_code: int | None) -> Verification:
    """Read a verification command's own summary from (the end of) its output.

    Only the last 64 KiB of ``output`` are read. Output that carries a truncation marker from
    :class:`~codemode.tools._capture.StreamCapture` still parses; counts that would come from
    counting lines (flake8, go) are then None, since lines were cut.

    Args:
        cls: The command's classification.
        output: The command's output (cleaned or raw; escape sequences are ignored).
        exit_code: The exit code, or None when unknown (still running, lost).

    Returns:
        The verification; a non-zero exit code always makes ``ok`` False.
    """
    text = strip_ansi(output[-_TAIL_CHARS:]).replace("\r\n", "\n").replace("\r", "\n")
    cut = bool(OMITTED_MARKER_RE.search(text)) or len(output) > _TAIL_CHARS
    lines = [line.rstrip() for line in text.split("\n")]
    if len(output) > _TAIL_CHARS:
        lines = lines[1:]  # the first line is probably partial
    runner = _RUNNER_BY_TOOL.get(cls.tool)
    parsed: _Parsed | None = None
    formats = _FORMATS.get((cls.tool, cls.kind), _ANY_TEST if cls.kind == "test" else _ANY_CHECK)
    for parser in formats:
        parsed = parser(lines, cut)
        if parsed is not None:
            break
    if parsed is None:
        parsed = _Parsed()
        if exit_code == 0 and runner is not None and cls.kind in runner.quiet:
            parsed.errors = 0
    problems = (parsed.failed or 0) > 0 or (parsed.errors or 0) > 0
    ok: bool | None
    if exit_code is None:
        ok = False if problems else None
    else:
        ok = exit_code == 0 and not problems
    return Verification(
        kind=cls.kind,
        tool=cls.tool,
        ok=ok,
        passed=parsed.passed,
        failed=parsed.failed,
        skipped=parsed.skipped,
        errors=parsed.errors,
        summary_line=parsed.summary_line,
    )


def failure_summary(v: Verification) -> str | None:
    """One short line for the model when a failing run's output was cut.

    For example ``"pytest: 3 failed, 10 passed — == 3 failed, 10 passed in 0.52s =="``.

    Args:
        v: The verification.

    Returns:
        The line, or None when the run did not fail (``ok`` is True or unknown with nothing
        failed).
    """
    if v.ok is not False:
        return None
    counts = []
    for value, one, many in (
        (v.failed, "failed", "failed"),
        (v.errors, "error", "errors"),
        (v.passed, "passed", "passed"),
        (v.skipped, "skipped", "skipped"),
    ):
        if value:
            counts.append(f"{value} {one if value == 1 else many}")
    head = f"{v.tool}: {', '.join(counts) if counts else 'failed'}"
    return f"{head} — {v.summary_line}" if v.summary_line else head
