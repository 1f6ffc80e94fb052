"""A short fuzz run of the engine bridge (codemode/engine/_qjs.c): generated programs and call
answers (random JSON, huge strings, deep nesting, lone surrogates, text that is not JSON,
unknown ids, answers given twice, interrupts at random points) each end with a result or a
Python exception, never a crash. `.ci/sanitize` runs it on the ASan+UBSan build as well.

FUZZ_EXAMPLES (default 60; the sanitizer stage runs 150) sets how many programs it tries.
"""

from __future__ import annotations

import json
import math
import os
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codemode.engine import _qjs
from codemode.engine._text import prepare_context

_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))

_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "\u2028", "é😀", "\\", '"']),
    st.integers(min_value=0, max_value=200_000).map(lambda n: "z" * n),  # up to huge strings
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


_answer = st.one_of(
    _json.map(lambda v: (True, json.dumps(v), False)),
    _text.map(lambda t: (True, t, True)),
    _text.map(lambda t: (True, t, False)),  # "JSON" that is not
    st.integers(1, 3000).map(lambda d: (True, _deep(d), False)),  # deep nesting
    st.just((False, '{"code":"tool_failed","message":"no","data":null}', False)),
    _text.map(lambda t: (False, t, False)),  # an error that is not JSON
)

_statement = st.one_of(
    _json.map(lambda v: f"print(JSON.stringify(await tools.t({json.dumps({'v': v})})));"),
    st.just("tools.t({}); tools.u({a: 1});"),  # never awaited
    st.just("print(await Promise.allSettled([tools.t({}), tools.t({}), tools.t({})]));"),
    st.just("try { await tools.t({}) } catch (e) { print(e.name, e.code) }"),
    _text.map(lambda t: f"print({json.dumps(t)});"),
    st.integers(1, 5000).map(lambda d: f"print(JSON.stringify(JSON.parse('{_deep(d)}')).length);"),
    st.just("for (let i = 0; i < 1e5; i++) {}"),
    st.just("await new Promise((r) => setTimeout(r, 1));"),
    st.just("throw new Error('thrown');"),
    st.just("print('\\ud800' + String.fromCharCode(0xdc00 + 5));"),
    st.just("let big = 'q'.repeat(1 << 20); print(big.length);"),
    st.just("function f() { return f() } f();"),  # stack overflow
)


@settings(
    max_examples=_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(
    body=st.lists(_statement, min_size=1, max_size=6),
    answers=st.lists(_answer, max_size=12),
    twice=st.booleans(),
    stray=st.lists(st.integers(-5, 1 << 40), max_size=3),
    interrupt_after=st.one_of(st.none(), st.integers(0, 6)),
)
def test_programs_and_answers_end_in_a_result_or_an_exception(
    body: list[str],
    answers: list[tuple[bool, str, bool]],
    twice: bool,
    stray: list[int],
    interrupt_after: int | None,
) -> None:
    answers = list(answers)
    ctx = prepare_context()
    channel = _qjs.Channel()
    ctx.set_limits(32 << 20, 256 << 10)
    source = "(async function __cm_main() {\n" + "\n".join(body) + "\n})"
    try:
        ctx.start(channel, source, 1 << 20, 50, "[]", "[]", "[]")
        steps = 0
        end = time.monotonic() + 2
        while time.monotonic() < end:
            if interrupt_after is not None and steps == interrupt_after:
                channel.interrupt()
            for call_id, _name, _payload, _size in channel.take_calls():
                ok, payload, is_text = answers.pop(0) if answers else (True, "{}", False)
                channel.post(call_id, ok, payload, is_text)
                if twice:
                    channel.post(call_id, ok, payload, is_text)
            for call_id in stray:
                channel.post(call_id, True, "null", False)
            stray = []
            event, text = ctx.run(time.monotonic() + 0.05, math.inf)
            steps += 1
            if event in ("idle", "interrupted", "timer") or '"done"' in (text or ""):
                break  # (a timer is not fired here: the program stops at it)
    except _qjs.JSError:
        pass  # a limit, an interrupt, an answer the prelude cannot read: a Python exception
    ctx.disarm()
    try:
        ctx.take_output()
        ctx.report()
    except _qjs.JSError:
        pass
    ctx.free()
