"""Recognise test, build, lint and type-check commands and read their summaries.

:func:`classify_command` looks at a shell command line and says which kind of verification it
runs and with which tool. :func:`parse_verification` reads that tool's own summary from the end
of the output into counts, and :func:`failure_summary` turns the result into one line a model
can read when the output itself was cut. :func:`scan_for` gives the :class:`StreamScan` that a
command's whole output passes through (failing tests' names, counts that a cut would make
partial), and :class:`ScannedCapture` is the capture that feeds it.

Counts are ``None`` when the output does not say. ``ok`` is the overall verdict: the exit code
was 0 and no failure or error was reported.

The tools are data (``_runners``: :data:`RUNNERS`, :data:`LAUNCHERS`); so are most summary
formats (``_rules``: ``Summary`` of ``Line`` rules, ``Count``); ``_formats`` keeps a function
only for a format that needs code, and says why.
"""

from codemode.tools._verification._classify import Classification, ClassificationData, classify_command
from codemode.tools._verification._parse import (
    Verification,
    VerificationData,
    failure_summary,
    parse_verification,
    scan_for,
)
from codemode.tools._verification._runners import LAUNCHERS, RUNNERS, Launcher, Runner
from codemode.tools._verification._stream import ScannedCapture, StreamScan

__all__ = [
    "LAUNCHERS",
    "RUNNERS",
    "Classification",
    "ClassificationData",
    "Launcher",
    "Runner",
    "ScannedCapture",
    "StreamScan",
    "Verification",
    "VerificationData",
    "classify_command",
    "failure_summary",
    "parse_verification",
    "scan_for",
]
