"""The runners' summary formats: those that need code (each says why), then those that are data,
then the patterns that name failing tests.

Code parsers take the output's lines (ANSI-free) and whether lines were cut, and return
:class:`Parsed` or None when their format is not there. The tallies (:class:`GoTally`,
:class:`CargoTally`) add up lines and also read a whole stream as it passes
(see ``_stream``), so that counts stay complete when the output shown was cut.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from codemode.tools._verification._rules import Count, Line, Parsed, Parser, Summary, counts, last, squash

# ---------------------------------------------------------------------------------------------
# Tallies: formats that add up lines, readable from a whole stream
# ---------------------------------------------------------------------------------------------


class Tally(Protocol):
    """Adds up lines. In a raw stream, only the lines holding one of ``keys`` and matching
    ``keep`` (bytes, multiline) are handed to :meth:`line`."""

    keys: tuple[bytes, ...]
    keep: re.Pattern[bytes]

    def line(self, text: str) -> None:
        """Take one line (ANSI-free, no newline)."""

    def parsed(self) -> Parsed | None:
        """What the lines so far add up to, or None when none was of this format."""


# go prints "ok  \tpkg\t0.01s" (older versions, and copies with tabs expanded: spaces) and
# "FAIL\tpkg\t0.01s"; what follows the package tells them from TAP's "ok 1 - name" and jest's
# "FAIL file". Subtests are the indented "--- FAIL" lines.
_GO_OK_RE = re.compile(r"^ok\s+(?!\d+\s+-)(\S+)\s+(?:[\d.]+s\b|\(cached\)|\[no test files\])")
_GO_FAIL_PKG_RE = re.compile(r"^FAIL\s+(\S+)\s+([\d.]+s\b|\(cached\)|\[(?:build|setup) failed\])")
_GO_TEST_RE = re.compile(r"^\s*--- (FAIL|PASS|SKIP): (\S+)")
_GO_JSON_RE = re.compile(r'^\s*\{.*"Action":\s*"(?:pass|fail|skip|build-fail)"')


@dataclass
class GoTally:
    """``go test``: packages from the ok/FAIL lines, tests (subtests too, as gotestsum counts
    them) from the ``--- PASS/FAIL/SKIP`` lines, or all of it from ``go test -json`` events."""

    keys: tuple[bytes, ...] = (
        b"ok ",
        b"ok\t",
        b"FAIL",
        b"--- ",
        b'"pass"',
        b'"fail"',
        b'"skip"',
        b'"build-fail"',
    )
    keep: re.Pattern[bytes] = re.compile(
        rb'^(?:ok\s.*|FAIL\s.*|[ \t]*--- (?:FAIL|PASS|SKIP): .*|[ \t]*\{.*"Action":\s*"(?:pass|fail|skip|build-fail)".*)$',
        re.M,
    )
    ok_pkgs: list[str] = field(default_factory=list)
    fail_pkgs: list[str] = field(default_factory=list)
    broken: int = 0
    tests: Counter[str] = field(default_factory=Counter)
    as_json: bool = False

    def line(self, text: str) -> None:
        """Take one line."""
        if text.lstrip().startswith("{"):
            if _GO_JSON_RE.match(text):
                self._event(text)
        elif m := _GO_TEST_RE.match(text):
            self.tests[m.group(1)] += 1
        elif m := _GO_OK_RE.match(text):
            self.ok_pkgs.append(m.group(1))
        elif m := _GO_FAIL_PKG_RE.match(text):
            self.fail_pkgs.append(m.group(1))
            self.broken += m.group(2).startswith("[")

    def _event(self, text: str) -> None:
        # Code: a JSON event per line; test events carry "Test", package events do not.
        try:
            event: Any = json.loads(text)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        self.as_json = True
        action = event.get("Action")
        if event.get("Test"):
            self.tests[str(action).upper()] += 1
        elif action == "pass":
            self.ok_pkgs.append(str(event.get("Package")))
        elif action == "fail":
            self.fail_pkgs.append(str(event.get("Package")))
            self.broken += bool(event.get("FailedBuild"))

    def parsed(self) -> Parsed | None:
        """The packages and tests so far."""
        if not self.ok_pkgs and not self.fail_pkgs and not self.tests:
            return None
        ok, fail = len(self.ok_pkgs), len(self.fail_pkgs)
        summary = f"ok: {ok} package{'s' if ok != 1 else ''}"
        if fail:
            names = ", ".join(self.fail_pkgs[:3]) + (", ..." if fail > 3 else "")
            summary += f"; FAIL: {fail} ({names})"
        tests = self.tests
        # Without -v only failures print a line: passes are unknown, and a failing package
        # with no failing test line (a panic, a timeout) leaves the failures unknown.
        unknown_failures = bool(fail) and tests["FAIL"] == 0 and self.broken < fail
        return Parsed(
            passed=tests["PASS"] if tests["PASS"] or self.as_json else None,
            failed=None if unknown_failures else tests["FAIL"],
            skipped=tests["SKIP"] if tests["SKIP"] or self.as_json else None,
            errors=self.broken,
            summary_line=summary,
            tallied=True,
        )


_CARGO_RESULT_RE = re.compile(
    r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured; (\d+) filtered out"
)
# "could not compile `x` (lib) due to 2 previous errors" (newer cargo names the target; lib and
# lib test report the same errors), "... due to 2 previous errors" (older), or no count at all.
_CARGO_NOT_COMPILE_RE = re.compile(
    r"^error: could not compile `([^`]+)`(?: \([^)]*\))?(?:.*?due to (\d+) previous errors?)?.*$"
)
_CARGO_FINISHED_RE = re.compile(r"^\s*Finished .*target\(s\) in ")
# "Summary [   0.1s] 28 tests run: 27 passed, 1 failed, 0 skipped"; a cancelled run says "5/10".
_NEXTEST_RE = re.compile(r"^\s*Summary \[[^\]]*\]\s+(\d+)(?:/\d+)? tests? run: (.*)$")


@dataclass
class CargoTally:
    """cargo: one ``test result`` per test binary, added up; compile errors per crate; nextest's
    own ``Summary``, which wins (the libtest lines it shows are a failing test's captured output)."""

    keys: tuple[bytes, ...] = (b"test result: ", b"could not compile", b"Finished ", b"Summary [")
    keep: re.Pattern[bytes] = re.compile(
        rb"^(?:test result: .*|error: could not compile .*|[ \t]*Finished .*|[ \t]*Summary \[.*)$", re.M
    )
    results: list[re.Match[str]] = field(default_factory=list)
    compile_errors: dict[str, int] = field(default_factory=dict)
    last_compile_error: str | None = None
    nextest: str | None = None
    finished: str | None = None

    def line(self, text: str) -> None:
        """Take one line."""
        stripped = text.strip()
        if m := _CARGO_RESULT_RE.match(stripped):
            self.results.append(m)
        elif m := _CARGO_NOT_COMPILE_RE.match(stripped):
            crate, n = m.group(1), int(m.group(2) or 1)
            # The same crate's targets share their errors: the most any target reports.
            self.compile_errors[crate] = max(self.compile_errors.get(crate, 0), n)
            self.last_compile_error = m.group(0)
        elif _NEXTEST_RE.match(text):
            self.nextest = stripped
        elif _CARGO_FINISHED_RE.match(text):
            self.finished = stripped

    def parsed(self) -> Parsed | None:
        """The test binaries, nextest's summary or the build's outcome so far."""
        errors = sum(self.compile_errors.values()) if self.compile_errors else None
        if self.nextest is not None:
            m = _NEXTEST_RE.match(self.nextest)
            assert m is not None
            c = counts(m.group(2))
            return Parsed(
                passed=c.get("passed", 0),
                failed=c.get("failed", 0) + c.get("timed", 0),
                skipped=c.get("skipped", 0),
                errors=errors or 0,
                summary_line=self.nextest,
            )
        if self.results:
            results = self.results
            failing = [m for m in results if m.group(1) == "FAILED"]
            summary = (failing[0] if failing else results[-1]).group(0)
            if len(results) > 1:
                summary += f" ({len(results)} test binaries, {len(failing)} failed)"
            return Parsed(
                passed=sum(int(m.group(2)) for m in results),
                failed=sum(int(m.group(3)) for m in results),
                skipped=sum(int(m.group(4)) for m in results),
                errors=errors or 0,
                summary_line=summary,
                tallied=True,
            )
        if self.last_compile_error is not None:
            return Parsed(errors=errors, summary_line=self.last_compile_error, tallied=True)
        if self.finished is not None:
            return Parsed(errors=0, summary_line=self.finished)
        return None


def _tallied(make: type[GoTally] | type[CargoTally]) -> Parser:
    def parse(lines: list[str], cut: bool) -> Parsed | None:
        tally = make()
        for line in lines:
            tally.line(line)
        return tally.parsed()

    return parse


parse_go_test = _tallied(GoTally)
parse_cargo = _tallied(CargoTally)


# ---------------------------------------------------------------------------------------------
# Formats that need code
# ---------------------------------------------------------------------------------------------

_UNITTEST_RAN_RE = re.compile(r"^Ran (\d+) tests? in [\d.]+s$")
_UNITTEST_RESULT_RE = re.compile(r"^(OK|FAILED|NO TESTS RAN)(?: \(([^)]*)\))?$")


def parse_unittest(lines: list[str], cut: bool) -> Parsed | None:
    """unittest (and Django, pytest's unittest mode)."""
    # Code: the verdict is on one of the next lines after "Ran N tests", as key=value details,
    # and the counts are unknown without it.
    hit = last(lines, _UNITTEST_RAN_RE)
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
    return Parsed(
        passed=max(0, ran - failures - errors - skipped - others) if result else None,
        failed=failures if result else None,
        skipped=skipped if result else None,
        errors=errors if result else None,
        summary_line=summary,
    )


_JEST_RE = re.compile(r"^Tests:\s+(.*\d+ total)\s*$")
_JEST_SUITES_RE = re.compile(r"^Test Suites:\s+(.*\d+ total)\s*$")


def parse_jest(lines: list[str], cut: bool) -> Parsed | None:
    """jest's closing lines."""
    # Code: a suite that failed to run counts as an error only when no test failed.
    tests = last(lines, _JEST_RE)
    suites = last(lines, _JEST_SUITES_RE)
    if tests is None and suites is None:
        return None
    suite_counts = counts(suites[1].group(1)) if suites else {}
    if tests is None:
        return Parsed(
            errors=suite_counts.get("failed", 0), summary_line=squash(suites[1].group(0)) if suites else None
        )
    c = counts(tests[1].group(1))
    # A suite that failed to run (syntax error, import error) is reported only in "Test Suites".
    suite_errors = suite_counts.get("failed", 0) if c.get("failed", 0) == 0 else 0
    return Parsed(
        passed=c.get("passed", 0),
        failed=c.get("failed", 0),
        skipped=c.get("skipped", 0) + c.get("todo", 0),
        errors=suite_errors,
        summary_line=squash(tests[1].group(0)),
    )


def parse_jest_json(lines: list[str], cut: bool) -> Parsed | None:
    """``jest --json`` and ``vitest --reporter=json``: one JSON object (jest's shape)."""
    # Code: a JSON document, on one line (jest) or indented over many; its totals are exact and
    # it names every failing test.
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("{") and (start is None or '"numTotalTests"' in lines[i]):
            start = i
            if '"numTotalTests"' in lines[i]:
                break
    if start is None:
        return None
    text = "\n".join(lines[start:])
    if '"numTotalTests"' not in text:
        return None
    try:
        doc, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None  # cut or mixed with other output: the text summary (on stderr) is read instead
    if not isinstance(doc, dict) or not isinstance(doc.get("numTotalTests"), int):
        return None

    def num(key: str) -> int:
        value = doc.get(key)
        return value if isinstance(value, int) else 0

    failing: list[str] = []
    for suite in doc.get("testResults") or ():
        for test in (suite.get("assertionResults") or ()) if isinstance(suite, dict) else ():
            if isinstance(test, dict) and test.get("status") == "failed":
                failing.append(str(test.get("fullName") or test.get("title")))
    errors = num("numRuntimeErrorTestSuites")
    summary = (
        f"{num('numFailedTests')} failed, {num('numPassedTests')} passed, "
        f"{num('numPendingTests') + num('numTodoTests')} skipped, {num('numTotalTests')} total (JSON report)"
    )
    return Parsed(
        passed=num("numPassedTests"),
        failed=num("numFailedTests"),
        skipped=num("numPendingTests") + num("numTodoTests"),
        errors=errors,
        summary_line=summary,
        failing=failing,
    )


_MOCHA_RE = re.compile(r"^\s*(\d+) (passing|failing|pending)(?: \(([^)]*)\))?\s*$")
_MOCHA_PASSING_RE = re.compile(r"^\s*\d+ passing \(")


def parse_mocha(lines: list[str], cut: bool) -> Parsed | None:
    """mocha's spec reporter."""
    # Code: the summary is a block of lines starting at the last "N passing (...)".
    hit = last(lines, _MOCHA_PASSING_RE)
    if hit is None:
        return None
    c = {"passing": 0, "failing": 0, "pending": 0}
    parts = []
    for line in lines[hit[0] : hit[0] + 4]:
        m = _MOCHA_RE.match(line)
        if m:
            c[m.group(2)] = int(m.group(1))
            parts.append(line.strip())
    return Parsed(
        passed=c["passing"],
        failed=c["failing"],
        skipped=c["pending"],
        errors=0,
        summary_line=", ".join(parts),
    )


_PLAYWRIGHT_RE = re.compile(
    r"^\s+(\d+) (passed|failed|flaky|skipped|did not run|interrupted)(?: \([^)]*\))?\s*$"
)
_PLAYWRIGHT_FIELDS = {
    "passed": "passed", "flaky": "passed", "failed": "failed", "skipped": "skipped",
    "did not run": "skipped", "interrupted": "errors",
}  # fmt: skip


def parse_playwright(lines: list[str], cut: bool) -> Parsed | None:
    """Playwright's list/line/dot reporters."""
    # Code: one count per line ("  1 failed", then the failing tests indented below it, then
    # "  5 passed (3.2s)"), in any order, after the last "Running N tests" line.
    start = 0
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Running ") and " test" in lines[i]:
            start = i
            break
    values = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    parts = []
    for line in lines[start:]:
        if m := _PLAYWRIGHT_RE.match(line):
            values[_PLAYWRIGHT_FIELDS[m.group(2)]] += int(m.group(1))
            parts.append(line.strip())
    if not parts:
        return None
    return Parsed(
        passed=values["passed"],
        failed=values["failed"],
        skipped=values["skipped"],
        errors=values["errors"],
        summary_line=", ".join(parts),
    )


_NODE_RE = re.compile(r"^(?:#|ℹ) (tests|pass|fail|cancelled|skipped|todo) (\d+)\s*$")
_NODE_TESTS_RE = re.compile(r"^(?:#|ℹ) tests \d+\s*$")


def parse_node(lines: list[str], cut: bool) -> Parsed | None:
    """node --test (TAP and spec reporters)."""
    # Code: one count per line from the last "tests N" on, joined back into a summary line (the
    # spec reporter lists the failing tests again after them).
    hit = last(lines, _NODE_TESTS_RE)
    if hit is None:
        return None
    c: dict[str, int] = {}
    for line in lines[hit[0] : hit[0] + 10]:
        m = _NODE_RE.match(line.strip())
        if m:
            c[m.group(1)] = int(m.group(2))
    return Parsed(
        passed=c.get("pass"),
        failed=c.get("fail"),
        skipped=c.get("skipped", 0) + c.get("todo", 0),
        errors=c.get("cancelled", 0),
        summary_line=", ".join(f"{k} {v}" for k, v in c.items()),
    )


# ---------------------------------------------------------------------------------------------
# Formats that are data
# ---------------------------------------------------------------------------------------------

# "== 1 failed, 2 passed in 0.12s ==", "in 0.12s (0:00:00)", pytest < 5.1: "in 0.12 seconds".
PYTEST = Summary((
    Line(
        re.compile(
            r"^=*\s*(?P<counts>(?:\d+ (?:failed|passed|skipped|deselected|xfailed|xpassed|warnings?|errors?"
            r"|rerun)(?:, )?)+|no tests ran)\s+in\s+[\d.]+\s?s(?:econds)?(?:\s+\([\d:.]+\))?\s*=*$"
        ),
        words={"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "errors",
               "errors": "errors"},
        zero=("passed", "failed", "skipped", "errors"),
    ),
))  # fmt: skip
VITEST = Summary((
    Line(
        re.compile(r"^\s*Tests\s+(?P<counts>\d+ \w+(?: \| \d+ \w+)*)\s+\(\d+\)\s*$"),
        words={"passed": "passed", "failed": "failed", "skipped": "skipped", "todo": "skipped"},
        zero=("passed", "failed", "skipped", "errors"),
        summary="squash",
    ),
    Line(re.compile(r"^\s*Errors\s+(?P<errors>\d+) errors?"), summary="none", optional=True),
))  # fmt: skip
# gotestsum: "DONE 12 tests, 1 skipped, 2 failures in 0.5s" (the parts it has).
GOTESTSUM = Summary((
    Line(
        re.compile(
            r"^DONE (?P<total>\d+) tests?(?:, (?P<skipped>\d+) skipped)?(?:, (?P<failed>\d+) failures?)?"
            r"(?:, (?P<errors>\d+) errors?)? in [\d.]+m?s$"
        ),
        zero=("skipped", "failed", "errors"),
    ),
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
# mypy before 0.790 printed no total.
MYPY_ERRORS = Count(re.compile(r"^[^\s:][^:]*:\d+(?::\d+)?: error: "))
PYRIGHT = Summary((
    Line(re.compile(r"^\s*(?P<errors>\d+) errors?, \d+ warnings?, \d+ (?:informations?|notes?|infos?)\s*$")),
))  # fmt: skip
# "Found 3 errors." or, after --fix, "Found 3 errors (2 fixed, 1 remaining).": the errors are the
# remaining ones, so group 1 skips the total, and then "remaining)" must follow. Old ruff said
# "Found 3 error(s).".
RUFF = Summary((
    Line(
        re.compile(
            r"^(?:Found (\d+ errors? \(\d+ fixed, )?(?P<errors>\d+)(?(1) remaining\)|(?: errors?| error\(s\)))\."
            r"|All checks passed!)$"
        ),
        zero=("errors",),
    ),
))  # fmt: skip
# ruff format --check: "1 file would be reformatted, 3 files already formatted" or "4 files already formatted".
RUFF_FORMAT = Summary((
    Line(
        re.compile(r"^(?:(?P<errors>\d+) files? would be reformatted.*|(?P<clean>\d+ files? already formatted))$"),
    ),
))  # fmt: skip
ESLINT = Summary((
    Line(re.compile(r"^[✖✕xX] \d+ problems? \((?P<errors>\d+) errors?, \d+ warnings?\)"), summary="line"),
))  # fmt: skip
# prettier 3 counts the files ("Code style issues found in 2 files."); with one file, and in
# prettier 2, it says "in the above file(s)" after a "[warn] path" line per file, counted then.
PRETTIER = Summary((
    Line(
        re.compile(
            r"^(?:\[warn\] )?Code style issues found in (?P<errors>\d+) files?\b.*"
            r"|^(?P<clean>All matched files use Prettier code style!)$"
        ),
    ),
))  # fmt: skip
PRETTIER_FILES = Count(re.compile(r"^\[warn\] (?!Code style issues)\S"))
# golangci-lint v2: "2 issues:" then "* errcheck: 2"; "0 issues."; v1 prints only the issues.
GOLANGCI = Summary((Line(re.compile(r"^(?P<errors>\d+) issues?[.:]$")),))
GOLANGCI_ISSUES = Count(re.compile(r"^\S+\.go:\d+(?::\d+)?: .*\(\w[\w-]*\)$"))
# rustfmt --check: a "Diff in <file>:<line>:" (older: "Diff in <file> at line <n>:") per hunk.
CARGO_FMT = Count(re.compile(r"^Diff in \S.*?(?::\d+| at line \d+):$"))
# next build: "✓ Compiled successfully" (older: "Compiled successfully."), or "Failed to compile.".
NEXT_BUILD = Summary((
    Line(
        re.compile(
            r"^\s*(?:✓ )?(?:(?P<clean>Compiled successfully)\b.*|Failed to compile\.?|> Build error occurred.*"
            r"|Build error occurred.*)$"
        ),
    ),
))  # fmt: skip
# vite build: "✓ built in 1.20s"; "error during build:" or (vite 5+) "✗ Build failed in 12ms".
VITE_BUILD = Summary((
    Line(re.compile(r"^\s*(?:✓ )?(?:(?P<clean>built in [\d.]+m?s)|error during build:|✗ Build failed in .*)$")),
))  # fmt: skip
# flake8 --count prints the total last.
FLAKE8_TOTAL = Summary((Line(re.compile(r"^\s*(?P<errors>\d+)$"), tail=1),))
FLAKE8 = Count(re.compile(r"^[^\s:][^:]*:\d+:\d+: [A-Z]+\d+ "))
GO_ERRORS = Count(re.compile(r"^(?:\S+\.go:\d+(?::\d+)?: |vet: )"))
GRADLE = Summary((
    Line(
        re.compile(r"^(?P<total>\d+) tests? completed, (?P<failed>\d+) failed(?:, (?P<skipped>\d+) skipped)?"),
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
TEST_FORMATS: tuple[Parser, ...] = (
    PYTEST, parse_unittest, parse_cargo, parse_jest_json, parse_jest, VITEST, parse_mocha, parse_node,
    GOTESTSUM, parse_go_test, parse_playwright, GRADLE, MVN,
)  # fmt: skip
CHECK_FORMATS: tuple[Parser, ...] = (
    MYPY, PYRIGHT, RUFF, RUFF_FORMAT, ESLINT, PRETTIER, TSC, TSC_ERRORS, parse_cargo, GRADLE, MVN,
)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Failing tests, by name
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Names:
    """A pattern (multiline) whose ``name`` group names a failing test, matched on the output's
    text or, as bytes, on a raw stream (so it uses no non-ASCII character classes). Every line it
    matches holds one of ``keys``: a stream is searched for those (fast), and only the lines
    holding one are matched."""

    pattern: str
    keys: tuple[str, ...]

    @cached_property
    def text(self) -> re.Pattern[str]:
        """For text."""
        return re.compile(self.pattern, re.M)

    @cached_property
    def raw(self) -> re.Pattern[bytes]:
        """For a raw (UTF-8) stream."""
        return re.compile(self.pattern.encode(), re.M)


# pytest's short summary (and -v progress lines): "FAILED tests/a.py::test_x - assert ...".
PYTEST_NAMES = (
    Names(r"^(?:FAILED|ERROR) (?P<name>\S+::\S+|\S+\.py)", ("FAILED ", "ERROR ")),
    Names(r"^(?P<name>\S+::\S+) (?:FAILED|ERROR)\b", (" FAILED", " ERROR")),
)
UNITTEST_NAMES = (Names(r"^(?:FAIL|ERROR): (?P<name>\S+(?: \([\w.]+\))?)", ("FAIL: ", "ERROR: ")),)
GO_NAMES = (
    Names(r"^[ \t]*--- FAIL: (?P<name>\S+)", ("--- FAIL: ",)),
    Names(r'^[ \t]*\{.*"Action":\s*"fail".*"Test":\s*"(?P<name>(?:[^"\\]|\\.)+)"', ('"fail"',)),
)
# libtest: "test tests::fails ... FAILED"; nextest: "        FAIL [   0.004s] crate tests::fails"
# (the binary left out, so that the libtest line of its captured output names the same test).
CARGO_NAMES = (
    Names(r"^test (?P<name>\S+) \.\.\. FAILED\s*$", (" ... FAILED",)),
    Names(r"^[ \t]*(?:FAIL|TIMEOUT) \[[ \d.]+s\] (?:\S+ )?(?P<name>\S+)\s*$", ("FAIL [", "TIMEOUT [")),
)
# jest prints "● Suite › test" for each failure ("● Test suite failed to run" is a suite).
JEST_NAMES = (Names(r"^[ \t]*● (?!Test suite failed to run)(?P<name>.+?)\s*$", ("● ",)),)
VITEST_NAMES = (Names(r"^[ \t]*FAIL[ \t]+(?P<name>\S+ > .+?)\s*$", (" > ",)),)
# mocha numbers each failure where it ran, indented under its suite (the closing list repeats
# the numbers at two spaces, with the suite and the test on separate lines).
MOCHA_NAMES = (Names(r"^ {4,}\d+\) (?P<name>.+?)\s*$", (") ",)),)
# node --test: TAP's "not ok 2 - name", or the spec reporter's "✖ name (0.8ms)".
NODE_NAMES = (
    Names(r"^[ \t]*not ok \d+ - (?P<name>.+?)(?:\s+#.*)?$", ("not ok ",)),
    Names(r"^[ \t]*✖ (?!failing tests:)(?P<name>.+?) \([\d.]+m?s\)\s*$", ("✖ ",)),
)
# Playwright: "  1) [chromium] › a.spec.ts:3:1 › title ────" (no "[project] › " without projects).
PLAYWRIGHT_NAMES = (Names(r"^[ \t]+\d+\) (?P<name>(?:\[[^\]]+\] › )?\S+:\d+:\d+ › .+?)(?:\s|─)*$", (" › ",)),)
ALL_NAMES = (
    *PYTEST_NAMES, *UNITTEST_NAMES, *GO_NAMES, *CARGO_NAMES, *JEST_NAMES, *VITEST_NAMES, *MOCHA_NAMES,
    *NODE_NAMES, *PLAYWRIGHT_NAMES,
)  # fmt: skip
