"""What an engine worker process sends the host, read as untrusted input (engine mode ``process``).

A worker whose QuickJS was exploited controls every byte it sends. Nothing here trusts it:

- JSON is decoded with a bound on the values it may make: a frame of ``[[],[],...]`` makes
  ~22 bytes of Python objects per byte it holds (a 256 MiB frame, several GiB), and nests no
  deeper than the messages do.
- Every field is checked for its type and its range (a call id the host must pack as an
  unsigned 64-bit number, a line number, a CPU time), and what the host shows as data (the
  images) for what it says it is.
- What the host can count itself is checked against the program's limits: the calls a
  `CALLS` frame adds to those in flight (`check_posted`), the data their arguments hold.

Anything else raises `_wire.WireError`: the worker broke the protocol; it is killed and its
program ends with ``engine_crashed``.
"""

from __future__ import annotations

import binascii
import json
import json.decoder
import json.scanner
import math
from collections.abc import Callable, Collection
from typing import Any

from codemode._images import IMAGE_MAX_BYTES, IMAGE_MAX_COUNT, is_image
from codemode.engine._guest import EngineLimits, GuestEnd, GuestError
from codemode.engine._wire import HOST_CALL_HEAD, WireError

__all__ = ["Posted", "check_posted", "read_calls", "read_end", "read_host_call", "read_json"]

Posted = tuple[int, str, str, int]
"""A call a program posted: its id, tool name, arguments' JSON and their size (UTF-16 units)."""

# A body this small is decoded at C speed whatever it holds (at most ~6 MiB of objects); a
# larger one by a scanner that counts the values it makes (its strings still at C speed).
_FAST_BYTES = 256 * 1024
_MAX_DEPTH = 8  # the messages nest 4 deep
_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1
_MAX_LINE = (1 << 31) - 1
_MAX_CPU_SECONDS = 1e9
# Beside its characters, the output a worker ends with holds the line saying what was dropped.
_OUTPUT_MARKER_CHARS = 1024
_NAME_CHARS = 1024  # an error's kind and name

# The scanner json's C one replaces: Python, so that each value it makes can be counted (its
# strings still decoded in C). Not in typeshed's stubs: named through getattr.
_Scan = Callable[[str, int], tuple[Any, int]]
_make_scanner: Callable[[json.JSONDecoder], _Scan] = getattr(json.scanner, "py_make_scanner")  # noqa: B009
_parse_array: Callable[..., tuple[Any, int]] = getattr(json.decoder, "JSONArray")  # noqa: B009
_parse_object: Callable[..., tuple[Any, int]] = getattr(json.decoder, "JSONObject")  # noqa: B009


class _Bounded(json.JSONDecoder):
    """Decodes one JSON text, making at most ``max_values`` values, nested at most `_MAX_DEPTH`."""

    def __init__(self, max_values: int) -> None:
        super().__init__()
        self.left = max_values
        self.depth = 0
        self.parse_array = self._array  # type: ignore[method-assign]
        self.parse_object = self._object  # type: ignore[method-assign]
        self.scan_once = _make_scanner(self)

    def _counted(self, scan: _Scan) -> _Scan:
        def scan_counted(text: str, at: int) -> tuple[Any, int]:
            self.left -= 1
            if self.left < 0:
                raise WireError("a message with more values than its kind holds")
            return scan(text, at)

        return scan_counted

    def _nested(self) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise WireError("a message nested deeper than its kind")

    def _array(self, text_and_end: tuple[str, int], scan: _Scan) -> tuple[Any, int]:
        self._nested()
        try:
            return _parse_array(text_and_end, self._counted(scan))
        finally:
            self.depth -= 1

    def _object(
        self,
        text_and_end: tuple[str, int],
        strict: bool,
        scan: _Scan,
        object_hook: Any,
        object_pairs_hook: Any,
        memo: Any = None,
    ) -> tuple[Any, int]:
        self._nested()
        try:
            return _parse_object(
                text_and_end, strict, self._counted(scan), object_hook, object_pairs_hook, memo
            )
        finally:
            self.depth -= 1


_PLAIN = json.JSONDecoder()  # (json.loads of bytes looks for UTF-16 and -32 first, and makes one)


def read_json(body: bytes, max_values: int) -> Any:
    """``body`` decoded as JSON, making at most ``max_values`` values (in a body over 256 KiB).

    Raises:
        WireError: It is not JSON, holds more values, or nests too deep.
    """
    try:
        if len(body) <= _FAST_BYTES:
            return _PLAIN.decode(body.decode("utf-8"))
        return _Bounded(max_values).decode(body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        raise WireError(f"a message that is not JSON ({type(exc).__name__})") from None


def _int(value: object, high: int, what: str) -> int:
    if type(value) is not int or not 0 <= value <= high:
        raise WireError(f"{what} is not a number from 0 to {high}")
    return value


def _str(value: object, what: str, most: int | None = None) -> str:
    if type(value) is not str or (most is not None and len(value) > most):
        raise WireError(f"{what} is not text" + ("" if most is None else f" of at most {most} characters"))
    return value


def _list(value: object, most: int, what: str) -> list[Any]:
    if type(value) is not list or len(value) > most:
        raise WireError(f"{what} is not a list of at most {most}")
    return value


def _optional_int(value: object, what: str) -> int | None:
    return None if value is None else _int(value, _MAX_LINE, what)


def _optional_str(value: object, what: str) -> str | None:
    return None if value is None else _str(value, what)


def read_calls(body: bytes, max_calls: int) -> tuple[int, int, list[Posted]]:
    """A `CALLS` frame: its run id, how many results the program has taken, and at most
    ``max_calls`` calls.

    Raises:
        WireError: It is not that.
    """
    message = _list(read_json(body, 8 + 5 * max_calls), 3, "a CALLS message")
    if len(message) != 3:
        raise WireError("a CALLS message is not [run, settled, calls]")
    run_id = _int(message[0], _U32, "a run id")
    settled = _int(message[1], _U64, "a count of results taken")
    calls: list[Posted] = []
    for call in _list(message[2], max_calls, "the calls of one CALLS message"):
        if type(call) is not list or len(call) != 4:
            raise WireError("a call is not [id, name, arguments, size]")
        call_id, name, payload, size = call
        calls.append(
            (_int(call_id, _U64, "a call id"), _str(name, "a tool name"), _str(payload, "arguments"), size)
        )
    return run_id, settled, calls


def check_posted(
    calls: list[Posted], pending: Collection[int], held_calls: int, held_bytes: int, limits: EngineLimits
) -> None:
    """Check the calls of a `CALLS` frame against what the program may hold: with the
    ``held_calls`` the host holds for it (answered or not, their results not yet sent), at most
    ``calls_in_flight``; with the ``held_bytes`` of their arguments, at most ``tool_data_bytes``;
    none with the id of a call ``pending`` or of another of them. Each call's size is its
    arguments' length in UTF-16 units (the prelude's ``size``), never less than their length in
    characters, nor more than twice.

    Raises:
        WireError: A worker's prelude would not have posted them.
    """
    if held_calls + len(calls) > limits.calls_in_flight:
        raise WireError(f"more than the {limits.calls_in_flight} calls in flight a program may hold")
    ids = {call_id for call_id, _name, _payload, _size in calls}
    if len(ids) < len(calls) or not ids.isdisjoint(pending):
        raise WireError("a call with the id of a call in flight")
    added = 0
    for _call_id, _name, payload, size in calls:
        if type(size) is not int or not len(payload) <= size <= 2 * len(payload):
            raise WireError("a call whose size is not its arguments' length")
        added += size
    if held_bytes + added > limits.tool_data_bytes:
        raise WireError(f"more than the {limits.tool_data_bytes} bytes of tool-call data a program may hold")


def read_host_call(body: bytes, tool_data_bytes: int) -> tuple[str, int, str, str, int]:
    """A `HOST_CALL` frame (`_wire.host_call`): (kind, call id, name, payload JSON, size), as a
    worker's prelude asks it: an inline tool's call (``call``) with arguments of its ``size``
    (their length in UTF-16 units) within ``tool_data_bytes``, or an operation (``sync``: the
    store, search) whose payload is a list of two values.

    Raises:
        WireError: It is not that.
    """
    if len(body) < HOST_CALL_HEAD.size:
        raise WireError("a HOST_CALL shorter than its head")
    sync, call_id, size, name_bytes = HOST_CALL_HEAD.unpack_from(body)
    end = HOST_CALL_HEAD.size + name_bytes
    if end > len(body):
        raise WireError("a HOST_CALL whose name runs past its end")
    try:
        name = body[HOST_CALL_HEAD.size : end].decode("utf-8")
        payload = body[end:].decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("a HOST_CALL that is not UTF-8") from None
    if sync:
        # Decoded by the host after this (`HostCalls`): JSON of many small values makes many
        # times its size of Python objects, which only a worker that lies would send here.
        if len(body) - end > _FAST_BYTES:
            _list(read_json(body[end:], 8), 2, "an operation's payload")
    elif not (len(payload) <= size <= 2 * len(payload) and size <= tool_data_bytes):
        raise WireError("an inline call whose size is not its arguments' length or is over the tool data")
    return ("sync" if sync else "call"), call_id, name, payload, size


def read_end(body: bytes, limits: EngineLimits, max_unobserved: int) -> tuple[int, GuestEnd]:
    """An `END` frame: its run id and how the program ended, within what the program may hold:
    its output within ``output_bytes_in_memory``, at most ``calls_in_flight`` pending calls, at
    most ``max_unobserved`` calls that settled unlooked-at (the calls it made), at most 8
    images, each one of the types shown, valid base64 within 5 MiB and with its type's magic
    bytes.

    Raises:
        WireError: It is not that.
    """
    pending_most = limits.calls_in_flight
    message = read_json(body, 64 + 3 * pending_most + max_unobserved + 3 * IMAGE_MAX_COUNT)
    if type(message) is not dict:
        raise WireError("an END message is not an object")
    try:
        run_id = _int(message["run"], _U32, "a run id")
        output = _str(message["output"], "the output", limits.output_bytes_in_memory + _OUTPUT_MARKER_CHARS)
        error = message["error"]
        cpu = message["cpu_seconds"]
        if type(cpu) not in (int, float) or not (math.isfinite(cpu) and 0 <= cpu <= _MAX_CPU_SECONDS):
            raise WireError("a CPU time that is not a number of seconds")
        pending = {
            _int(call_id, _U64, "a call id"): _str(name, "a tool name")
            for call_id, name in (
                _pair(item) for item in _list(message["pending"], pending_most, "pending calls")
            )
        }
        end = GuestEnd(
            output=output,
            error=None if error is None else _error(error),
            cpu_seconds=float(cpu),
            output_dropped_bytes=_int(message["output_dropped_bytes"], _U64, "dropped output"),
            dropped_timers=_int(message["dropped_timers"], _U64, "dropped timers"),
            pending=pending,
            unobserved=[
                _int(call_id, _U64, "a call id")
                for call_id in _list(message["unobserved"], max_unobserved, "unobserved calls")
            ],
            images=[_image(item) for item in _list(message["images"], IMAGE_MAX_COUNT, "images")],
        )
    except KeyError as exc:
        raise WireError(f"an END message without {exc}") from None
    return run_id, end


def _pair(item: object) -> tuple[object, object]:
    if type(item) is not list or len(item) != 2:
        raise WireError("a pair that is not [a, b]")
    return item[0], item[1]


def _error(data: object) -> GuestError:
    if type(data) is not dict:
        raise WireError("an error that is not an object")
    return GuestError(
        kind=_str(data["kind"], "an error's kind", _NAME_CHARS),
        name=_str(data["name"], "an error's name", _NAME_CHARS),
        message=_str(data["message"], "an error's message"),
        line=_optional_int(data.get("line"), "a line"),
        column=_optional_int(data.get("column"), "a column"),
        stack=_str(data.get("stack", ""), "a stack"),
        tool=_optional_str(data.get("tool"), "a tool name"),
        data=_optional_str(data.get("data"), "an error's data"),
    )


def _image(item: object) -> tuple[str, str]:
    mime, data = _pair(item)
    mime_type = _str(mime, "an image's type", 64)
    text = _str(data, "an image's data", (IMAGE_MAX_BYTES + 2) // 3 * 4)
    try:
        decoded = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (ValueError, binascii.Error):  # (non-ASCII text is a UnicodeEncodeError, a ValueError)
        raise WireError("an image whose data is not base64") from None
    if not is_image(mime_type, decoded):
        raise WireError("an image that is not what its type says")
    return mime_type, text
