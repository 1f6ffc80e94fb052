"""CPU and wall-clock limits on the program's own clocks, cancellation, and the bound on the
tool-call data the host holds for a program.

The CPU and wall-clock tests run a CPU hog thread beside the program: it inflates the process
CPU clock (a limit measured with clock(), as the PyPI binding's own was, would trip early).
They assert on the CPU time the program's thread used (reported in the result) and on which
limit ended it, never on how fast anything ran.
"""

from __future__ import annotations

import hashlib
import select
import threading
import tracemalloc
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from codemode import Host, ToolContext
from codemode.engine import EngineLimits, _qjs
from codemode.engine._outcome import ProgramCalls, ProgramOutcome
from codemode.engine._program import ProgramThread
from codemode.engine._text import prepare_context
from tests.host_support import MakeHost, assert_healthy

pytestmark = pytest.mark.anyio


async def run(host: Host, source: str, **kwargs: Any) -> Any:
    with anyio.fail_after(60):
        return await host.run_code(source, **kwargs)


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    """Two other threads of this process keep CPUs busy while the test runs.

    They hash without holding the GIL, so with the program's thread this process uses CPU
    time faster than the wall clock runs (as far as the machine's other load lets it).
    """
    stop = threading.Event()
    data = bytes(4 << 20)

    def spin() -> None:
        while not stop.is_set():
            hashlib.sha256(data).digest()  # releases the GIL while it hashes

    threads = [threading.Thread(target=spin, name="cpu-hog", daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    yield
    stop.set()
    for thread in threads:
        thread.join()


# -- CPU limit: the program's own thread ---------------------------------------------------------


@pytest.mark.usefixtures("cpu_hog")
async def test_cpu_limit_counts_only_the_programs_own_thread(make_host: MakeHost) -> None:
    async with make_host(cpu_seconds=1) as (host, _probe):
        result = await run(host, 'print("spinning");\nwhile (true) {}\n')
        assert result.error is not None
        assert (result.error.kind, result.error.name) == ("cpu_limit", "CpuLimit"), result.text
        assert result.text.startswith("spinning\n")
        # Never before the program's own thread used its second, whatever the hog used.
        assert result.usage.cpu_ms >= 1000
        await assert_healthy(host)


@pytest.mark.usefixtures("cpu_hog")
async def test_cpu_limit_stops_a_program_that_only_chains_promises(make_host: MakeHost) -> None:
    async with make_host(cpu_seconds=0.5) as (host, _probe):
        result = await run(host, "for (;;) await null;")
        assert result.error is not None and result.error.kind == "cpu_limit", result.text
        assert result.usage.cpu_ms >= 500
        await assert_healthy(host)


# -- wall-clock limit: monotonic time, whatever the CPU clocks say -------------------------------


@pytest.mark.usefixtures("cpu_hog")
async def test_wall_limit_while_computing_is_met_with_the_process_cpu_clock_inflated(
    make_host: MakeHost,
) -> None:
    async with make_host(cpu_seconds=600) as (host, _probe):
        result = await run(host, '// @run_code: {"timeout_seconds": 1}\nprint("spinning");\nfor (;;) {}\n')
        assert result.error is not None
        assert (result.error.kind, result.error.name) == ("timeout", "Timeout"), result.text
        assert "1 s wall-clock limit while computing" in result.error.message
        assert result.text.startswith("spinning\n")
        # The process CPU clock ran faster than the wall clock: a limit on it, armed with the
        # second that was left, would have ended the program early.
        assert result.usage.wall_ms >= 1000
        await assert_healthy(host)


# -- cancelling a run stops its program, also in the middle of computing -------------------------


async def test_cancelling_a_computing_program_interrupts_it(make_host: MakeHost) -> None:
    async with make_host(cpu_seconds=600) as (host, _probe):
        computing = threading.Event()

        @host.tool(inline=True)
        def about_to_compute() -> str:
            """Tell the test the program is about to loop."""
            computing.set()
            return "ok"

        program = ProgramThread(
            source="await tools.about_to_compute({}); for (;;) {}",
            registry=host.registry,
            context=ToolContext("s1", host.workspace, host.policy, host.archive),
            limits=EngineLimits(cpu_seconds=600),
            timeout_seconds=3600,
            channel=_qjs.Channel(),
            calls=ProgramCalls(),
            inline_json=host.registry.inline_names_json(),
        )
        outcome: list[ProgramOutcome] = []
        thread = threading.Thread(target=lambda: outcome.append(program.run(prepare_context())))
        thread.start()
        assert await anyio.to_thread.run_sync(computing.wait, 30)
        program.cancel()
        await anyio.to_thread.run_sync(thread.join, 60)
        assert not thread.is_alive()
        (result,) = outcome
        assert result.error is not None and result.error.kind == "cancelled"
        assert result.cpu_seconds < 600


# -- tool-call data held by the host ------------------------------------------------------------


def add_holding_tools(host: Host) -> None:
    """``hold`` keeps its arguments until ``release_holds`` is called."""
    released = anyio.Event()

    @host.tool()
    async def hold(text: str) -> int:
        """Wait until release_holds is called, then return the length of the text."""
        await released.wait()
        return len(text)

    @host.tool()
    async def release_holds() -> str:
        """Let every hold call (and later ones) return."""
        released.set()
        return "released"


async def test_calls_beyond_the_tool_data_limit_fail_until_calls_in_flight_settle(
    make_host: MakeHost,
) -> None:
    async with make_host(tool_data_mb=1) as (host, _probe):
        add_holding_tools(host)
        source = """
const piece = "x".repeat(600 * 1024);
const first = tools.hold({text: piece});
try {
  await tools.hold({text: piece});
  print("not refused");
} catch (e) {
  print(e.name, e.tool, e.code, e.data.limit_bytes, e.data.held_bytes > 0);
  print(e.message);
}
await tools.release_holds({});
print(await first);
print(await tools.hold({text: piece}));  // the first call settled: its room is free again
"""
        result = await run(host, source)
        assert result.ok, result.text
        lines = result.text.splitlines()
        assert lines[0] == f"ToolError hold tool_data_limit {1024 * 1024} true"
        assert lines[1] == (
            "tools.hold: its arguments are 0.6 MiB of JSON while the calls in flight hold 0.6 MiB, "
            "more than the 1 MiB of tool-call data the host holds for one program; pass smaller pieces "
            "(a path, an id or a range instead of the data itself), or await calls one at a time "
            "instead of starting them all at once"
        )
        assert lines[2:] == [str(600 * 1024)] * 2
        await assert_healthy(host)


async def test_one_call_larger_than_the_limit_says_to_pass_smaller_pieces(make_host: MakeHost) -> None:
    async with make_host(tool_data_mb=1) as (host, _probe):
        result = await run(host, 'await tools.echo({value: "y".repeat(2 * 1024 * 1024)})')
        assert result.error is not None and result.error.name == "ToolError"
        assert "its arguments are 2 MiB of JSON, more than the 1 MiB" in result.error.message
        assert "pass smaller pieces" in result.error.message
        assert "one at a time" not in result.error.message  # nothing else was in flight
        await assert_healthy(host)


async def test_a_result_beyond_the_tool_data_limit_fails_that_call_only(make_host: MakeHost) -> None:
    async with make_host(tool_data_mb=1) as (host, _probe):
        source = """
try {
  await tools.big({mb: 2});
} catch (e) {
  print(e.code, e.data.result_bytes);
  print(e.message);
}
print((await tools.shout({text: "still works"})));
"""
        result = await run(host, source)
        assert result.ok, result.text
        assert result.text.splitlines() == [
            f"tool_data_limit {2 * 1024 * 1024}",
            "big returned 2 MiB of data, more than the 1 MiB of tool-call data the host holds for one "
            "program; ask for less per call (a page, a range, a filter)",
            "STILL WORKS",
        ]
        await assert_healthy(host)


async def test_host_memory_stays_bounded_when_a_program_queues_many_large_calls(make_host: MakeHost) -> None:
    # The report: a program within its heap limit queued 32 large calls and the host held them all.
    limit_mb = 4
    async with make_host(tool_data_mb=limit_mb) as (host, _probe):
        add_holding_tools(host)
        source = """
const piece = "x".repeat(1024 * 1024);
const calls = [];
for (let i = 0; i < 32; i++) {
  calls.push(tools.hold({text: piece}).then(() => "ok", (e) => e.code));
  await sleep(0);  // the host drains each call before the next is made
}
await tools.release_holds({});
const outcomes = await Promise.all(calls);
print(outcomes.filter((o) => o === "ok").length, outcomes.filter((o) => o === "tool_data_limit").length);
"""
        _ = host.counter.exact  # the tokenizer loads first (on its own thread): its tables are not traced
        tracemalloc.start()
        try:
            result = await run(host, source)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert result.ok, result.text
        assert result.text == "3 29\n"  # three calls of 1 MiB and a few bytes fit in 4 MiB
        # Python-side memory (the QuickJS heap is not traced): the held arguments plus the one
        # call being drained, far below the 32 MiB the calls would have held.
        assert peak < 2 * limit_mb * 1024 * 1024
        await assert_healthy(host)


async def test_a_timeout_met_while_waiting_says_what_it_waited_for(make_host: MakeHost) -> None:
    # The watchdog's interrupt (reason timeout) can wake a waiting program before the wait's
    # own deadline does: the message is still the waiting one, naming the tool.
    async with make_host() as (host, _probe):

        @host.tool()
        async def never() -> str:
            """Never asked: nothing reads this program's channel."""
            return ""

        channel = _qjs.Channel()
        program = ProgramThread(
            source="await tools.never({});",
            registry=host.registry,
            context=ToolContext("s1", host.workspace, host.policy, host.archive),
            limits=EngineLimits(cpu_seconds=600),
            timeout_seconds=3600,
            channel=channel,
            calls=ProgramCalls(),
        )
        outcome: list[ProgramOutcome] = []
        thread = threading.Thread(target=lambda: outcome.append(program.run(prepare_context())))
        thread.start()
        posted = await anyio.to_thread.run_sync(lambda: select.select([channel.fileno()], [], [], 30)[0])
        assert posted  # the program posted its call and waits for it
        assert program._watch is not None
        program._watch.reason = "timeout"  # what the watchdog does at the deadline: reason, then interrupt
        channel.interrupt()
        await anyio.to_thread.run_sync(thread.join, 60)
        (result,) = outcome
        assert result.error is not None and result.error.kind == "timeout"
        assert "while waiting for never" in result.error.message, result.error.message
