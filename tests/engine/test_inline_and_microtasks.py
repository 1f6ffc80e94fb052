"""Inline tools (run on the program's own thread) and programs that only chain promises."""

from __future__ import annotations

import threading

import anyio
import pytest

from codemode import ErrorCode, Host, ToolError, UserError, make_tool, tool
from tests.host_support import MakeHost, assert_healthy

pytestmark = pytest.mark.anyio


async def test_a_pure_promise_loop_meets_the_cpu_limit(make_host: MakeHost) -> None:
    async with make_host(cpu_seconds=0.5, timeout_seconds=60) as (host, _probe):
        with anyio.fail_after(30):
            result = await host.run_code("print('start'); while (true) { await null; }")
        assert result.error is not None and result.error.kind == "cpu_limit"
        assert result.text.startswith("start\n")
        await assert_healthy(host)


async def test_a_pure_promise_loop_meets_the_wall_clock_limit(host: Host) -> None:
    with anyio.fail_after(30):
        result = await host.run_code("while (true) { await Promise.resolve(1); }", timeout_seconds=0.3)
    assert result.error is not None and result.error.kind == "timeout"
    await assert_healthy(host)


async def test_inline_tools_run_on_the_program_thread(make_host: MakeHost) -> None:
    threads: set[int] = set()

    @tool(inline=True)
    def double(n: int) -> int:
        "Double n."
        threads.add(threading.get_ident())
        return n * 2

    @tool(inline=True)
    def refuse(n: int) -> int:
        "Always refuses."
        raise ToolError("not today", {"n": n}, code=ErrorCode.TOOL_FAILED)

    async with make_host() as (host, _probe):
        host.add_tool(double)
        host.add_tool(refuse)
        result = await host.run_code(
            "let s = 0; for (let i = 0; i < 100; i++) s += await tools.double({n: i});\n"
            "const both = await Promise.all([tools.double({n: 1}), tools.echo({value: 2})]);\n"
            "try { await tools.refuse({n: 3}) } catch (e) { print(e.name, e.tool, e.message, JSON.stringify(e.data)) }\n"
            "try { await tools.double({n: 'x'}) } catch (e) { print(e.message.split(':')[0]) }\n"
            "print(s, both)"
        )
        assert result.ok, result.text
        assert result.text.splitlines() == [
            'ToolError refuse refuse: not today {"n":3}',
            "Invalid arguments for double",
            '9900 [2,{"value":2}]',
        ]
        assert len(threads) == 1 and threading.get_ident() not in threads
        assert result.usage.tool_calls == 103  # the call with bad arguments never started


async def test_an_endless_loop_of_inline_calls_meets_the_limits(make_host: MakeHost) -> None:
    @tool(inline=True)
    def tick() -> int:
        "Return 1."
        return 1

    async with make_host(cpu_seconds=0.5, timeout_seconds=60) as (host, _probe):
        host.add_tool(tick)
        with anyio.fail_after(30):
            result = await host.run_code("while (true) { await tools.tick(); }")
        assert result.error is not None and result.error.kind in {"cpu_limit", "timeout"}
        await assert_healthy(host)


async def test_an_endless_loop_of_inline_calls_meets_the_wall_clock_limit(make_host: MakeHost) -> None:
    @tool(inline=True)
    def tick() -> int:
        "Return 1."
        return 1

    async with make_host(cpu_seconds=600, timeout_seconds=60) as (host, _probe):
        host.add_tool(tick)
        with anyio.fail_after(30):
            result = await host.run_code("while (true) { await tools.tick(); }", timeout_seconds=0.3)
        assert result.error is not None and result.error.kind == "timeout"
        await assert_healthy(host)


def test_inline_is_only_for_sync_handlers() -> None:
    async def fetch(url: str) -> str:
        "Fetch."
        return url

    with pytest.raises(UserError, match="inline tools must be plain"):
        make_tool(fetch, inline=True)


async def test_store_and_refused_calls_settle_while_another_call_is_pending(make_host: MakeHost) -> None:
    # A store.* result or a call refused for its arguments is settled while the host drains the
    # program's messages; the program must go on at once, not only when the other call ends.
    released = anyio.Event()

    @tool()
    async def hold() -> str:
        "Wait until release() is called."
        await released.wait()
        return "held"

    @tool()
    async def release() -> str:
        "Let hold() return."
        released.set()
        return "released"

    async with make_host(timeout_seconds=60) as (host, _probe):
        host.add_tool(hold)
        host.add_tool(release)
        with anyio.fail_after(30):
            result = await host.run_code(
                "const pending = tools.hold();\n"
                "await store.set('k', 1);\n"
                "try { await tools.release({unexpected: true}) } catch (e) { print(e.name) }\n"
                "await tools.release();\n"
                "print(await pending, await store.get('k'));"
            )
        assert result.ok, result.text
        assert result.text == "ToolError\nheld 1\n"


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "on-the-loop"])
async def test_calls_settle_the_same_on_the_programs_thread_or_through_the_loop(
    make_host: MakeHost, inline: bool
) -> None:
    # An inline tool is answered inside the program's call (hostCall); any other is posted to
    # the event loop, checked and run there, and its result posted back (postCall): the two
    # paths must look the same to the program.
    async with make_host() as (host, _probe):

        def halve(value: int) -> int:
            "Half of an even number."
            if value % 2:
                raise ToolError(f"{value} is odd", code=ErrorCode.TOOL_FAILED)
            return value // 2

        async def halve_async(value: int) -> int:
            "Half of an even number."
            return halve(value)

        if inline:
            host.add_tool(halve, inline=True)
        else:
            host.add_tool(halve_async, name="halve")

        program = (
            "const odd = [];\n"
            "let sum = 0;\n"
            "for (let i = 0; i < 6; i++) {\n"
            "  try { sum += await tools.halve({value: i}); } catch (e) { odd.push([e.code, e.message]); }\n"
            "}\n"
            'await store.set("k\\u0000é", {n: sum});\n'
            'print(sum, JSON.stringify(odd), JSON.stringify(await store.get("k\\u0000é")));\n'
            'print((await searchTools("halve")).map((t) => t.name).join());\n'
            'await tools["halve\\u0000"]({value: 2});\n'
        )
        with anyio.fail_after(60):
            result = await host.run_code(program)
    lines = result.text.splitlines()
    odd = ",".join(f'["tool_failed","halve: {n} is odd"]' for n in (1, 3, 5))
    assert lines[0] == f'3 [{odd}] {{"n":3}}'
    assert "halve" in lines[1].split(",")
    # A name is carried whole (U+0000 included): no tool has it.
    assert result.error is not None and result.error.line == 9, result.text
    assert "unknown" in result.error.message.lower() or "no tool" in result.error.message.lower(), (
        result.error
    )


async def test_a_call_starts_while_its_program_computes_on(make_host: MakeHost) -> None:
    """A call is started without waiting for its program to wait: the program below computes
    (with inline calls, which never give its posted calls to the host) until the call it
    posted has started, and would run to its timeout were the call held until it waits."""
    started = threading.Event()

    @tool()
    async def mark() -> str:
        "Note that this call started."
        started.set()
        return "marked"

    @tool(inline=True)
    def has_started() -> bool:
        "Whether mark has started."
        return started.is_set()

    async with make_host() as (host, _probe):
        host.add_tool(mark)
        host.add_tool(has_started)
        source = """
const marked = tools.mark({});
while (!(await tools.has_started({}))) {}
print(await marked);
"""
        with anyio.fail_after(60):
            result = await host.run_code(source, timeout_seconds=20)
        assert result.ok, result.error
        assert result.text == "marked\n"
        await assert_healthy(host)
