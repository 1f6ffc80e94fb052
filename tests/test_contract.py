"""The Code Mode contract: results are data, failures are coded, an uncaught one names its line.

Real QuickJS, real Host, real commands.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from codemode import ErrorCode, Host, ToolError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "f").write_text("nothing to find here\n")
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", handoff_seconds=None) as h:
        yield h


async def test_a_command_that_ran_resolves_whatever_its_exit_code(host: Host) -> None:
    with anyio.fail_after(60):
        result = await host.run_code(
            'const g = await tools.bash({command: "grep zzz f"});\n'
            'const t = await tools.bash({command: "test -f missing"});\n'
            'const k = await tools.bash({command: "kill -TERM $$"});\n'
            "print(g.exit_code, t.exit_code, k.exit_code, k.signal);"
        )
    assert result.ok, result.text
    assert result.text.strip() == "1 1 143 SIGTERM"


async def test_a_direct_call_keeps_is_error_for_a_non_zero_exit(host: Host) -> None:
    result = await host.call_tool("bash", {"command": "exit 3"})
    assert result.is_error and result.structured_content["exit_code"] == 3


async def test_a_call_that_could_not_do_its_job_rejects_with_a_code(host: Host) -> None:
    with anyio.fail_after(60):
        result = await host.run_code(
            'for (const call of [() => tools.read_file({path: "nope"}), () => tools.nope({}),'
            ' () => tools.bash({command: 5}), () => tools.bash({action: "stop", process_id: "p_0"}),'
            ' () => tools.edit_file({path: "f", old_text: "absent", new_text: "x"})]) {\n'
            "  try { await call(); print('resolved?'); } catch (e) { print(e.name, e.code); }\n"
            "}"
        )
    assert result.text.split("\n")[:5] == [
        "ToolError not_found",
        "ToolError unknown_tool",
        "ToolError invalid_arguments",
        "ToolError no_such_process",
        "ToolError no_match",
    ], result.text


async def test_an_uncaught_tool_error_names_the_line_of_the_call(host: Host) -> None:
    with anyio.fail_after(60):
        result = await host.run_code(
            'const a = 1;\nprint(a);\n  await tools.read_file({path: "missing.txt"});\n'
        )
    assert result.error is not None and result.error.name == "ToolError"
    assert result.error.line == 3, result.error
    assert "(line 3:" in result.text


async def test_every_kind_of_call_names_the_line_of_the_call_that_failed(host: Host) -> None:
    # The call site is kept only for calls that fail or settle later (an inline tool that
    # succeeds at once never needs it): each way a call settles must still name its line.
    @host.tool(inline=True)
    def picky(value: int) -> int:
        "Fail for 3."
        if value == 3:
            raise ToolError("three is not allowed", code=ErrorCode.TOOL_FAILED)
        return value

    programs = {
        "inline, failing at once": "for (let i = 0; i < 5; i++)\n  await tools.picky({value: i});\n",
        "inline, invalid arguments": "await tools.picky({value: 1});\n\n await tools.picky({value: 'x'});\n",
        "async, failing later": "await tools.picky({value: 1});\n  await tools.read_file({path: 'nope'});\n",
        "in a function": "function f(v) {\n  return tools.picky({value: v});\n}\nawait f(1); await f(3);\n",
    }
    lines = {}
    for name, program in programs.items():
        with anyio.fail_after(60):
            result = await host.run_code(program)
        assert result.error is not None and result.error.name == "ToolError", (name, result.text)
        lines[name] = result.error.line
    assert lines == {
        "inline, failing at once": 2,
        "inline, invalid arguments": 3,
        "async, failing later": 2,
        "in a function": 2,
    }


async def test_null_for_an_optional_argument_means_absent_and_messages_speak_json(host: Host) -> None:
    with anyio.fail_after(60):
        ok = await host.run_code('print((await tools.read_file({path: "f", offset: null})).total_lines)')
        bad = await host.run_code(
            "try { await tools.read_file({path: null}); } catch (e) { print(e.message); }"
        )
    assert ok.ok and ok.text.strip() == "1", ok.text
    assert "None" not in bad.text and "null" in bad.text, bad.text
