"""The Python side of the bridge to QuickJS: values as JSON both ways (finite numbers, no lone
surrogates), positions in the model's own source (the wrapper line taken off), prelude.js
compiled once per process and the fresh contexts that load it, and one call's arguments
parsed and its result held to the tool-data limit."""

from __future__ import annotations

import json
import math
import re
import threading
from importlib import resources
from typing import Any

from codemode.engine import _qjs
from codemode.errors import ErrorCode, ToolError
from codemode.tools import Tool, ToolFailure, ToolRegistry, ToolResult, to_tool_result

# The program is wrapped on its own first line so its line numbers stay the model's own.
_PREFIX = "(async function __cm_main() {"
_SUFFIX = "\n})"
_FRAME = re.compile(r"^\s*at (?P<fn>[^\s(]+)?\s*\(?<input>:(?P<line>\d+):(?P<col>\d+)\)?\s*$")
_FIRST_LOCATION = re.compile(r"<input>:(\d+):(\d+)")
_MODULE_STATEMENT = re.compile(r"^\s*(import|export)\b")
_MIB = 1024 * 1024


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None, as JavaScript's JSON.stringify does."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _js_text(text: str) -> str:
    """``text`` as the QuickJS binding can take it: lone surrogates become U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` (decoded JSON) with lone surrogates in its strings and keys replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_SURROGATE.sub("\ufffd", k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


# The C scanner behind json.loads, called directly: it skips loads' two Python frames and
# its whitespace regex (JSON the prelude made has none around it): 0.4 instead of 1.3 us per
# tool call's message, ~6% of an inline call (bench/bench_engine.py). Anything it does not
# take whole goes through json.loads, for its error.
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _from_js_json(raw: str) -> Any:
    """JSON text the prelude made, decoded. JSON.stringify escapes a lone surrogate, which
    Python text cannot hold: such strings get U+FFFD instead.

    Raises:
        json.JSONDecodeError: ``raw`` is not one JSON value.
    """
    try:
        value, end = _SCAN(raw, 0)
    except StopIteration:
        end = -1
    if end != len(raw):
        value = json.loads(raw)
    return _without_lone_surrogates(value) if "\\ud" in raw else value


def _to_json(value: Any) -> str | None:
    """Strict JSON text of ``value`` (non-finite numbers become null); None when it is not JSON."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is float:
        return repr(value) if math.isfinite(value) else "null"
    try:
        return _js_text(_ENCODE(value))
    except ValueError:
        try:
            return _js_text(json.dumps(_finite(value), ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            return None
    except (TypeError, RecursionError):
        return None


def _size_text(size: int) -> str:
    """``size`` (bytes, or characters of JSON text) for a message: ``12 bytes``, ``1.5 MiB``.

    The prelude's ``__cm_size_text`` says the same.
    """
    if size < _MIB // 10:
        return f"{size} bytes"
    tenths = round(size * 10 / _MIB)
    return f"{tenths // 10} MiB" if tenths % 10 == 0 else f"{tenths / 10:.1f} MiB"


def map_location(line: int, col: int) -> tuple[int, int]:
    """Map a position in the wrapped source back to the model's source."""
    if line == 1:
        col = max(1, col - len(_PREFIX))
    return line, col


def map_stack(stack: str) -> tuple[str, int | None, int | None]:
    """Rewrite a QuickJS stack to the model's lines, dropping prelude frames.

    Returns:
        ``(stack_text, line, column)`` where line/column locate the innermost program frame.
    """
    frames: list[str] = []
    first: tuple[int, int] | None = None
    for raw in stack.splitlines():
        m = _FRAME.match(raw)
        if m is None:
            continue
        fn = m.group("fn") or "<anonymous>"
        if fn.startswith("__cm_") and fn != "__cm_main":
            continue
        line, col = map_location(int(m.group("line")), int(m.group("col")))
        if first is None:
            first = (line, col)
        name = "<program>" if fn in ("__cm_main", "<eval>") else fn
        frames.append(f"    at {name} (line {line}:{col})")
    if len(frames) > 12:
        frames = [*frames[:6], f"    ... {len(frames) - 12} more frames ...", *frames[-6:]]
    return "\n".join(frames), (first[0] if first else None), (first[1] if first else None)


# ---- the prelude, compiled once per process -----------------------------------------------

_PRELUDE_LOCK = threading.Lock()
_PRELUDE_SET = False
# Fresh contexts the bridge's keeper thread holds ready (see _qjs.c): enough for programs
# started back to back or a few at once; more start on a context made by their own worker.
_SPARE_CONTEXTS = 2


def _set_prelude() -> None:
    """Give the bridge prelude.js, compiled once per process: a fresh context loads it in ~0.1 ms
    instead of parsing 30 KB of source (~1 ms, most of a short program's run)."""
    global _PRELUDE_SET
    with _PRELUDE_LOCK:
        if not _PRELUDE_SET:
            source = resources.files("codemode.engine").joinpath("prelude.js").read_text("utf-8")
            _qjs.set_prelude(_qjs.compile(source, "<prelude>"), _SPARE_CONTEXTS)
            _PRELUDE_SET = True


def prepare_context() -> _qjs.Context:
    """A fresh context with the prelude loaded: one the bridge made ahead, else made here.

    Raises:
        _qjs.JSError: The prelude threw (a broken build).
        MemoryError: No memory for a context.
    """
    if not _PRELUDE_SET:
        _set_prelude()
    return _qjs.Context()


# ---- one call, on either thread -------------------------------------------------------------


def error_json(code: ErrorCode, message: str, data: Any) -> str:
    """The JSON the prelude turns into a rejected call's ToolError."""
    payload = _to_json({"code": code.value, "message": message, "data": data})
    return payload or _to_json({"code": code.value, "message": message, "data": None}) or "{}"


def failure_json(failure: ToolFailure) -> str:
    """`error_json` of a failure (`codemode.tools.failure_of` maps an exception to one)."""
    return error_json(failure.code, failure.message, failure.data)


def parse_call(registry: ToolRegistry, name: str, arguments: Any) -> tuple[Tool, Any]:
    """The tool a call names and its arguments, parsed: the one check a call gets.

    Raises:
        ToolError: No such tool (``unknown_tool``), or the arguments do not fit its input
            (``invalid_arguments``, the JSON path named).
    """
    tool = registry.get(name)
    if tool is None:
        raise ToolError(registry.unknown_tool_message(name), code=ErrorCode.UNKNOWN_TOOL)
    return tool, tool.parse(arguments)


def result_payload(value: Any, tool_name: str, held_bytes: int, limit: int) -> tuple[bool, str, bool]:
    """What settles a call in the program, from what its handler returned (a `ToolResult` or
    plain data): ``(ok, payload, is_text)``, the payload being the result's text, its JSON, or
    the error JSON of a rejection.

    The call rejects only when it failed. A result the tool marks is_error without a failure
    (bash: a command that ran and exited non-zero) is data the program computes on. A result
    that would take the tool-call data the host holds for the program (``held_bytes``: the
    arguments of its calls in flight) over ``limit`` rejects with ``tool_data_limit``.
    """
    kind = type(value)
    if kind is str:
        return _within_limit(True, _js_text(value), True, tool_name, held_bytes, limit)
    if value is None:
        return True, "", True
    if kind is int or kind is float or kind is bool:
        return True, _to_json(value) or "null", False
    if kind is ToolResult:
        result: ToolResult = value
    else:
        try:
            result = to_tool_result(value)
        except Exception as exc:  # a value pydantic cannot serialise
            result = ToolResult.failure(
                ErrorCode.RESULT_NOT_JSON,
                f"{tool_name} failed: its result cannot be turned into JSON: {type(exc).__name__}: {exc}",
            )
    failure = result.error
    if failure is not None:
        data = (
            failure.data if _to_json(failure.data) is not None else None
        )  # the message still says what failed
        return _within_limit(
            False, error_json(failure.code, failure.message, data), False, tool_name, held_bytes, limit
        )
    data = result.producer_data()
    if isinstance(data, str):
        return _within_limit(True, _js_text(data), True, tool_name, held_bytes, limit)
    payload = _to_json(data)
    if payload is None:
        message = (
            f"{tool_name} returned structured data that is not JSON "
            f"({type(data).__name__} holding values JSON cannot carry); its text was: {result.text[:200]}"
        )
        return False, error_json(ErrorCode.RESULT_NOT_JSON, message, None), False
    return _within_limit(True, payload, False, tool_name, held_bytes, limit)


def _within_limit(
    ok: bool, payload: str, is_text: bool, tool_name: str, held_bytes: int, limit: int
) -> tuple[bool, str, bool]:
    size = len(payload)
    if size + held_bytes <= limit:
        return ok, payload, is_text
    held = f" while the calls in flight hold {_size_text(held_bytes)}" if held_bytes else ""
    message = (
        f"{tool_name} returned {_size_text(size)} of data{held}, more than the {_size_text(limit)} of "
        "tool-call data the host holds for one program; ask for less per call (a page, a range, "
        "a filter)" + (", or await calls one at a time" if held_bytes else "")
    )
    data = {"limit_bytes": limit, "result_bytes": size, "held_bytes": held_bytes}
    return False, error_json(ErrorCode.TOOL_DATA_LIMIT, message, data), False
