"""Engine.run (codemode/engine/_runtime.py) on its own: a real QuickJS engine over a registry,
no Host. Guest failures come back in the outcome; calls the program left running are
stopped, or reported with what they did."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.engine import Engine, EngineLimits, ProgramOutcome
from codemode.errors import ErrorCode, ToolError, UserError
from codemode.sandbox import SandboxMode, SandboxPolicy
from codemode.state import Archive, State
from codemode.tools import ToolContext, ToolRegistry, ToolResult

pytestmark = pytest.mark.anyio


class Seen:
    def __init__(self) -> None:
        self.hang_started = anyio.Event()
        self.hang_cancelled = anyio.Event()
        self.shielded_done = anyio.Event()
        self.quick_done = threading.Event()
        self.calls: list[str] = []


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Archive]:
    a_state = State(tmp_path / "state")
    a = a_state.archive
    yield a
    a_state.close()


@pytest.fixture
def context(tmp_path: Path, archive: Archive) -> ToolContext:
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, writable_roots=(ws,), temp_dir=tmp_path)
    return ToolContext("s1", ws, policy, archive)


@pytest.fixture
async def seen() -> Seen:
    return Seen()


@pytest.fixture
async def engine(seen: Seen) -> AsyncIterator[Engine]:
    registry = ToolRegistry()

    async def double(n: int) -> int:
        """Twice n."""
        seen.calls.append("double")
        return 2 * n

    async def hang() -> str:
        """Waits until cancelled."""
        seen.hang_started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            seen.hang_cancelled.set()
            raise
        return "never"

    async def shielded() -> ToolResult:
        """Finishes even when asked to stop (like a background start), once hang was stopped."""
        with anyio.CancelScope(shield=True):
            await seen.hang_cancelled.wait()
        seen.shielded_done.set()
        return ToolResult.from_text("started p_1", {"started": "p_1"})

    async def shielded_data() -> dict[str, Any]:
        """The same, returning plain data."""
        with anyio.CancelScope(shield=True):
            await seen.hang_cancelled.wait()
        seen.shielded_done.set()
        return {"started": "p_2"}

    def announce_quick() -> None:
        # After this task step (the result already queued for the program), release the inline wait.
        asyncio.get_running_loop().call_soon(seen.quick_done.set)

    async def quick_data() -> dict[str, Any]:
        """Finishes at once with plain data."""
        announce_quick()
        return {"quick": True}

    async def quick_result() -> ToolResult:
        """Finishes at once with a ToolResult."""
        announce_quick()
        return ToolResult.from_text("did it", {"quick": True})

    def wait_for_quick() -> bool:
        """Holds the program's thread until a quick tool has finished."""
        return seen.quick_done.wait(30)

    async def refuse(reason: str) -> str:
        """Fails as a tool."""
        raise ToolError(reason, {"why": reason}, code=ErrorCode.TOOL_FAILED)

    async def broken() -> str:
        """A handler bug."""
        raise RuntimeError("handler bug")

    async def deadline(ms: int) -> str:
        """Waits for something with asyncio's own deadline (spent at once when ms is 0)."""
        try:
            async with asyncio.timeout(ms / 1000):
                await asyncio.sleep(5)
        except TimeoutError:
            return "timed out"
        return "done"

    for fn in (double, hang, shielded, shielded_data, quick_data, quick_result, refuse, broken, deadline):
        registry.add(fn)
    registry.add(wait_for_quick, inline=True)
    e = Engine(registry, EngineLimits(cpu_seconds=10), max_programs=4)
    yield e
    e.close()


async def _run(engine: Engine, context: ToolContext, source: str, timeout: float = 30) -> ProgramOutcome:
    with anyio.fail_after(60):
        return await engine.run(source, context, timeout_seconds=timeout)


async def test_a_program_calls_tools_and_prints(engine: Engine, context: ToolContext) -> None:
    outcome = await _run(engine, context, "const a = await tools.double({n: 21}); print(a); return a + 1")
    assert outcome.error is None
    assert outcome.output == "42\n43\n"
    assert outcome.tool_calls == 1 and outcome.cancelled == [] and outcome.late == []


@pytest.mark.parametrize(
    ("source", "kind", "name"),
    [
        ("let x = ;", "syntax_error", "SyntaxError"),
        ('print("before"); throw new TypeError("bad")', "uncaught", "TypeError"),
        ("throw 42", "uncaught", "Uncaught"),
        ('await tools.refuse({reason: "no"})', "uncaught", "ToolError"),
        ("await tools.broken({})", "uncaught", "ToolError"),
        ("await tools.nosuch({})", "uncaught", "ToolError"),
        ("await tools.double({n: 'x'})", "uncaught", "ToolError"),
        ("await new Promise(() => {})", "deadlock", None),
        ("function f() { return f() + 1 } f()", "stack_overflow", None),
    ],
)
async def test_guest_failures_come_back_in_the_outcome(
    engine: Engine, context: ToolContext, source: str, kind: str, name: str | None
) -> None:
    outcome = await _run(engine, context, source)
    assert outcome.error is not None, outcome.output
    assert outcome.error.kind == kind, outcome.error
    if name is not None:
        assert outcome.error.name == name
    # ... and the engine goes on working
    after = await _run(engine, context, "print(await tools.double({n: 1}))")
    assert after.error is None and after.output == "2\n"


async def test_a_tool_error_keeps_its_message_data_and_tool(engine: Engine, context: ToolContext) -> None:
    outcome = await _run(engine, context, 'print("kept"); await tools.refuse({reason: "nope"})')
    assert outcome.output == "kept\n"
    assert outcome.error is not None
    assert outcome.error.tool == "refuse" and "nope" in outcome.error.message
    assert outcome.error.data is not None and '"why"' in outcome.error.data


async def test_the_wall_clock_limit_is_an_outcome(engine: Engine, context: ToolContext, seen: Seen) -> None:
    outcome = await _run(engine, context, "await tools.hang({})", timeout=0.5)
    assert outcome.error is not None and outcome.error.kind == "timeout"
    assert seen.hang_cancelled.is_set()  # the call it was waiting on was stopped with it


async def test_calls_left_pending_are_stopped_at_the_end(
    engine: Engine, context: ToolContext, seen: Seen
) -> None:
    outcome = await _run(engine, context, 'tools.hang({}); print("done")')
    assert outcome.error is None and outcome.output == "done\n"
    assert outcome.cancelled == ["hang"]
    assert outcome.late == []
    assert seen.hang_cancelled.is_set()  # stopped before run() returned, not left on the loop


async def test_a_pending_call_that_took_effect_is_reported_not_cancelled(
    engine: Engine, context: ToolContext, seen: Seen
) -> None:
    # shielded finishes only once hang has been told to stop, i.e. while the engine settles
    # the calls the program left behind: deterministic, no timing.
    outcome = await _run(engine, context, "tools.shielded({}); tools.hang({})")
    assert outcome.error is None
    assert seen.shielded_done.is_set() and seen.hang_cancelled.is_set()
    assert outcome.cancelled == ["hang"]
    assert [name for name, _ in outcome.late] == ["shielded"]
    (_, result) = outcome.late[0]
    assert isinstance(result, ToolResult)
    assert result.structured_content == {"started": "p_1"}


async def test_a_late_call_returning_plain_data_is_reported_as_a_tool_result(
    engine: Engine, context: ToolContext, seen: Seen
) -> None:
    outcome = await _run(engine, context, "tools.shielded_data({}); tools.hang({})")
    assert seen.shielded_done.is_set()
    assert [name for name, _ in outcome.late] == ["shielded_data"]
    (_, result) = outcome.late[0]
    assert isinstance(result, ToolResult), result
    assert result.structured_content == {"started": "p_2"}


async def test_a_call_finished_unread_with_plain_data_is_not_called_cancelled(
    engine: Engine, context: ToolContext, seen: Seen
) -> None:
    # quick_data finishes on the loop (its result queued for the program) while the program's
    # thread is held in an inline call until then; the program then ends without reading it.
    outcome = await _run(engine, context, "tools.quick_data({}); tools.wait_for_quick({})")
    assert outcome.error is None
    assert seen.quick_done.is_set()
    assert outcome.cancelled == []
    assert [name for name, _ in outcome.late] == ["quick_data"]


async def test_a_call_finished_unread_with_a_tool_result_is_reported(
    engine: Engine, context: ToolContext, seen: Seen
) -> None:
    outcome = await _run(engine, context, "tools.quick_result({}); tools.wait_for_quick({})")
    assert outcome.error is None
    assert outcome.cancelled == []
    assert [name for name, _ in outcome.late] == ["quick_result"]
    assert outcome.late[0][1].text == "did it"


async def test_calls_beyond_the_calls_in_flight_limit_fail_and_say_to_await(
    engine: Engine, context: ToolContext
) -> None:
    # A program that starts calls in a loop without awaiting them cannot make the host hold
    # an unbounded queue of them.
    small = Engine(engine.registry, EngineLimits(cpu_seconds=10, calls_in_flight=3), max_programs=2)
    try:
        outcome = await _run(
            small,
            context,
            "const refused = [];\n"
            "for (let i = 0; i < 5; i++) tools.hang({}).catch((e) => refused.push([e.code, e.data.limit_calls, e.message]));\n"
            "await sleep(20);\n"
            "print(JSON.stringify(refused));",
        )
    finally:
        small.close()
    assert outcome.error is None, outcome.error
    refused = json.loads(outcome.output)
    assert [(code, limit) for code, limit, _ in refused] == [("tool_data_limit", 3)] * 2
    assert "await calls before starting more" in refused[0][2]
    assert outcome.cancelled == ["hang"] * 3


async def test_cancelling_the_caller_stops_the_program_and_its_calls(
    engine: Engine, context: ToolContext, seen: Seen
) -> None:
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            await engine.run("await tools.hang({}); print('unreachable')", context, timeout_seconds=60)

        tg.start_soon(run)
        with anyio.fail_after(30):
            await seen.hang_started.wait()
        tg.cancel_scope.cancel()
    with anyio.fail_after(30):
        await seen.hang_cancelled.wait()
    after = await _run(engine, context, "print(await tools.double({n: 5}))")
    assert after.output == "10\n"


async def test_programs_run_at_once_up_to_max_programs(
    engine: Engine, context: ToolContext, seen: Seen
) -> None:
    outputs: list[str] = []

    async def one(i: int) -> None:
        outcome = await _run(engine, context, f"print(await tools.double({{n: {i}}}))")
        outputs.append(outcome.output)

    async with anyio.create_task_group() as tg:
        for i in range(10):  # more than max_programs=4: the rest wait for a slot
            tg.start_soon(one, i)
    assert sorted(outputs) == sorted(f"{2 * i}\n" for i in range(10))


async def test_close_leaves_the_engine_usable(engine: Engine, context: ToolContext) -> None:
    await _run(engine, context, "print(1)")
    engine.close()
    outcome = await _run(engine, context, "print(2)")
    assert outcome.output == "2\n"


def test_another_event_loop_is_a_user_error(context: ToolContext) -> None:
    pytest.importorskip("trio")
    engine = Engine(ToolRegistry(), EngineLimits())
    try:

        async def main() -> None:
            await engine.run("print(1)", context, timeout_seconds=10)

        with pytest.raises(UserError, match="asyncio"):
            anyio.run(main, backend="trio")
    finally:
        engine.close()


async def test_a_tool_timing_itself_out_with_asyncio_answers_every_call(
    engine: Engine, context: ToolContext
) -> None:
    # asyncio.timeout cancels the task the tool runs in: calls share a runner task, so the
    # cancellation must reach the call it was meant for, every time.
    source = "const out = []; for (let i = 0; i < 3; i++) out.push(await tools.deadline({ms: 0})); print(out.join())"
    outcome = await _run(engine, context, source, timeout=10)
    assert outcome.error is None, outcome.error
    assert outcome.output == "timed out,timed out,timed out\n"
