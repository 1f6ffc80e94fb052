"""Text between Python and QuickJS, with nothing but the standard library (the engine's worker
processes import it without the host): values as JSON both ways (finite numbers, no lone
surrogates), positions in the model's own source (the wrapper line taken off), and prelude.js
compiled once per process with the fresh contexts that load it."""

from __future__ import annotations

import json
import math
import re
import threading
from pathlib import Path
from typing import Any

from codemode.engine import _qjs

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


def _set_prelude(spare: int = _SPARE_CONTEXTS, *, idle: bool = False) -> None:
    """Give the bridge prelude.js, compiled once per process: a fresh context loads it in ~0.1 ms
    instead of parsing 30 KB of source (~1 ms, most of a short program's run). ``spare``
    contexts are kept ready by the bridge's keeper thread; ``idle``: it runs at SCHED_IDLE (an
    engine worker's, see `_qjs.c`)."""
    global _PRELUDE_SET
    with _PRELUDE_LOCK:
        if not _PRELUDE_SET:
            source = (Path(__file__).parent / "prelude.js").read_text("utf-8")
            _qjs.set_prelude(_qjs.compile(source, "<prelude>"), spare, idle)
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
