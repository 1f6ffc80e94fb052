"""The optional first-line options header of a program."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from codemode.budget import MIN_BUDGET

_HEADER = re.compile(r"^\s*//\s*@run_code\s*:?(?P<body>.*)$")
_KNOWN = ("max_output_tokens", "timeout_seconds")


class HeaderError(ValueError):
    """The header is malformed; the message names what is wrong and how to fix it."""


@dataclass(frozen=True)
class HeaderOptions:
    """Options the program asked for (None: not given)."""

    max_output_tokens: int | None = None
    timeout_seconds: float | None = None


def parse_header(source: str) -> HeaderOptions:
    """Read ``// @run_code: {...}`` from the first line, if present.

    Raises:
        HeaderError: Bad JSON, not an object, an unknown key, or a bad value.
    """
    first_line = source.split("\n", 1)[0]
    m = _HEADER.match(first_line)
    if m is None:
        return HeaderOptions()
    body = m.group("body").strip()
    example = '// @run_code: {"max_output_tokens": 2000, "timeout_seconds": 120}'
    try:
        options = json.loads(body)
    except json.JSONDecodeError as exc:
        raise HeaderError(
            f"the // @run_code header is not valid JSON ({exc.msg} at column {exc.colno}); "
            f"write it like: {example}"
        ) from exc
    if not isinstance(options, dict):
        raise HeaderError(f"the // @run_code header must be a JSON object, like: {example}")
    unknown = [k for k in options if k not in _KNOWN]
    if unknown:
        raise HeaderError(
            f"unknown option {unknown[0]!r} in the // @run_code header; known options: {', '.join(_KNOWN)}"
        )
    max_tokens = options.get("max_output_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < MIN_BUDGET
    ):
        raise HeaderError(
            f"max_output_tokens must be an integer of at least {MIN_BUDGET} (room for the line naming "
            f"the archived rest), got {json.dumps(max_tokens)}"
        )
    timeout = options.get("timeout_seconds")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise HeaderError(f"timeout_seconds must be a positive number of seconds, got {json.dumps(timeout)}")
    return HeaderOptions(
        max_output_tokens=max_tokens, timeout_seconds=float(timeout) if timeout is not None else None
    )
