"""A program's awaited command waits for its answer; only direct calls hand off (issue 28, item 5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codemode import Host

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _host(tmp_path: Path) -> Host:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    # A hand-off window far shorter than the command: a direct call is handed off.
    return Host(workspace=ws, state_dir=tmp_path / "state", handoff_seconds=0.2)


async def test_a_program_gets_the_real_exit_code_past_the_handoff_window(tmp_path: Path) -> None:
    async with _host(tmp_path) as host:
        # The command runs three times the hand-off window; nothing races: a program waits.
        program = """
const r = await tools.bash({command: "sleep 0.6; echo done; exit 3"});
print(r.exit_code, r.promoted_process_id ?? null, r.stdout.excerpt.trim());
"""
        result = await host.run_code(program)
        assert result.ok, result.text
        assert result.text == "3 null done\n"
        assert host.processes.list_processes(host.config.session_id) == []


async def test_a_direct_call_still_hands_off(tmp_path: Path) -> None:
    async with _host(tmp_path) as host:
        called = await host.call_tool("bash", {"command": "sleep 0.6; echo late"})
        data = called.structured_content
        assert data is not None
        pid = data["promoted_process_id"]
        assert isinstance(pid, str) and pid.startswith("p_")
        waited = await host.call_tool("bash", {"action": "wait", "process_id": pid})
        assert waited.structured_content is not None
        assert waited.structured_content["exit_code"] == 0


async def test_the_program_limit_promotes_the_command_and_names_it(tmp_path: Path) -> None:
    async with _host(tmp_path) as host:
        program = '// @run_code: {"timeout_seconds": 0.5}\nawait tools.bash({command: "sleep 30"});'
        result = await host.run_code(program)
        assert not result.ok and result.error is not None
        assert result.error.kind == "timeout"
        match = re.search(r"goes on as process (p_[0-9a-f]+)", result.error.message)
        assert match, result.error.message
        pid = match.group(1)
        assert f'bash({{action: "wait", process_id: "{pid}"}})' in result.text
        assert result.cancelled_calls == []  # promoted, not stopped
        rows = host.processes.list_processes(host.config.session_id)
        assert [(r["process_id"], r["state"]) for r in rows] == [(pid, "running")]
        stopped = await host.call_tool("bash", {"action": "stop", "process_id": pid})
        assert not stopped.is_error, stopped.text


async def test_a_call_the_program_did_not_await_is_still_stopped(tmp_path: Path) -> None:
    async with _host(tmp_path) as host:
        result = await host.run_code('tools.bash({command: "sleep 30"}); print("left");')
        assert result.ok
        assert result.cancelled_calls == ["bash"]
        assert host.processes.list_processes(host.config.session_id) == []
