"""Reading a verification command's outcome from its output: :func:`parse_verification`, and
:func:`failure_summary`, one line for a model when the output itself was cut."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

from codemode.tools._capture import OMITTED_MARKER_RE
from codemode.tools._terminal import strip_ansi
from codemode.tools._verification._classify import Classification
from codemode.tools._verification._formats import ALL_NAMES, Names
from codemode.tools._verification._rules import Kind, Parsed
from codemode.tools._verification._runners import RUNNER_BY_TOOL, formats_for
from codemode.tools._verification._stream import StreamScan

__all__ = ["Verification", "VerificationData", "failure_summary", "parse_verification", "scan_for"]

# Only the end of the output is read: runners print their summary last.
_TAIL_CHARS = 64 * 1024
#: Failing tests named in a verification (the rest are counted).
FAILING_SHOWN = 20
_MARKER_COUNTS_RE = re.compile(r"\[\.\.\. ([\d,]+) bytes(?: \(([\d,]+) lines?\))? omitted")


class VerificationData(TypedDict):
    """A `Verification` as JSON data (`Verification.to_dict`)."""

    kind: Kind
    tool: str
    ok: bool | None
    passed: int | None
    failed: int | None
    skipped: int | None
    errors: int | None
    summary_line: str | None
    complete: bool
    covers: str | None
    failing_tests: list[str]
    more_failing_tests: int


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
        complete: False when the counts add up lines of an output that was cut, so they cover
            only ``covers``; True when they are the runner's own totals or saw every line.
        covers: Which part of the output the counts cover, when not complete.
        failing_tests: The failing tests' names, the first :data:`FAILING_SHOWN`, in order.
        more_failing_tests: How many more failing tests were named.
    """

    kind: Kind
    tool: str
    ok: bool | None
    passed: int | None = None
    failed: int | None = None
    skipped: int | None = None
    errors: int | None = None
    summary_line: str | None = None
    complete: bool = True
    covers: str | None = None
    failing_tests: tuple[str, ...] = ()
    more_failing_tests: int = 0

    def to_dict(self) -> VerificationData:
        """Return the verification as a JSON-serialisable dict."""
        return {
            "kind": self.kind,
            "tool": self.tool,
            "ok": self.ok,
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "errors": self.errors,
            "summary_line": self.summary_line,
            "complete": self.complete,
            "covers": self.covers,
            "failing_tests": list(self.failing_tests),
            "more_failing_tests": self.more_failing_tests,
        }


def scan_for(cls: Classification | None) -> StreamScan | None:
    """The :class:`StreamScan` a command's output should pass through, or None (not needed).

    Test runs get one to name failing tests; runners with a tallied format (go, cargo) get one
    to keep their counts complete whatever is cut.
    """
    if cls is None or (runner := RUNNER_BY_TOOL.get(cls.tool)) is None:
        return None
    names = runner.failing if cls.kind == "test" else ()
    tally = runner.tally() if runner.tally is not None else None
    if not names and tally is None:
        return None
    return StreamScan(names, tally)


def _covers(marker: re.Match[str] | None, windowed: bool) -> str:
    if marker is not None and (m := _MARKER_COUNTS_RE.match(marker.group(0))):
        cut = f"{m.group(2)} lines" if m.group(2) else f"{m.group(1)} bytes"
        return f"the head and tail of the output shown ({cut} cut between them)"
    if windowed:
        return f"the last {_TAIL_CHARS // 1024} KiB of the output"
    return "the output shown"


def _names_in(lines: list[str], patterns: tuple[Names, ...]) -> list[str]:
    text = "\n".join(lines)
    seen: dict[str, None] = {}
    for pattern in patterns:
        for m in pattern.text.finditer(text):
            seen.setdefault(m.group("name"), None)
    return list(seen)


def parse_verification(
    cls: Classification, output: str, exit_code: int | None, scan: StreamScan | None = None
) -> Verification:
    """Read a verification command's own summary from (the end of) its output.

    Only the last 64 KiB of ``output`` are read. When the output was cut (it carries the
    truncation marker of :class:`~codemode.tools._capture.StreamCapture`, or is longer than
    that window), counts that add up lines (go, cargo's test binaries, one line per problem)
    come from ``scan`` when it saw the whole stream, else they are marked not ``complete``.

    Args:
        cls: The command's classification.
        output: The command's output (cleaned or raw; escape sequences are ignored).
        exit_code: The exit code, or None when unknown (still running, lost).
        scan: The command's whole output as it passed (:func:`scan_for`), or None.

    Returns:
        The verification; a non-zero exit code always makes ``ok`` False.
    """
    if scan is not None:
        scan.close()
    text = strip_ansi(output[-_TAIL_CHARS:]).replace("\r\n", "\n").replace("\r", "\n")
    marker = OMITTED_MARKER_RE.search(text)
    windowed = len(output) > _TAIL_CHARS
    cut = marker is not None or windowed
    lines = [line.rstrip() for line in text.split("\n")]
    if windowed:
        lines = lines[1:]  # the first line is probably partial
    runner = RUNNER_BY_TOOL.get(cls.tool)
    parsed: Parsed | None = None
    for parser in formats_for(cls.tool, cls.kind):
        parsed = parser(lines, cut)
        if parsed is not None:
            break
    complete, covers = True, None
    if parsed is not None and cut and parsed.tallied:
        whole = scan.tallied() if scan is not None else None
        if whole is not None:
            parsed = whole
        else:
            complete, covers = False, _covers(marker, windowed)
    if parsed is None:
        parsed = Parsed()
        if exit_code == 0 and runner is not None and cls.kind in runner.quiet:
            parsed.errors = 0

    failing: list[str] = []
    more = 0
    if parsed.failing is not None:
        failing = parsed.failing
    elif scan is not None:
        failing, more = scan.failing, scan.more_failing
    elif cls.kind == "test":
        failing = _names_in(lines, runner.failing if runner is not None else ALL_NAMES)
    more += max(0, len(failing) - FAILING_SHOWN)

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
        complete=complete,
        covers=covers,
        failing_tests=tuple(failing[:FAILING_SHOWN]),
        more_failing_tests=more,
    )


def failure_summary(v: Verification) -> str | None:
    """One short line for the model when a failing run's output was cut.

    For example ``"pytest: 3 failed, 10 passed — == 3 failed, 10 passed in 0.52s =="``; counts
    that cover only part of the output say so, and the failing tests are named (the first
    :data:`FAILING_SHOWN`, then how many more).

    Args:
        v: The verification.

    Returns:
        The line, or None when the run did not fail (``ok`` is True or unknown with nothing
        failed).
    """
    if v.ok is not False:
        return None
    parts = []
    for value, one, many in (
        (v.failed, "failed", "failed"),
        (v.errors, "error", "errors"),
        (v.passed, "passed", "passed"),
        (v.skipped, "skipped", "skipped"),
    ):
        if value:
            parts.append(f"{value} {one if value == 1 else many}")
    head = f"{v.tool}: {', '.join(parts) if parts else 'failed'}"
    if not v.complete and parts:
        head += f" (partial: counted in {v.covers}; the full log has the rest)"
    line = f"{head} — {v.summary_line}" if v.summary_line else head
    if v.failing_tests:
        more = f" and {v.more_failing_tests} more" if v.more_failing_tests else ""
        line += f"; failing: {', '.join(v.failing_tests)}{more}"
    return line
