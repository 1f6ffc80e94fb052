"""The bash tool's arguments: schema shape and per-action checks."""

from __future__ import annotations

import pytest

from codemode.errors import ToolError
from codemode.tools._bash import ProcessManager

from .conftest import Caller

pytestmark = pytest.mark.anyio


async def test_schema_is_plain_and_bounded(manager: ProcessManager) -> None:
    tool = manager.extension().tools[0]
    schema = tool.input_schema
    props = schema["properties"]
    assert props["action"]["enum"] == ["run", "read", "write", "stop", "list", "update"]
    assert props["timeout_seconds"] == {
        **props["timeout_seconds"],
        "type": "integer",
        "minimum": 1,
        "maximum": 3600,
    }
    assert props["wait_ms"]["maximum"] == 300_000
    assert "null" not in str(schema)
    assert schema.get("additionalProperties") is False
    assert "bash" in manager.extension().guidance


async def test_missing_command(bash: Caller) -> None:
    with pytest.raises(ToolError, match="needs command"):
        await bash(action="run")


async def test_field_of_another_action(bash: Caller) -> None:
    with pytest.raises(ToolError, match="does not take wait_ms"):
        await bash(command="true", wait_ms=5)


async def test_unknown_field_rejected_by_schema(bash: Caller) -> None:
    with pytest.raises(ToolError, match=r"at \$\.shell: Extra inputs are not permitted"):
        await bash(command="true", shell="zsh")


async def test_list_takes_nothing(bash: Caller) -> None:
    result = await bash(action="list")
    assert result.text == "No background processes in this session."
    assert result.structured_content == {"processes": []}
