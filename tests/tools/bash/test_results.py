"""The bash tool's result models describe what each action really returns (real commands)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest

from codemode.tools import typescript_signature
from codemode.tools._model import ToolResult
from codemode.tools.bash import ProcessManager
from codemode.tools.bash._results import (
    BashList,
    BashRead,
    BashRun,
    BashStarted,
    BashStopped,
    BashUpdated,
    BashWritten,
)
from codemode.tools.bash._tool import bash_tool

from .conftest import Caller
from .test_manager import _read_until, _start, _wait_exited

pytestmark = pytest.mark.anyio


def _fits(model: type[pydantic.BaseModel], result: ToolResult, tool: Any) -> dict[str, Any]:
    """The result's data validates against its action's model and the tool's declared union."""
    data: dict[str, Any] = result.structured_content
    model.model_validate(data, strict=True)
    assert tool.check_result(result) is None, result.structured_content
    return data


async def test_every_action_returns_what_its_model_says(
    bash: Caller, manager: ProcessManager, workspace: Path
) -> None:
    tool = bash_tool(manager.extension().tools[0].handler, None)
    (workspace / "test_ok.py").write_text("def test_ok():\n    pass\n")
    ran = _fits(BashRun, await bash(command="echo out; echo err >&2"), tool)
    assert ran["exit_code"] == 0 and ran["stdout"]["excerpt"] == "out\n"
    failed = _fits(BashRun, await bash(command="exit 3"), tool)
    assert failed["exit_code"] == 3
    long = _fits(BashRun, await bash(command="seq 1 200000"), tool)
    assert long["stdout"]["truncated"] and long["log"]["ref"]
    killed = _fits(BashRun, await bash(command="kill -9 $$"), tool)
    assert killed["signal"] == "SIGKILL"
    timed_out = _fits(BashRun, await bash(command="sleep 5", timeout_seconds=1), tool)
    assert timed_out["timed_out"] is True
    verified = _fits(BashRun, await bash(command="python -m pytest -q test_ok.py -p no:cacheprovider"), tool)
    assert verified["classification"] == {"kind": "test", "tool": "pytest"}
    assert verified["verification"] is not None

    pid = await _start(bash, "echo ready; read line; echo got $line")
    await _read_until(bash, pid, "ready")
    _fits(BashWritten, await bash(action="write", process_id=pid, input="x\n"), tool)
    await _wait_exited(bash, pid)
    _fits(BashRead, await bash(action="read", process_id=pid), tool)
    listed = _fits(BashList, await bash(action="list"), tool)
    assert [p["process_id"] for p in listed["processes"]] == [pid]
    _fits(BashUpdated, await bash(action="update", process_id=pid, completion_mode="detached"), tool)
    _fits(BashStopped, await bash(action="stop", process_id=pid), tool)

    background = await bash(command="sleep 30", run_in_background=True)
    _fits(BashStarted, background, tool)
    _fits(
        BashStopped, await bash(action="stop", process_id=background.structured_content["process_id"]), tool
    )


async def test_a_promoted_run_fits_the_run_model(archive: Any, bash: Caller) -> None:
    manager = ProcessManager(archive, handoff_seconds=0.2)
    try:
        caller = Caller(manager, bash.ctx)
        tool = bash_tool(manager.extension().tools[0].handler, 0.2)
        promoted = _fits(BashRun, await caller(command="sleep 30"), tool)
        assert promoted["exit_code"] == -1 and promoted["promoted_process_id"]
        _fits(BashStopped, await caller(action="stop", process_id=promoted["promoted_process_id"]), tool)
    finally:
        await manager.aclose()


def test_bash_declares_its_result_type_and_annotations() -> None:
    tool = bash_tool(lambda args: None, None)
    assert tool.title == "Bash" and tool.destructive is True and not tool.read_only
    assert tool.output_schema is not None and "anyOf" in tool.output_schema
    signature = typescript_signature(tool)
    assert "): Promise<{ exit_code: number | null" in signature
    assert "{ processes: ({ process_id: string;" in signature
    assert signature.endswith(
        '{ message: string; process_id: string; completion_mode: "resume" | "detached" }>'
    )
