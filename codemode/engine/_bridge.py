"""The host's side of one call across the bridge: its arguments parsed (the one check), its result
as the JSON the prelude settles it with, held to the tool-data limit (text between Python and
QuickJS itself is `_text`)."""

from __future__ import annotations

from typing import Any

from codemode.engine._text import _js_text, _size_text, _to_json
from codemode.errors import ErrorCode, ToolError
from codemode.tools import Tool, ToolFailure, ToolRegistry, ToolResult, to_tool_result

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
