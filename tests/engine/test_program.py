"""Black-box tests of the QuickJS engine through the public Host API.

Each bad input from the issue is one test; after each, the same host must still run a
normal program correctly (`assert_healthy`).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
import psutil
import pytest

from codemode import Host, ToolResult
from codemode.engine._text import map_location, map_stack
from tests.host_support import MakeHost, Probe, assert_healthy

pytestmark = pytest.mark.anyio


async def run(host: Host, source: str, **kwargs: Any) -> Any:
    with anyio.fail_after(60):
        return await host.run_code(source, **kwargs)


# -- the basics ---------------------------------------------------------------------------


async def test_print_console_and_returned_value_last(host: Host) -> None:
    source = """
print("a", 1, true, null, [1, "x"], {k: {n: 2}});
console.log("log"); console.info("info"); console.warn("warn"); console.error("error"); console.debug("debug");
print(undefined, new Map([[1, 2]]), new Set([3]), 10n);
return {done: true};
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text == (
        'a 1 true null [1,"x"] {"k":{"n":2}}\nlog\ninfo\nwarn\nerror\ndebug\n'
        'undefined {"[Map]":[[1,2]]} {"[Set]":[3]} 10n\n{"done":true}\n'
    )


async def test_top_level_return_of_a_string_prints_it_raw(host: Host) -> None:
    result = await run(host, 'print("first"); return "last"')
    assert result.text == "first\nlast\n"


async def test_tool_resolves_with_structured_data_or_text(host: Host, probe: Probe) -> None:
    source = """
const a = await tools.echo({value: {n: [1, 2, 3]}});
const b = await tools["shout"]({text: "hi"});
print(a.value.n.reduce((x, y) => x + y), typeof b, b);
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text == "6 string HI\n"
    assert result.usage.tool_calls == 2


async def test_set_timeout_clear_timeout_and_sleep(host: Host) -> None:
    source = """
const order = [];
setTimeout((a, b) => order.push(`t20:${a}${b}`), 20, "x", "y");
setTimeout(() => order.push("t0"), 0);
const cancelled = setTimeout(() => order.push("never"), 5);
clearTimeout(cancelled);
await sleep(40);
order.push("slept");
print(order.join(","));
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text == "t0,t20:xy,slept\n"


async def test_promise_all_of_many_calls(host: Host) -> None:
    source = """
const values = await Promise.all(Array.from({length: 100}, (_, i) => tools.echo({value: i})));
print(values.map(v => v.value).reduce((a, b) => a + b), values.length);
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text == f"{sum(range(100))} 100\n"
    assert result.usage.tool_calls == 100


async def test_concurrency_limit_still_completes_every_call(make_host: MakeHost) -> None:
    async with make_host(tool_concurrency=2) as (host, _probe):
        result = await run(
            host, "print((await Promise.all([1,2,3,4,5,6,7].map(ms => tools.nap({ms})))).join())"
        )
        assert result.text == "1,2,3,4,5,6,7\n"


# -- bad input it must survive ---------------------------------------------------------------


async def test_syntax_error_names_the_models_line_and_column_and_nothing_runs(
    host: Host, probe: Probe
) -> None:
    source = 'await tools.bump({});\nprint("x");\nlet y = ;\n'
    result = await run(host, source)
    assert not result.ok
    assert result.error is not None
    assert result.error.kind == "syntax_error"
    assert result.error.name == "SyntaxError"
    assert (result.error.line, result.error.column) == (3, 9)
    assert "line 3:9" in result.text
    assert probe.bumps == 0
    assert "x" not in result.text.splitlines()
    # An error on the first line is not shifted by the wrapper the engine adds.
    first = await run(host, "print(1 +);")
    assert first.error is not None and (first.error.line, first.error.column) == (1, 10)
    await assert_healthy(host)


async def test_import_statement_explains_there_are_no_modules(host: Host) -> None:
    result = await run(host, 'import fs from "fs";')
    assert result.error is not None and result.error.kind == "syntax_error"
    assert "tools object" in result.text
    dynamic = await run(host, 'const m = await import("os"); print(typeof m)')
    assert not dynamic.ok
    await assert_healthy(host)


async def test_uncaught_throw_keeps_output_and_maps_the_stack(host: Host) -> None:
    source = 'print("before");\nfunction inner() {\n  throw new TypeError("boom");\n}\nfunction outer() { inner(); }\nouter();\n'
    result = await run(host, source)
    assert not result.ok
    assert result.error is not None
    assert (result.error.kind, result.error.name, result.error.message) == ("uncaught", "TypeError", "boom")
    assert result.error.line == 3
    column = result.error.column
    assert result.text.startswith(f"before\nUncaught TypeError: boom (line 3:{column})\n")
    frames = result.error.stack.splitlines()
    assert frames[0].strip() == f"at inner (line 3:{column})"
    assert frames[1].strip().startswith("at outer (line 5:")
    assert frames[2].strip().startswith("at <program> (line 6:")
    assert "prelude" not in result.text and "__cm_" not in result.text
    await assert_healthy(host)


async def test_thrown_non_error_values_are_reported_plainly(host: Host) -> None:
    result = await run(host, 'print("kept"); throw "plain string"')
    assert result.error is not None and result.error.kind == "uncaught"
    assert result.text.startswith("kept\nUncaught plain string")
    assert "Uncaught Uncaught" not in result.text
    await assert_healthy(host)


async def test_endless_loop_is_interrupted_at_the_cpu_limit(make_host: MakeHost) -> None:
    async with make_host(cpu_seconds=1) as (host, _probe):
        result = await run(host, 'print("started");\nwhile (true) {}\n')
        assert result.error is not None
        assert (result.error.kind, result.error.name) == ("cpu_limit", "CpuLimit")
        assert "1 s of JS CPU time" in result.error.message
        assert result.text.startswith("started\n")
        await assert_healthy(host)


async def test_wall_clock_limit_while_computing(host: Host) -> None:
    result = await run(host, '// @run_code: {"timeout_seconds": 0.5}\nprint("spinning");\nfor (;;) {}\n')
    assert result.error is not None
    assert (result.error.kind, result.error.name) == ("timeout", "Timeout"), result.text
    assert "0.5 s wall-clock limit" in result.error.message
    assert result.text.startswith("spinning\n")
    await assert_healthy(host)


async def test_code_that_closes_the_wrapper_still_meets_the_cpu_limit(make_host: MakeHost) -> None:
    async with make_host(cpu_seconds=1) as (host, _probe):
        with anyio.fail_after(30):
            result = await host.run_code("}); while (true) {} (function () {")
        assert result.error is not None and result.error.kind == "cpu_limit", result.text
        await assert_healthy(host)


async def test_unbalanced_braces_are_named(host: Host) -> None:
    result = await run(host, 'print("a") }); (function () { print("b")')
    assert result.error is not None and result.error.name == "SyntaxError"
    assert "unbalanced braces" in result.error.message
    await assert_healthy(host)


@pytest.mark.parametrize(
    "bomb",
    [
        "let a = []; while (true) a.push({n: a.length});",
        'let a = []; while (true) a.push("x".repeat(1000) + a.length);',
        "let a = []; for (;;) a.push(new Array(10000).fill(1));",
        "const b = new ArrayBuffer(1e9);",
    ],
)
async def test_memory_bomb_is_out_of_memory(make_host: MakeHost, bomb: str) -> None:
    async with make_host(memory_mb=32) as (host, _probe):
        result = await run(host, 'print("before");\n' + bomb)
        assert result.error is not None, result.text
        assert (result.error.kind, result.error.name) == ("out_of_memory", "OutOfMemory"), result.text
        assert "32 MiB" in result.error.message
        assert result.text.startswith("before\n")
        await assert_healthy(host)


async def test_the_heap_of_a_memory_bomb_goes_back_to_the_system(make_host: MakeHost) -> None:
    # glibc kept the freed QuickJS heap in the worker's arena: RSS stayed ~64 MiB higher per
    # bomb (130 MiB after two). The engine trims after a program runs out of memory.
    me = psutil.Process()
    async with make_host(memory_mb=64) as (host, _probe):
        assert host.counter.exact is not None  # its tables load in the background: count them first
        await assert_healthy(host)
        baseline = me.memory_info().rss
        for _ in range(3):
            result = await run(host, 'let a = []; while (true) a.push("x".repeat(1024) + a.length);')
            assert result.error is not None and result.error.kind == "out_of_memory"
        grown = me.memory_info().rss - baseline
    # Without the trim it stays ~130 MiB up (two bombs' heaps); with it, 1-2 MiB on a quiet
    # machine and up to ~65 MiB seen while other suites ran (other threads' arenas fill in).
    assert grown < 96 * 1024 * 1024, f"RSS grew by {grown / 2**20:.0f} MiB after three 64 MiB bombs"


async def test_big_print_before_out_of_memory_is_kept(make_host: MakeHost) -> None:
    async with make_host(memory_mb=32) as (host, _probe):
        source = 'print("y".repeat(5000));\nlet a = []; while (true) a.push({n: a.length});'
        result = await run(host, source)
        assert result.error is not None and result.error.kind == "out_of_memory"
        assert result.text.startswith("y" * 5000 + "\n")
        await assert_healthy(host)


async def test_unbounded_recursion_is_a_range_error(host: Host) -> None:
    result = await run(host, 'print("before");\nfunction f(n) { return f(n + 1) + 1; }\nf(0);\n')
    assert result.error is not None
    assert (result.error.kind, result.error.name) == ("stack_overflow", "RangeError")
    assert "recursion" in result.error.message
    assert result.error.line == 2
    assert result.text.startswith("before\n")
    assert len(result.error.stack.splitlines()) <= 13
    await assert_healthy(host)


async def test_a_promise_nothing_can_settle_is_a_deadlock_at_once(host: Host) -> None:
    source = '// @run_code: {"timeout_seconds": 3000}\nprint("waiting");\nawait new Promise(() => {});\n'
    with anyio.fail_after(20):  # far below the program's own 3000 s timeout
        result = await host.run_code(source)
    assert result.error is not None
    assert (result.error.kind, result.error.name) == ("deadlock", "Deadlock")
    assert "nothing can settle" in result.error.message
    assert result.text.startswith("waiting\n")
    await assert_healthy(host)


async def test_wall_clock_timeout_while_a_tool_is_pending(host: Host, probe: Probe) -> None:
    source = '// @run_code: {"timeout_seconds": 0.3}\nprint("calling");\nawait tools.slow({});\n'
    result = await run(host, source)
    assert result.error is not None
    assert (result.error.kind, result.error.name) == ("timeout", "Timeout")
    assert "0.3 s wall-clock limit while waiting for slow" in result.error.message
    assert result.text.startswith("calling\n")
    assert probe.slow_started.is_set()
    with anyio.fail_after(10):
        await probe.slow_cancelled.wait()  # the tool task does not outlive the program
    await assert_healthy(host)


async def test_unknown_tool_names_close_matches_and_search_tools(host: Host) -> None:
    result = await run(host, "await tools.ecoh({value: 1})")
    assert result.error is not None
    assert (result.error.name, result.error.tool) == ("ToolError", "ecoh")
    assert "Unknown tool 'ecoh'" in result.error.message
    assert "echo" in result.error.message
    assert "searchTools" in result.error.message
    caught = await run(
        host, "try { await tools.nosuch({}) } catch (e) { print(e instanceof ToolError, e.tool) }"
    )
    assert caught.text == "true nosuch\n"
    await assert_healthy(host)


async def test_bad_arguments_name_the_json_path(host: Host, probe: Probe) -> None:
    source = """
try { await tools.shout({text: 5}); } catch (e) { print(e.name, e.tool, e.data.path); print(e.message); }
try { await tools.shout({}); } catch (e) { print(e.data.path, e.message.includes("at $.text: Field required")); }
try { await tools.shout({text: "a", extra: 1}); } catch (e) { print(e.data.path, e.message.includes("extra")); }
await tools.bump({nope: true});
"""
    result = await run(host, source)
    lines = result.text.splitlines()
    assert lines[0] == "ToolError shout $.text"
    assert "Invalid arguments for shout: at $.text: Input should be a valid string (got 5)" in lines[1]
    assert "tools.shout(args: { text: string })" in lines[1]
    assert lines[2] == "$.text true"
    assert lines[3] == "$.extra true"
    assert result.error is not None and result.error.tool == "bump"
    assert probe.bumps == 0
    await assert_healthy(host)


@pytest.mark.parametrize("tool", ["fail_sync", "fail_async"])
async def test_tool_error_from_a_handler_is_catchable_with_tool_message_data(host: Host, tool: str) -> None:
    source = f"""
try {{
  await tools.{tool}({{message: "disk on fire"}});
}} catch (e) {{
  print(e instanceof ToolError, e instanceof Error, e.name, e.tool, JSON.stringify(e.data));
  print(e.message);
}}
await tools.{tool}({{message: "again"}});
"""
    result = await run(host, source)
    where = "sync" if tool == "fail_sync" else "async"
    code = 7 if tool == "fail_sync" else 8
    lines = result.text.splitlines()
    assert lines[0] == f'true true ToolError {tool} {{"code":{code},"where":"{where}"}}'
    assert lines[1] == f"{tool}: disk on fire"
    assert result.error is not None and (result.error.name, result.error.tool) == ("ToolError", tool)
    assert f'"code":{code}' in result.text  # the uncaught error shows its data
    await assert_healthy(host)


async def test_a_handler_bug_becomes_a_tool_error_without_traceback(host: Host) -> None:
    result = await run(host, 'try { await tools.crash({message: "oops"}) } catch (e) { print(e.message) }')
    assert result.ok
    assert result.text == "crash failed: RuntimeError: oops\n"
    assert "Traceback" not in result.text
    await assert_healthy(host)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("() => 1", "arguments.value is a function"),
        ("(() => { const a = {}; a.self = a; return a; })()", "arguments.value.self refers back to itself"),
        ("10n", "arguments.value is a BigInt"),
        ("NaN", "arguments.value is NaN"),
        ("Infinity", "arguments.value is Infinity"),
        ("new Map([[1, 2]])", "arguments.value is a Map"),
        ("new Set([1])", "arguments.value is a Set"),
        ("Symbol('s')", "arguments.value is a Symbol"),
        ("[1, undefined]", "arguments.value[1] is undefined"),
    ],
)
async def test_non_json_arguments_are_refused_with_a_path(
    host: Host, probe: Probe, expr: str, expected: str
) -> None:
    source = f"try {{ await tools.echo({{value: {expr}}}); print('called'); }} catch (e) {{ print(e.name, e.message); }}"
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text.startswith("ToolError tools.echo: " + expected), result.text
    assert "JSON" in result.text
    await assert_healthy(host)


async def test_results_that_are_not_json_reject_that_call_only(host: Host) -> None:
    def odd(kind: str) -> ToolResult:
        """Return structured data JSON cannot carry."""
        if kind == "set":
            return ToolResult.from_text("a set", {"a": {1, 2}})
        if kind == "nan":
            return ToolResult.from_text("nan", {"mean": float("nan"), "n": [float("inf"), 1.5]})
        return ToolResult.from_text("failed", {"bad": {3}}, is_error=True)

    host.add_tool(odd)
    source = """
for (const kind of ["set", "nan", "error"]) {
  try { print(JSON.stringify(await tools.odd({kind}))); } catch (e) { print(e.name, e.message, JSON.stringify(e.data)); }
}
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text.splitlines() == [
        "ToolError odd returned structured data that is not JSON (dict holding values JSON cannot carry); "
        "its text was: a set null",
        '{"mean":null,"n":[null,1.5]}',
        "ToolError failed null",
    ]
    await assert_healthy(host)


async def test_date_arguments_travel_as_their_json(host: Host) -> None:
    result = await run(host, "print((await tools.echo({value: {at: new Date(0)}})).value.at)")
    assert result.text == "1970-01-01T00:00:00.000Z\n"


async def test_a_100_mb_string_from_a_tool(make_host: MakeHost) -> None:
    async with make_host(memory_mb=512, tool_data_mb=128) as (host, _probe):
        result = await run(
            host, "const s = await tools.big({mb: 100}); print(s.length, s[0], s[s.length - 1])"
        )
        assert result.ok, result.text
        assert result.text == f"{100 * 1024 * 1024} x x\n"
        await assert_healthy(host)


async def test_emoji_and_cjk_round_trip_exactly(host: Host) -> None:
    text = "héllo 😀👩‍👩‍👧 日本語テキスト 中文 한국어 \u0000nul\ttab\r\nend 𝄞 \u2028"
    source = f"""
const t = {json.dumps(text)};
const back = await tools.echo({{value: t}});
print(back.value === t, back.value.length === t.length);
print(t);
print(await tools.shout({{text: "ß😀"}}));
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text == f"true true\n{text}\nSS😀\n"
    assert host.search_tools("echo")  # untouched by the run


async def test_lone_surrogates_cross_as_replacement_characters(host: Host) -> None:
    host.add_tool(lambda: "a\udc80b", name="surrogate_text", description="Text with a lone surrogate.")
    host.add_tool(
        lambda: ToolResult.from_text("t", {"k\ud800": ["\udfff"]}),
        name="surrogate_data",
        description="Data, lone surrogates.",
    )
    source = r"""
print("p\ud800q");
print(await tools.shout({text: "x\udc00y"}));
print(await tools.surrogate_text());
print(JSON.stringify(await tools.surrogate_data()));
await store.set("s", "v\ud800");
print(await store.get("s"));
throw new Error("bad \ud800");
"""
    result = await run(host, source)
    assert result.text.splitlines()[:5] == [
        "p\ufffdq",
        "X\ufffdY",
        "a\ufffdb",
        '{"k\ufffd":["\ufffd"]}',
        "v\ufffd",
    ]
    assert result.error is not None and result.error.message == "bad \ufffd"
    result.model_dump_json()  # the recorded form stays valid UTF-8
    await assert_healthy(host)


async def test_a_nul_character_in_the_source_is_a_clear_syntax_error(host: Host) -> None:
    result = await run(host, 'print("a");\nprint("b\x00");')
    assert result.error is not None and result.error.kind == "syntax_error"
    assert (result.error.line, result.error.column) == (2, 9)
    assert "\\u0000" in result.error.message
    await assert_healthy(host)


async def test_constructor_escape_reaches_nothing_host_side(host: Host) -> None:
    source = """
const g = constructor.constructor('return this')();
const names = Object.getOwnPropertyNames(g);
print(g === globalThis);
print(names.filter(n => /^(__cm|std|os|require|process|import|python|_quickjs|Deno|Bun)/i.test(n)).join(",") || "none");
print(typeof g.std, typeof g.os, typeof g.require, typeof g.__cm_settle, typeof g.__cm_drain, typeof g.__cm_start, typeof g.__cm_host_call);
const F = (async function () {}).constructor;
print(typeof (await new F('return typeof __cm_take_output')()));
for (const f of [print, tools.echo, store.get, searchTools]) {
  try { const G = f.constructor('return this')(); print(G === globalThis); } catch (e) { print(e.name); }
}
"""
    result = await run(host, source)
    assert result.ok, result.text
    lines = result.text.splitlines()
    assert lines[0] == "true"
    assert lines[1] == "none"
    assert lines[2] == "undefined " * 6 + "undefined"
    assert lines[3] == "string"
    assert lines[4:] == ["true"] * 4
    await assert_healthy(host)


async def test_object_prototype_pollution_does_not_break_calls(host: Host) -> None:
    source = """
Object.prototype.toJSON = function () { return "hacked"; };
Object.prototype.value = "polluted";
Object.prototype.then = undefined;
Array.prototype.toJSON = function () { return "hacked"; };
Array.prototype.push = function () { throw new Error("push hijacked"); };
Array.prototype.join = function () { return "JOIN"; };
Array.prototype.shift = function () { return "SHIFT"; };
const r = await tools.echo({value: [1, {a: 2}, "s"]});
const t = await tools.shout({text: "ok"});
await store.set("k", {list: [1, 2]});
const back = await store.get("k");
const all = await Promise.all([tools.echo({value: 1}), tools.echo({value: 2})]);
const caught = await tools.shout({text: 1}).catch(e => e.tool + ":" + e.data.path);
print(Array.isArray(r.value), r.value.length, r.value[0], r.value[1].a, r.value[2], t, back.list.length, back.list[1],
      all[0].value + all[1].value, caught);
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text == "true 3 1 2 s OK 2 2 3 shout:$.text\n"
    await assert_healthy(host)


async def test_iterator_pollution_does_not_break_calls(host: Host) -> None:
    source = """
Array.prototype[Symbol.iterator] = function* () {};
Object.keys = () => [];
const r = await tools.echo({value: {a: [1, 2], b: "c"}});
print(r.value.a[1], r.value.b);
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text == "2 c\n"
    await assert_healthy(host)


async def test_json_and_promise_pollution_does_not_break_calls(host: Host) -> None:
    source = """
const realStringify = JSON.stringify;
JSON.stringify = () => '{"value": "forged"}';
JSON.parse = () => ({value: "forged"});
Promise.prototype.then = function () { throw new Error("then hijacked"); };
Promise.prototype.catch = function () { throw new Error("catch hijacked"); };
Promise.resolve = () => { throw new Error("resolve hijacked"); };
Reflect.apply = () => { throw new Error("apply hijacked"); };
Map.prototype.get = () => undefined;
Map.prototype.set = () => { throw new Error("map hijacked"); };
Set.prototype.has = () => true;
String = () => "forged";
const r = await tools.echo({value: {n: 41}});
const s = await tools.shout({text: "x"});
print(realStringify(r), s);
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text == '{"value":{"n":41}} X\n'
    await assert_healthy(host)


async def test_tampering_with_tools_and_globals_does_not_break_calls(host: Host) -> None:
    source = """
"use strict";
const attempts = [];
for (const attempt of [
  () => { tools.echo = () => ({value: "fake"}); },
  () => { delete tools.echo; },
  () => { Object.defineProperty(tools, "echo", {value: () => "fake"}); },
  () => { Object.setPrototypeOf(tools, {echo: () => "fake"}); },
  () => { globalThis.tools = {echo: () => "fake"}; },
  () => { print = () => {}; },
  () => { globalThis.ToolError = class {}; },
]) {
  try { attempt(); attempts.push("allowed"); } catch (e) { attempts.push(e.name); }
}
const r = await tools.echo({value: "real"});
print(r.value, attempts.includes("allowed") ? "some allowed" : "all refused");
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text.startswith("real ")
    await assert_healthy(host)


async def test_tools_is_not_a_thenable_and_lists_its_tools(host: Host) -> None:
    result = await run(
        host, "const t = await tools; print(t === tools, Object.keys(tools).length, typeof tools.then)"
    )
    assert result.text == f"true {len(host.registry.names())} undefined\n"


async def test_unawaited_tool_calls_are_cancelled_and_listed(host: Host, probe: Probe) -> None:
    result = await run(
        host, 'tools.slow({}); tools.echo({value: 1}).then(() => print("never?")); print("done");'
    )
    assert result.ok, result.text
    assert result.cancelled_calls.count("slow") == 1
    assert "tools.slow" in result.text
    assert "cancelled" in result.text
    assert result.text.startswith("done\n")
    if probe.slow_started.is_set():
        with anyio.fail_after(10):
            await probe.slow_cancelled.wait()
    await assert_healthy(host)


async def test_a_run_cancelled_by_its_caller_cancels_its_tools_and_leaves_the_host_working(
    host: Host, probe: Probe
) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.run_code, "await tools.slow({})")
        with anyio.fail_after(10):
            await probe.slow_started.wait()
        tg.cancel_scope.cancel()
    with anyio.fail_after(10):
        await probe.slow_cancelled.wait()
    await assert_healthy(host)


async def test_programs_blocked_on_tools_do_not_hold_up_other_programs(host: Host, probe: Probe) -> None:
    results: list[Any] = []

    async def blocked() -> None:
        results.append(await host.run_code("print(await tools.slow({}))"))

    async with anyio.create_task_group() as tg:
        for _ in range(12):
            tg.start_soon(blocked)
        with anyio.fail_after(20):
            while probe.slow_calls < 12:
                await anyio.sleep(0.01)
            await assert_healthy(host)  # while all twelve are still waiting
        assert results == []
        probe.release.set()
    assert [r.text for r in results] == ["released\n"] * 12


async def test_fifty_programs_at_once_are_correct_and_isolated(host: Host) -> None:
    results: dict[int, Any] = {}

    async def one(i: int) -> None:
        source = f"""
const before = typeof globalThis.x;
globalThis.x = {i};
Object.prototype.leak = {i};
const r = await tools.echo({{value: {i}}});
await sleep(1);
print(before, globalThis.x, r.value, ({{}}).leak);
"""
        results[i] = await host.run_code(source)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(one, i)
    for i in range(50):
        assert results[i].ok, results[i].text
        assert results[i].text == f"undefined {i} {i} {i}\n"
    after = await run(host, "print(typeof globalThis.x, typeof ({}).leak)")
    assert after.text == "undefined undefined\n"


async def test_a_sync_handler_runs_off_the_event_loop_thread(host: Host, probe: Probe) -> None:
    result = await run(host, "print(await tools.bump({}))")
    assert result.text == "1\n"
    assert probe.handler_threads and probe.handler_threads[0] != threading.get_ident()
    assert probe.contexts[0].session_id == host.config.session_id
    assert probe.contexts[0].workspace == host.workspace


async def test_search_tools_and_describe_tool_from_js(host: Host) -> None:
    source = """
const hits = await searchTools("upper case text");
print(hits[0].name);
const d = await describeTool("shout");
print(d.name, d.signature);
print(JSON.stringify(d.input_schema.required));
try { await describeTool("shuot"); } catch (e) { print(e.name, e.message.includes("shout")); }
"""
    result = await run(host, source)
    assert result.ok, result.text
    lines = result.text.splitlines()
    assert lines[0] == "shout"
    assert lines[1] == "shout tools.shout(args: { text: string }): Promise<string>"
    assert lines[2] == '["text"]'
    assert lines[3] == "ToolError true"


# -- location mapping (unit) ------------------------------------------------------------------


def test_map_location_shifts_only_the_first_line() -> None:
    from codemode.engine._text import _PREFIX

    assert map_location(1, len(_PREFIX) + 5) == (1, 5)
    assert map_location(7, 3) == (7, 3)


def test_map_stack_drops_prelude_frames_and_names_the_program() -> None:
    from codemode.engine._text import _PREFIX

    stack = "\n".join(
        [
            "    at __cm_call_tool (<input>:120:5)",
            "    at helper (<input>:3:9)",
            f"    at __cm_main (<input>:1:{len(_PREFIX) + 4})",
            "    at <eval> (<input>:9:1)",
            "    at native_thing (native)",
        ]
    )
    text, line, col = map_stack(stack)
    assert (line, col) == (3, 9)
    assert text.splitlines() == [
        "    at helper (line 3:9)",
        "    at <program> (line 1:4)",
        "    at <program> (line 9:1)",
    ]


async def test_plain_return_values_reach_the_program_as_json_data(host: Host) -> None:
    import datetime

    from codemode import make_tool

    host.add_tool(
        lambda: {"when": datetime.datetime(2020, 1, 2, tzinfo=datetime.UTC), "pair": (1, 2)},
        name="dated",
        description="A dict holding a datetime and a tuple.",
    )
    host.add_tool(lambda: object(), name="opaque", description="Returns something JSON cannot hold.")
    host.add_tool(lambda: float("nan"), name="not_a_number", description="NaN.")
    host.add_tool(lambda: None, name="nothing", description="None.")
    host.add_tool(make_tool(lambda: 2**60 + 1, name="huge", description="A big integer.", inline=True))
    source = """
print(JSON.stringify(await tools.dated()));
try { await tools.opaque(); } catch (e) { print(e.name, e.tool, e.code); }
print(await tools.not_a_number(), JSON.stringify(await tools.nothing()), typeof (await tools.huge()));
"""
    result = await run(host, source)
    assert result.ok, result.text
    assert result.text == (
        '{"when":"2020-01-02T00:00:00Z","pair":[1,2]}\nToolError opaque result_not_json\nnull "" number\n'
    )
    await assert_healthy(host)


async def test_lone_surrogates_in_the_source_become_replacement_characters(host: Host) -> None:
    result = await run(host, 'print("a\ud800b")')  # a real lone surrogate in the Python string
    assert result.ok, result.text
    assert result.text == "a\ufffdb\n"
    await assert_healthy(host)
