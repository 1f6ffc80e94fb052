"""The building blocks of summary formats: what a format reads into (:class:`Parsed`), and the
formats that are data (:class:`Summary` of :class:`Line` rules, :class:`Count`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["test", "build", "lint", "typecheck"]
Field = Literal["passed", "failed", "skipped", "errors"]
FIELDS: tuple[Field, ...] = ("passed", "failed", "skipped", "errors")

COUNT_RE = re.compile(r"(\d+) (\w+)")


@dataclass
class Parsed:
    """What a format read.

    Attributes:
        tallied: The counts add up lines of the output (one per test, per test binary, per
            problem) rather than coming from the runner's own total, so a cut output makes
            them partial.
        failing: Failing tests the format names itself (structured formats), in order.
    """

    passed: int | None = None
    failed: int | None = None
    skipped: int | None = None
    errors: int | None = None
    summary_line: str | None = None
    tallied: bool = False
    failing: list[str] | None = None


# A summary format: reads the output's lines (``cut``: lines were left out) into counts, or None
# when the format is not there.
Parser = Callable[[list[str], bool], "Parsed | None"]


@dataclass(frozen=True)
class Line:
    """A summary rule: the last line that ``pattern`` matches (searched, not anchored).

    Named groups give the counts: ``passed``, ``failed``, ``skipped``, ``errors``; ``total``
    (``passed`` is then what the others leave); ``counts``, text such as ``3 passed, 1 failed``
    whose words ``words`` maps to fields (several words may add up into one field); ``clean``,
    a success message (zero errors when it matched).

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
    words: Mapping[str, Field] = field(default_factory=dict)
    zero: tuple[Field, ...] = ()
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
                for n, word in COUNT_RE.findall(value):
                    if target := self.words.get(word):
                        into[target] = into.get(target, 0) + int(n)
            elif name == "clean":
                into["errors"] = 0
            else:
                into[name] = int(value)
        if self.summary == "match":
            return m.group(0).strip()
        if self.summary == "line":
            return m.string.strip()
        if self.summary == "squash":
            return squash(m.group(0))
        return None


@dataclass(frozen=True, eq=False)
class Summary:
    """A summary format as data: its lines, read together (counts of later lines win; the
    summary line is their parts joined by ``"; "``)."""

    lines: tuple[Line, ...]

    def __call__(self, lines: list[str], cut: bool) -> Parsed | None:
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
        return Parsed(get("passed"), get("failed"), get("skipped"), get("errors"), "; ".join(parts))


@dataclass(frozen=True, eq=False)
class Count:
    """A summary format as data, for tools that print one line per problem and no total: the
    number of lines ``pattern`` matches are the errors (partial when lines were cut); the first
    one is the summary line."""

    pattern: re.Pattern[str]

    def __call__(self, lines: list[str], cut: bool) -> Parsed | None:
        search = self.pattern.search
        matching = [line for line in lines if search(line)]
        if not matching:
            return None
        return Parsed(errors=len(matching), summary_line=matching[0].strip(), tallied=True)


def counts(text: str) -> dict[str, int]:
    """``{"passed": 3, "failed": 1}`` from text such as ``3 passed, 1 failed``."""
    return {word: int(n) for n, word in COUNT_RE.findall(text)}


def last(lines: list[str], pattern: re.Pattern[str]) -> tuple[int, re.Match[str]] | None:
    """The index and match of the last line ``pattern`` matches, or None."""
    for i in range(len(lines) - 1, -1, -1):
        m = pattern.search(lines[i])
        if m:
            return i, m
    return None


def squash(line: str) -> str:
    """``line`` stripped, with runs of whitespace made one space."""
    return " ".join(line.split())
