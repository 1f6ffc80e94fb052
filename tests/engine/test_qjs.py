"""The engine bridge on its own (`codemode.engine._qjs`, codemode/engine/_qjs.c): contexts, text
crossing both ways, the channel between a program's thread and the loop, stopping, and the
keeper that makes contexts ahead."""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest

from codemode.engine import _qjs
from codemode.engine._text import prepare_context


def bare() -> _qjs.Context:
    return _qjs.Context(prelude=False)


def test_values_come_back_as_python_values() -> None:
    ctx = bare()
    assert ctx.eval("1 + 2") == 3
    assert ctx.eval("1.5") == 1.5
    assert ctx.eval("null") is None and ctx.eval("undefined") is None
    assert ctx.eval("'x'.repeat(3)") == "xxx"
    assert ctx.eval("({a: [1, 2]})") == '{"a":[1,2]}'  # anything else: its JSON


def test_text_crosses_whole_with_nul_and_never_as_invalid_unicode() -> None:
    ctx = bare()
    assert ctx.eval("'a\\u0000b'") == "a\x00b"  # lengths, not C strings: nothing is cut at U+0000
    assert ctx.eval("'é😀'") == "é😀"
    lone = ctx.eval("'\\ud800x'")
    assert isinstance(lone, str)
    assert lone.endswith("x") and "\ufffd" in lone
    lone.encode("utf-8")  # Python gets text it can encode


def test_an_exception_is_its_text_and_its_stack() -> None:
    ctx = bare()
    with pytest.raises(_qjs.JSError) as raised:
        ctx.eval("function f() { throw new TypeError('boom') }\nf()", "<input>")
    head, stack = str(raised.value).split("\n", 1)
    assert head == "TypeError: boom"
    assert "at f (<input>:1:" in stack
    with pytest.raises(_qjs.JSError, match=r"^SyntaxError"):
        ctx.eval("let = ;")
    with pytest.raises(_qjs.JSError, match="a thrown value that cannot be turned into text"):
        ctx.eval("throw {toString() { throw 1 }}")


def test_atomics_wait_throws_instead_of_blocking_the_thread() -> None:
    # A program could otherwise park its thread where no interrupt reaches it.
    ctx = bare()
    started = time.monotonic()
    with pytest.raises(_qjs.JSError, match="cannot block"):
        ctx.eval("Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 60000)")
    assert time.monotonic() - started < 30


def test_compile_gives_bytecode_or_the_syntax_error() -> None:
    assert isinstance(_qjs.compile("1 + 1", "<t>"), bytes)
    with pytest.raises(_qjs.JSError, match=r"^SyntaxError"):
        _qjs.compile("let = ;", "<t>")


def test_every_context_is_fresh_and_has_the_prelude_hidden() -> None:
    first = prepare_context()
    first.eval("globalThis.leftover = 1; Object.prototype.polluted = 1")
    del first
    for _ in range(5):  # made ahead by the keeper or here: never one used before
        ctx = prepare_context()
        assert ctx.eval("typeof leftover") == "undefined"
        assert ctx.eval("({}).polluted") is None
        assert ctx.eval("typeof tools") == "object"
        # The prelude's entry points and host functions are not reachable from a program.
        assert ctx.eval(
            "[typeof __cm_start, typeof __cm_host_call, typeof __cm_post_call, typeof __cm_encode_args].join()"
        ) == ("undefined,undefined,undefined,undefined")
        # Compiled without its source: a prelude function shows none, like a built-in one.
        assert ctx.eval("String(print)") == "function __cm_print() {\n    [native code]\n}"


def test_the_keeper_makes_contexts_ahead() -> None:
    prepare_context()
    before = _qjs.keeper_stats()
    deadline = time.monotonic() + 10
    while _qjs.keeper_stats()["ready"] == 0:  # it runs on its own thread
        assert time.monotonic() < deadline, _qjs.keeper_stats()
        time.sleep(0.001)
    prepare_context()
    after = _qjs.keeper_stats()
    assert after["taken_ready"] == before["taken_ready"] + 1


def test_a_context_handed_back_is_freed_by_the_keeper_and_unusable() -> None:
    ctx = prepare_context()
    assert ctx.eval("1 + 1") == 2
    before = _qjs.keeper_stats()["freed_ahead"]
    ctx.hand_back()
    ctx.hand_back()  # twice: nothing to do
    with pytest.raises(RuntimeError, match="freed"):
        ctx.eval("1")
    assert _qjs.keeper_stats()["freed_ahead"] == before + 1


def test_a_context_without_prelude_refuses_program_calls() -> None:
    ctx = bare()
    with pytest.raises(RuntimeError, match="no prelude"):
        ctx.take_output()
    ctx.free()
    with pytest.raises(RuntimeError, match="freed"):
        ctx.report()


def test_set_prelude_is_once_per_process() -> None:
    prepare_context()
    with pytest.raises(ValueError, match="another prelude"):
        _qjs.set_prelude(_qjs.compile("1", "<other>"), 2)


def _answer_calls(
    channel: _qjs.Channel, replies: list[tuple[bool, str, bool]], seen: list[tuple[int, str, str, int]]
) -> None:
    """Play the event loop's part: wait for the channel's eventfd, take the calls, answer them."""
    fd = channel.fileno()
    while replies:
        select.select([fd], [], [], 30)
        for call in channel.take_calls():
            seen.append(call)
            channel.post(call[0], *replies.pop(0))


def test_calls_posted_reach_the_loop_side_and_results_come_back() -> None:
    ctx = prepare_context()
    channel = _qjs.Channel()
    ctx.set_limits(64 * 1024 * 1024, 1024 * 1024)
    seen: list[tuple[int, str, str, int]] = []
    replies = [
        (True, "first\x00", True),
        (False, '{"code":"tool_failed","message":"nope","data":null}', False),
    ]
    loop = threading.Thread(target=_answer_calls, args=(channel, replies, seen))
    loop.start()
    ctx.start(
        channel,
        "(async function __cm_main() {\n"
        "print(await tools.echo({v: 'a\\u0000'}));\n"
        "try { await tools.echo({}) } catch (e) { print(e.name, e.code, e.message) }\n})",
        1 << 20,
        100,
        "[]",
        "[]",
        "[]",
    )
    texts: list[str] = []
    while not any('"done"' in text for text in texts):
        event, text = ctx.run(time.monotonic() + 30, float("inf"))
        assert event == "drain" and text is not None, event
        texts.append(text)
    loop.join(30)
    assert [(name, payload) for _, name, payload, _ in seen] == [
        ("echo", '{"v":"a\\u0000"}'),
        ("echo", "{}"),
    ]
    assert all(size == len(payload) for _, _, payload, size in seen)
    assert ctx.take_output() == "first\x00\nToolError tool_failed nope\n"
    assert channel.unread == 0 and ctx.outstanding == 0


def test_interrupt_stops_computing_and_waiting() -> None:
    ctx = prepare_context()
    channel = _qjs.Channel()
    ctx.start(
        channel, "(async function __cm_main() {await tools.slow({})\n})", 1 << 20, 100, "[]", "[]", "[]"
    )
    threading.Timer(0.05, channel.interrupt).start()
    started = time.monotonic()
    event, _ = ctx.run(time.monotonic() + 60, float("inf"))  # waiting for the call: woken
    assert event == "interrupted" and time.monotonic() - started < 30
    assert channel.interrupted

    busy = prepare_context()
    stop = _qjs.Channel()
    threading.Timer(0.05, stop.interrupt).start()
    with pytest.raises(_qjs.JSError, match="interrupted"):
        busy.start(stop, "(async function __cm_main() {\n})(); for (;;) {}", 1 << 20, 100, "[]", "[]", "[]")
    busy.disarm()  # output is collected after a stop, uninterrupted
    assert busy.take_output() == ""


def test_run_reports_a_deadline_a_timer_and_nothing_left_to_wait_for() -> None:
    ctx = prepare_context()
    channel = _qjs.Channel()
    ctx.start(
        channel, "(async function __cm_main() {await tools.never({})\n})", 1 << 20, 100, "[]", "[]", "[]"
    )
    assert ctx.run(time.monotonic() + 0.05, float("inf"))[0] == "deadline"
    assert ctx.run(time.monotonic() + 60, time.monotonic() + 0.01)[0] == "timer"
    idle = prepare_context()
    idle.start(
        _qjs.Channel(),
        "(async function __cm_main() {await new Promise(() => {})\n})",
        1 << 20,
        100,
        "[]",
        "[]",
        "[]",
    )
    assert idle.run(time.monotonic() + 60, float("inf"))[0] == "idle"


PLAIN_VALUES = [
    "{}",
    "[]",
    "{value: 1}",
    "{a: -0, b: 1e21, c: 1e-7, d: 0.1 + 0.2, e: -12.5, f: 2 ** 53, g: 123456789}",
    "{s: 'quote \" backslash \\\\ nl \\n tab \\t ctl \\u0001 del \\u007f'}",
    "{s: 'é😀 \\u2028', lone: '\\ud800 and \\udfff'}",
    "{'2': 'int keys first', b: 1, a: 2, '1': 'ordered'}",
    "[1, 'two', null, true, false, [3, [4, {five: 5}]]]",
    "Object.assign(Object.create(null), {nullProto: 1})",
    "{skipped: undefined, kept: 1}",
    "{deep: JSON.parse('[' .repeat(60) + ']'.repeat(60))}",
]


@pytest.mark.parametrize("value", PLAIN_VALUES)
def test_encode_args_writes_plain_data_as_json_stringify_does(value: str) -> None:
    ctx = bare()  # the native is there on every context (the prelude takes it away from programs)
    ctx.eval(f"globalThis.v = {value}; undefined")
    native = ctx.eval("__cm_encode_args(v, Object.prototype, Array.prototype)")
    assert native == ctx.eval("JSON.stringify(v)")


NOT_PLAIN = [
    "{f() {}}",
    "{n: NaN}",
    "{n: Infinity}",
    "{b: 1n}",
    "{s: Symbol('x')}",
    "{d: new Date(0)}",
    "{m: new Map()}",
    "new (class Point { constructor() { this.x = 1 } })()",
    "[1, , 3]",
    "[undefined]",
    "{p: new Proxy({}, {})}",
    "{get g() { globalThis.ran = true; return 1 }}",
    "{deep: JSON.parse('['.repeat(80) + ']'.repeat(80))}",
    "Object.setPrototypeOf([1], null)",
]


@pytest.mark.parametrize("value", NOT_PLAIN)
def test_encode_args_gives_undefined_for_what_is_not_plain_data_and_runs_no_code(value: str) -> None:
    ctx = bare()
    ctx.eval(f"globalThis.ran = false; globalThis.v = {value}; undefined")
    assert ctx.eval("__cm_encode_args(v, Object.prototype, Array.prototype) === undefined") is True
    assert ctx.eval("ran") is False  # no getter (nor trap) of the program's ran


def test_encode_args_ignores_a_polluted_prototype() -> None:
    ctx = bare()
    ctx.eval(
        "Object.prototype.toJSON = () => 'hacked'; Array.prototype.toJSON = () => 'hacked';"
        "Object.defineProperty(Object.prototype, 'extra', {value: 1, enumerable: true})"
    )
    assert ctx.eval("__cm_encode_args({a: [1]}, Object.prototype, Array.prototype)") == '{"a":[1]}'


def test_prime_stack_looks_up_the_stack_of_the_thread_it_runs_on() -> None:
    # The zygote calls it before it confines itself; a forked worker's main thread keeps the answer.
    main = _qjs.prime_stack()
    assert main > 64 * 1024  # bytes of C stack below the caller
    rooms: list[int] = []
    before = threading.stack_size(1024 * 1024)
    try:
        worker = threading.Thread(target=lambda: rooms.append(_qjs.prime_stack()))
        worker.start()
    finally:
        threading.stack_size(before)
    worker.join()
    assert 0 < rooms[0] <= 1024 * 1024


def test_spin_readable_says_whether_a_frame_came_within_its_time() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert _qjs.spin_readable(ours.fileno(), 0.001) in (0, -1)  # nothing came (or the CPU was wanted)
        theirs.send(b"x")
        assert _qjs.spin_readable(ours.fileno(), 0.001) == 1
        ours.recv(1)
        later = threading.Timer(0.0005, lambda: theirs.send(b"y"))
        later.start()
        assert _qjs.spin_readable(ours.fileno(), 5.0) in (1, -1)  # seen, or the CPU was wanted meanwhile
        later.join()
        theirs.close()
        assert _qjs.spin_readable(ours.fileno(), 0.001) == 1  # a hang-up is seen too: the read says it


def test_spin_readable_refuses_a_negative_descriptor() -> None:
    with pytest.raises(ValueError, match="negative"):
        _qjs.spin_readable(-1, 0.001)


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -1.0, 100.0])
def test_spin_readable_refuses_a_time_it_could_spin_forever_or_long(seconds: float) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(ValueError, match="seconds"):
        _qjs.spin_readable(ours.fileno(), seconds)
