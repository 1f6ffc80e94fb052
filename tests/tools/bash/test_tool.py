"""The bash tool's arguments: one model per action (schema, signature, per-action checks)."""

from __future__ import annotations

from typing import Any

import pytest

from codemode.errors import ToolError
from codemode.tools import typescript_signature
from codemode.tools.bash import ProcessManager
from codemode.tools.bash._tool import (
    BashArgs,
    BashListArgs,
    BashReadArgs,
    BashRunArgs,
    BashStopArgs,
    BashUpdateArgs,
    BashWriteArgs,
    bash_tool,
)

from .conftest import Caller

pytestmark = pytest.mark.anyio


def _option(schema: dict[str, Any], action: str) -> dict[str, Any]:
    """The object of the bash schema's union that takes ``action``."""
    for option in schema["oneOf"]:
        target = schema["$defs"][option["$ref"].rsplit("/", 1)[-1]]
        if target["properties"]["action"]["const"] == action:
            return dict(target)
    raise AssertionError(f"no option for action {action!r}")


async def test_schema_is_one_plain_bounded_object_per_action(manager: ProcessManager) -> None:
    tool = manager.extension().tools[0]
    schema = tool.input_schema
    assert schema["type"] == "object" and len(schema["oneOf"]) == 7
    fields = {
        action: (
            sorted(_option(schema, action)["properties"]),
            sorted(_option(schema, action).get("required", [])),
        )
        for action in ("run", "read", "write", "stop", "list", "update", "wait")
    }
    assert fields == {
        "run": (
            sorted(
                [
                    "action",
                    "command",
                    "argv",
                    "timeout_seconds",
                    "cwd",
                    "run_in_background",
                    "completion_mode",
                    "lifecycle",
                    "purpose",
                    "scope",
                    "report_on",
                    "network",
                    "write_paths",
                    "sandbox",
                ]
            ),
            [],  # action is optional (run is the default); command or argv, checked by the model
        ),
        "read": (["action", "max_bytes", "offset_bytes", "process_id", "wait_ms"], ["action", "process_id"]),
        "write": (["action", "input", "process_id"], ["action", "input", "process_id"]),
        "stop": (["action", "process_id"], ["action", "process_id"]),
        "list": (["action"], ["action"]),
        "update": (["action", "completion_mode", "process_id"], ["action", "completion_mode", "process_id"]),
        "wait": (["action", "offset_bytes", "process_id", "timeout_ms", "until"], ["action", "process_id"]),
    }
    run = _option(schema, "run")["properties"]
    assert run["action"] == {"const": "run", "default": "run", "type": "string"}
    assert run["timeout_seconds"] == {
        **run["timeout_seconds"],
        "type": "integer",
        "minimum": 1,
        "maximum": 3600,
    }
    assert _option(schema, "read")["properties"]["wait_ms"]["maximum"] == 300_000
    assert "null" not in str(schema)
    assert all(schema["$defs"][name]["additionalProperties"] is False for name in schema["$defs"])
    assert "bash" in manager.extension().guidance


async def test_signature_says_which_fields_go_with_which_action(manager: ProcessManager) -> None:
    signature = typescript_signature(manager.extension().tools[0], with_result=False)
    # run takes command or argv (the model's validator says which is missing): both are optional fields
    assert signature.startswith('tools.bash(args?: { action?: "run"; command?: string /* ')
    assert "argv?: string[] /* program and arguments, no shell" in signature
    assert '} | { action: "read"; process_id: string /* from run. */; offset_bytes?: number' in signature
    assert (
        '} | { action: "write"; process_id: string; input: string /* text for its stdin. */ }'
        ' | { action: "stop"; process_id: string } | { action: "list" }'
        ' | { action: "update"; process_id: string; completion_mode: "resume" | "detached" }'
    ) in signature
    assert '| { action: "wait"; process_id: string' in signature
    assert 'until?: "exit" | { pattern: string' in signature
    assert 'default "run"' not in signature  # a const's default goes without saying


@pytest.mark.parametrize(
    ("args", "model", "expected"),
    [
        ({"command": "ls"}, BashRunArgs, {"command": "ls"}),
        (
            {"action": "run", "command": "ls", "timeout_seconds": 5, "cwd": "d", "run_in_background": True},
            BashRunArgs,
            {"command": "ls", "timeout_seconds": 5, "cwd": "d", "run_in_background": True},
        ),
        (
            {
                "command": "ls",
                "completion_mode": "detached",
                "lifecycle": "managed",
                "purpose": "p",
                "scope": "full",
            },
            BashRunArgs,
            {"completion_mode": "detached", "lifecycle": "managed", "purpose": "p", "scope": "full"},
        ),
        (
            {"action": "read", "process_id": "p1", "offset_bytes": 3, "max_bytes": 9, "wait_ms": 0},
            BashReadArgs,
            {"process_id": "p1", "offset_bytes": 3, "max_bytes": 9, "wait_ms": 0},
        ),
        ({"action": "write", "process_id": "p1", "input": ""}, BashWriteArgs, {"input": ""}),
        ({"action": "stop", "process_id": "p1"}, BashStopArgs, {"process_id": "p1"}),
        ({"action": "list"}, BashListArgs, {}),
        (
            {"action": "update", "process_id": "p1", "completion_mode": "resume"},
            BashUpdateArgs,
            {"completion_mode": "resume"},
        ),
    ],
)
def test_each_action_takes_its_own_fields(
    args: dict[str, Any], model: type, expected: dict[str, Any]
) -> None:
    parsed = bash_tool(lambda args: None, None).parse(args)
    assert isinstance(parsed, BashArgs) and type(parsed.root) is model
    assert {key: getattr(parsed.root, key) for key in expected} == expected
    assert type(model.model_validate(args)) is model  # each action's model on its own too


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"command": "ls", "process_id": "p1"},
            'bash action "run" does not take process_id (it takes argv, command, ',
        ),
        (
            {"action": "read", "process_id": "p1", "input": "x", "cwd": "."},
            'bash action "read" does not take cwd, input (it takes max_bytes, offset_bytes, process_id, wait_ms)',
        ),
        (
            {"action": "write", "process_id": "p1", "input": "x", "wait_ms": 1},
            'bash action "write" does not take wait_ms (it takes input, process_id)',
        ),
        (
            {"action": "stop", "process_id": "p1", "completion_mode": "resume"},
            'bash action "stop" does not take completion_mode (it takes process_id)',
        ),
        (
            {"action": "list", "process_id": "p1"},
            'bash action "list" does not take process_id (it takes nothing else)',
        ),
        (
            {"action": "update", "process_id": "p1", "completion_mode": "resume", "command": "ls"},
            'bash action "update" does not take command (it takes completion_mode, process_id)',
        ),
        ({"action": "read"}, 'bash action "read" needs process_id'),
        ({"action": "write", "process_id": "p1"}, 'bash action "write" needs input'),
        ({"action": "update"}, 'bash action "update" needs process_id, completion_mode'),
    ],
)
def test_each_action_refuses_the_fields_of_the_others(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError) as raised:
        bash_tool(lambda args: None, None).parse(args)
    assert raised.value.data["path"] == "$"
    assert raised.value.data["message"].startswith(message)
    assert "Expected: tools.bash(args?: " in raised.value.message


def test_problems_are_reported_at_their_own_path() -> None:
    tool = bash_tool(lambda args: None, None)
    for args, path, words in [
        ({"command": "ls", "timeout_seconds": 0}, "$.timeout_seconds", "greater than or equal to 1"),
        ({"action": "read", "process_id": "p1", "max_bytes": 0}, "$.max_bytes", "greater than or equal to 1"),
        (
            {"action": "update", "process_id": "p1", "completion_mode": "later"},
            "$.completion_mode",
            "'resume'",
        ),
        (
            {"action": "watch", "process_id": "p1"},
            "$.action",
            "'run', 'read', 'write', 'stop', 'list', 'update', 'wait'",
        ),
        ({"action": "wait", "process_id": "p1", "until": "ready"}, "$.until", "exit"),
        (
            {"action": "wait", "process_id": "p1", "timeout_ms": -1},
            "$.timeout_ms",
            "greater than or equal to 0",
        ),
        ({"command": ""}, "$.command", "at least 1 character"),
        ("ls", "$", "Input should be an object"),
    ]:
        with pytest.raises(ToolError) as raised:
            tool.parse(args)
        assert raised.value.data["path"].startswith(path), args
        assert words in raised.value.data["message"], args


def test_null_for_an_optional_field_means_absent() -> None:
    tool = bash_tool(lambda args: None, None)
    run = tool.parse({"action": None, "command": "ls", "cwd": None, "timeout_seconds": None})
    assert (
        isinstance(run, BashArgs)
        and isinstance(run.root, BashRunArgs)
        and run.root.cwd is None
        and run.root.timeout_seconds is None
    )
    read = tool.parse({"action": "read", "process_id": "p1", "wait_ms": None, "input": None})
    assert isinstance(read, BashArgs) and isinstance(read.root, BashReadArgs) and read.root.wait_ms is None
    with pytest.raises(ToolError, match='bash action "read" needs process_id'):
        tool.parse({"action": "read", "process_id": None})


async def test_command_without_action_runs(bash: Caller) -> None:
    result = await bash(command="echo hi")
    assert result.structured_content["exit_code"] == 0
    assert result.structured_content["stdout"]["excerpt"] == "hi\n"


async def test_missing_command(bash: Caller) -> None:
    with pytest.raises(
        ToolError, match=r"needs either command \(a shell string\) or argv \(a list, no shell\), not neither"
    ):
        await bash(action="run")
    with pytest.raises(ToolError, match="not both"):
        await bash(command="ls", argv=["ls"])
    with pytest.raises(ToolError, match=r"argv\[0\] \(the program\) is empty"):
        await bash(argv=[""])


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
