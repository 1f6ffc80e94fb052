"""Host progress reports (what the MCP front turns into notifications/progress)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from codemode import Host, Progress

pytestmark = pytest.mark.anyio


async def test_run_code_reports_printed_characters_tool_calls_and_command_output(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    reports: list[Progress] = []

    async def collect(progress: Progress) -> None:
        reports.append(progress)

    code = """
    print("y".repeat(999));
    await tools.bash({command: "head -c 3000 /dev/zero | tr '\\\\0' z; sleep 2.2"});
    """
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", handoff_seconds=None) as host:
        result = await host.run_code(code, on_progress=collect)
        assert result.ok, result.text
        assert reports, "no progress report during a 2 s program"
        # While the command runs (a report after it has ended no longer counts its output).
        during = [r for r in reports if r.output_bytes]
        assert during and (during[-1].printed_chars, during[-1].tool_calls, during[-1].output_bytes) == (
            1000,
            1,
            3000,
        )
        assert (
            during[-1]
            .message()
            .endswith("1,000 characters printed, 1 tool call, 3,000 bytes of command output")
        )
        assert [r.elapsed_seconds for r in reports] == sorted(r.elapsed_seconds for r in reports)
        reports.clear()
        await host.run_code("print(1)")  # no callback: nothing is sampled at all
        assert reports == []


@pytest.mark.parametrize(
    "then",
    [
        "await sleep(2200);",  # waits on a timer of its own
        "await new Promise((resolve) => setTimeout(resolve, 1)); spin(2200);",  # computes
    ],
)
async def test_a_program_that_printed_then_waits_or_computes_without_calls_reports_it(
    tmp_path: Path, then: str
) -> None:
    """Nothing wakes the host for such a program but the text it handed over as it went on:
    in a worker process, its thread wakes the relay that tells the host (a program that ends
    sooner says it all at its end, and costs no wake-up)."""
    (tmp_path / "ws").mkdir()
    reports: list[Progress] = []

    async def collect(progress: Progress) -> None:
        reports.append(progress)

    code = (
        "const spin = (ms) => { const end = Date.now() + ms; while (Date.now() < end) {} };"
        f'print("x".repeat(99)); {then}'
    )
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", handoff_seconds=None) as host:
        result = await host.run_code(code, on_progress=collect)
    assert result.ok, result.text
    assert reports and all(r.printed_chars == 100 for r in reports), [r.printed_chars for r in reports]


async def test_a_direct_call_counts_only_its_own_commands(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    reports: list[Progress] = []

    async def collect(progress: Progress) -> None:
        reports.append(progress)

    slow = "head -c {n} /dev/zero | tr '\\0' z; sleep 2.2"
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", handoff_seconds=None) as host:
        async with anyio.create_task_group() as group:  # another call of the same session, unreported
            group.start_soon(lambda: host.call_tool("bash", {"command": slow.format(n=7000)}))
            called = await host.call_tool("bash", {"command": slow.format(n=2000)}, on_progress=collect)
        assert not called.is_error
        assert reports and {r.output_bytes for r in reports} <= {0, 2000} and reports[0].printed_chars is None
        assert any(r.message().endswith("2,000 bytes of command output") for r in reports)
