"""What a program can make the host hold or spend is bounded: printed output (head and tail kept,
the middle dropped and counted), searchTools/describeTool inputs (refused past a cap, with an
error naming it), and 100,000 calls started without awaiting (no recursion in the host; the
async ones beyond the calls-in-flight cap fail with tool_data_limit)."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest

from codemode.engine._output import PrintedOutput
from codemode.tools._search import MAX_NAME_CHARS, MAX_QUERY_CHARS
from tests.host_support import MakeHost, assert_healthy

pytestmark = pytest.mark.anyio


def test_printed_output_keeps_its_head_and_tail_and_counts_the_middle() -> None:
    out = PrintedOutput(10)
    for piece in ("abc", "defg", "hijk", "lmnopq", "rs"):
        out.append(piece)
    assert out.chars == 19 and out.dropped == 9
    head, marker, tail = out.text().split("\n")
    assert head == "abcde" and tail == "opqrs"
    assert "9 printed characters dropped here" in marker and "the last 5" in marker
    small = PrintedOutput(100)
    small.append("hello\n")
    assert small.text() == "hello\n" and small.dropped == 0


async def test_a_program_printing_in_a_loop_is_held_within_the_cap(make_host: MakeHost) -> None:
    async with make_host() as (host, _probe):
        source = "const line = 'y'.repeat(1023); for (let i = 0; i < 12 * 1024; i++) print(line)"
        with anyio.fail_after(120):
            result = await host.run_code(source, max_output_tokens=4000)
        assert result.ok, result.text
        dropped = 12 * 1024 * 1024 - 8 * 1024 * 1024
        assert f"{dropped:,} printed characters beyond the in-memory limit were dropped" in result.text
        assert result.usage.printed_bytes < 8 * 1024 * 1024 + 1000  # what the host held and handed on
        await assert_healthy(host)


async def test_search_and_describe_refuse_a_huge_input_naming_the_limit(make_host: MakeHost) -> None:
    async with make_host() as (host, _probe):
        source = """
const out = [];
for (const f of [() => searchTools("a".repeat(1e6)), () => describeTool("a".repeat(1e6)),
                 () => tools["a".repeat(1e6)]({})]) {
  try { await f(); out.push("no error") } catch (e) { out.push([e.code, e.message]) }
}
print(JSON.stringify(out));
"""
        with anyio.fail_after(60):
            result = await host.run_code(source)
        assert result.ok, result.text
        (search, describe, call) = json.loads(result.text.strip().splitlines()[0])
        assert search[0] == "invalid_arguments"
        assert f"at most {MAX_QUERY_CHARS:,}" in search[1] and "1,000,000" in search[1]
        assert describe[0] == "unknown_tool" and f"at most {MAX_NAME_CHARS}" in describe[1]
        assert call[0] == "unknown_tool" and len(call[1]) < 1000  # the name is not echoed whole
        # Within the caps, search and describe work as before.
        ok = await host.run_code(
            'print((await searchTools("echo value")).map((t) => t.name).includes("echo"))'
        )
        assert ok.text.strip() == "true"


@pytest.mark.slow  # 100,000 calls: ~13 s on a busy 2-core machine
async def test_100000_unawaited_calls_end_without_recursion(make_host: MakeHost, caplog: Any) -> None:
    caplog.set_level(logging.ERROR)
    async with make_host() as (host, _probe):

        @host.tool(inline=True)
        def quick(value: int) -> int:
            """Return the value (inline: answered at once)."""
            return value

        @host.tool()
        async def later(value: int) -> int:
            """Return the value after a while (async: held by the host meanwhile)."""
            await anyio.sleep(0.2)
            return value

        counts = {}
        for name in ("quick", "later"):
            source = (
                "const codes = {}; let first = '';\n"
                f"for (let i = 0; i < 100000; i++) tools.{name}({{value: i}}).catch((e) => {{"
                " codes[e.code] = (codes[e.code] || 0) + 1; first = first || e.message });\n"
                "await new Promise((r) => setTimeout(r, 10));\nprint(JSON.stringify([codes, first]));"
            )
            with anyio.fail_after(120):
                result = await host.run_code(source, timeout_seconds=60, max_output_tokens=2000)
            assert result.ok, result.text
            counts[name] = json.loads(result.text.strip().splitlines()[0])
        assert counts["quick"] == [{}, ""]  # each answered at once: never more than one in flight
        codes, first = counts["later"]
        assert codes == {"tool_data_limit": 90000}
        assert "10000 calls of this program are in flight" in first and "await" in first
        await assert_healthy(host)
    assert not [r for r in caplog.records if "RecursionError" in r.getMessage() or r.exc_info], [
        r.getMessage()[:200] for r in caplog.records
    ]
