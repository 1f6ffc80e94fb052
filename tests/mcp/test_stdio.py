"""The MCP server, through a real MCP client over stdio (a `codemode mcp` subprocess)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import mcp.types as types
import psutil
import pydantic
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import codemode
from codemode.budget import TokenCounter
from codemode.mcp._server import _fit_structured, _output_schema
from codemode.tools.bash._tool import bash_tool

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _params(tmp_path: Path, *options: str) -> StdioServerParameters:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    env = dict(os.environ)
    env["CODEMODE_HOME"] = str(tmp_path / "state")
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "codemode", "mcp", "--workspace", str(workspace), "--session", "mcp-test", *options],
        env=env,
    )


async def test_lists_run_code_and_tools_and_runs_a_program(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with stdio_client(_params(tmp_path)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            names = {t.name for t in listed.tools}
            assert {"run_code", "bash", "read_file", "edit_file", "write_file", "read_archive"} <= names
            run_code = next(t for t in listed.tools if t.name == "run_code")
            assert run_code.description is not None and "tools.read_file" in run_code.description

            result = await session.call_tool(
                "run_code",
                {
                    "code": 'const f = await tools.read_file({path: "notes.txt"}); print(f.content.split("\\n")[1])'
                },
            )
            assert isinstance(result, types.CallToolResult)
            assert not result.is_error
            text = result.content[0]
            assert isinstance(text, types.TextContent) and text.text.strip() == "beta"

            failed = await session.call_tool("run_code", {"code": "throw new TypeError('nope')"})
            assert isinstance(failed, types.CallToolResult) and failed.is_error
            first = failed.content[0]
            assert isinstance(first, types.TextContent) and "TypeError: nope" in first.text

            direct = await session.call_tool("bash", {"command": "echo direct"})
            assert isinstance(direct, types.CallToolResult) and not direct.is_error
            assert isinstance(direct.structured_content, dict)
            assert direct.structured_content["exit_code"] == 0

            unknown = await session.call_tool("no_such_tool", {})
            assert isinstance(unknown, types.CallToolResult) and unknown.is_error
            message = unknown.content[0]
            assert isinstance(message, types.TextContent) and "searchTools" in message.text


async def test_typed_results_annotations_version_and_budgeted_structured_content(tmp_path: Path) -> None:
    params = _params(tmp_path, "--output-schemas", "on")
    words = " ".join(f"w{i}x{i * 7}" for i in range(12))
    (tmp_path / "ws" / "big.txt").write_text("".join(f"{n} {words}\n" for n in range(2000)))
    with anyio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.version == codemode.__version__

            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert all(t.title for t in listed.values())
            run_code = listed["run_code"]
            assert run_code.output_schema is not None
            assert set(run_code.output_schema["required"]) >= {"text", "truncated", "refs", "error", "usage"}
            read_file, write_file = listed["read_file"], listed["write_file"]
            assert read_file.title == "Read file" and read_file.annotations is not None
            assert read_file.annotations.read_only_hint is True
            assert write_file.annotations is not None and write_file.annotations.destructive_hint is True
            assert write_file.annotations.read_only_hint is False
            assert read_file.output_schema is not None and "content" in read_file.output_schema["properties"]

            # run_code: the structured content carries what the text shows (the SDK client
            # validates it against the output schema).
            ran = await session.call_tool("run_code", {"code": 'print("x".repeat(200000))'})
            assert not ran.is_error and isinstance(ran.structured_content, dict)
            first = ran.content[0]
            assert isinstance(first, types.TextContent)
            output = ran.structured_content
            assert output["text"] == first.text and output["truncated"] is True and output["refs"]
            assert output["ok"] is True and output["error"] is None and output["usage"]["output_tokens"] > 0
            failed = await session.call_tool("run_code", {"code": "null.x"})
            assert failed.is_error and isinstance(failed.structured_content, dict)
            assert failed.structured_content["error"]["kind"] == "uncaught"
            assert "TypeError" in failed.structured_content["text"]

            # A direct call whose structured content is over the token budget: still there (the
            # output schema promises it), its long string cut like the text.
            page = await session.call_tool("read_file", {"path": "big.txt"})
            assert not page.is_error and isinstance(page.structured_content, dict)
            content = page.structured_content["content"]
            assert "characters cut to fit the output budget; full text: read_archive" in content
            assert content.startswith("0 w0x0") and content.endswith(f"1999 {words}\n")
            assert page.structured_content["end_line"] == 2000  # the rest is whole
            small = await session.call_tool("read_file", {"path": "notes.txt"})
            assert (
                small.structured_content is not None
                and small.structured_content["content"] == "alpha\nbeta\n"
            )


def test_structured_content_is_gated_by_tokens_not_bytes() -> None:
    counter = TokenCounter()
    value = {"text": "word " * 3000}  # 15,000 bytes, about 3,000 tokens
    if counter.exact:  # (offline, tokens are counted as bytes: never fewer)
        assert _fit_structured(value, 5000, counter, "", cut=False) is value
    assert _fit_structured(value, 15_100, counter, "", cut=False) is value
    assert _fit_structured(value, 1000, counter, "", cut=False) is None
    cut = _fit_structured(value, 1000, counter, "", cut=True)
    assert counter.count(json.dumps(cut)) <= 1000
    assert cut["text"].startswith("word word") and "characters cut to fit the output budget" in cut["text"]
    assert value == {"text": "word " * 3000}  # the original is untouched


def test_output_schemas_are_objects_for_mcp() -> None:
    from codemode import make_tool

    def numbers() -> list[int]:
        return []

    def text() -> str:
        return ""

    schema, wrapped = _output_schema(make_tool(numbers))
    assert wrapped and schema == {
        "type": "object",
        "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
        "required": ["result"],
    }
    assert _output_schema(make_tool(text)) == (None, False)

    bash = bash_tool(lambda args: None, None)  # a union of one object per action
    schema, wrapped = _output_schema(bash)
    assert not wrapped and schema is not None and schema["type"] == "object" and len(schema["anyOf"]) == 8
    node = make_tool(lambda: None, name="tree", result_model=Node)  # a recursive model: a $ref at the root
    schema, wrapped = _output_schema(node)
    assert (
        not wrapped
        and schema is not None
        and schema["type"] == "object"
        and "children" in schema["properties"]
    )


class Node(pydantic.BaseModel):
    name: str
    children: list[Node] = []


async def test_typed_bash_results_pass_the_sdk_clients_output_check(tmp_path: Path) -> None:
    """bash declared with its result models (`bash_tool`), served in-process to the SDK client,
    which checks every structured result against the listed output schema."""
    from mcp import Client

    from codemode import Extension, Host
    from codemode.mcp import create_server

    (tmp_path / "ws").mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", handoff_seconds=None) as host:
        handler = host.registry.get("bash").handler  # type: ignore[union-attr]
        host.disable_extension("bash")
        host.add_extension(Extension("typed_bash", [bash_tool(handler, None)]))
        with anyio.fail_after(60):
            async with Client(create_server(host, output_schemas=True)) as client:
                listed = {t.name: t for t in (await client.list_tools()).tools}
                assert listed["bash"].output_schema is not None and listed["bash"].title == "Bash"
                assert listed["bash"].annotations is not None and listed["bash"].annotations.destructive_hint
                ran = await client.call_tool("bash", {"command": "echo typed"})
                assert not ran.is_error and ran.structured_content is not None
                assert ran.structured_content["stdout"]["excerpt"] == "typed\n"
                started = await client.call_tool("bash", {"command": "sleep 30", "run_in_background": True})
                assert started.structured_content is not None
                process_id = started.structured_content["process_id"]
                listing = await client.call_tool("bash", {"action": "list"})
                assert listing.structured_content is not None
                assert [p["process_id"] for p in listing.structured_content["processes"]] == [process_id]
                stopped = await client.call_tool("bash", {"action": "stop", "process_id": process_id})
                assert (
                    stopped.structured_content is not None
                    and stopped.structured_content["state"] == "stopped"
                )


def test_a_union_input_schema_is_published_as_one_object() -> None:
    # Several model APIs refuse oneOf/anyOf at the top of a tool's input schema.
    from codemode.mcp import flat_input_schema
    from codemode.tools.bash._tool import BashArgs

    schema = BashArgs.model_json_schema()
    assert "oneOf" in schema or "anyOf" in schema
    flat = flat_input_schema(schema)
    assert flat["type"] == "object" and "oneOf" not in flat and "anyOf" not in flat
    assert flat["properties"]["action"]["enum"] == ["run", "read", "write", "stop", "list", "update", "wait"]
    assert {"command", "process_id", "input", "wait_ms", "completion_mode"} <= set(flat["properties"])
    assert "required" not in flat  # nothing every action needs
    assert flat["description"].startswith("Fields by action: run: command, argv,")
    assert "; read: process_id" in flat["description"] and "; list: no other fields" in flat["description"]
    assert set(flat["$defs"]) == {"UntilPattern"}  # what a property refers to, not the branches
    plain = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert flat_input_schema(plain) is plain


async def test_a_client_disconnecting_stops_the_sessions_processes(tmp_path: Path) -> None:
    from tests.host_support import alive
    from tests.mcp.http_support import wait_until_gone

    with anyio.fail_after(60):
        async with stdio_client(_params(tmp_path)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            mine = await session.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
            kept = await session.call_tool(
                "bash", {"command": "sleep 300", "run_in_background": True, "lifecycle": "managed"}
            )
            assert mine.structured_content is not None and kept.structured_content is not None
            pid, managed_pid = mine.structured_content["pid"], kept.structured_content["pid"]
            assert alive(pid) and alive(managed_pid)
        assert await wait_until_gone(pid)  # lifecycle=session: ends with the client
        assert alive(managed_pid)  # lifecycle=managed: lives on until stopped
        psutil.Process(managed_pid).kill()


async def test_a_start_up_problem_is_an_error_result_not_a_closed_connection(tmp_path: Path) -> None:
    params = _params(tmp_path)
    params.args += ["--state-dir", str(tmp_path / "ws" / "state")]  # inside the workspace: refused
    with anyio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            assert [t.name for t in listed.tools] == ["run_code"]
            assert (
                listed.tools[0].description is not None and "could not start" in listed.tools[0].description
            )
            for _ in range(2):
                failed = await session.call_tool("run_code", {"code": "print(1)"})
                assert failed.is_error
                text = failed.content[0]
                assert isinstance(text, types.TextContent)
                assert "codemode could not start" in text.text and "state directory" in text.text


async def test_nested_calls_are_approved_by_the_clients_user_through_elicitation(tmp_path: Path) -> None:
    asked: list[types.ElicitRequestParams] = []

    async def answer(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        assert isinstance(params, types.ElicitRequestFormParams)  # codemode asks with a form
        choices: dict[str, str | int | float | bool | list[str] | None] = {
            key: ("allow" if "a.txt" in prop["title"] else "deny")
            for key, prop in params.requested_schema["properties"].items()
        }
        return types.ElicitResult(action="accept", content=choices)

    workspace = tmp_path / "ws"
    program = (
        "const r = await Promise.allSettled([tools.write_file({path: 'a.txt', content: 'a'}),"
        " tools.write_file({path: 'b.txt', content: 'b'})]);"
        "print(r.map(x => x.status === 'fulfilled' ? 'ok' : x.reason.code).join(' '));"
    )
    with anyio.fail_after(60):
        params = _params(tmp_path)
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, elicitation_callback=answer) as session,
        ):
            await session.initialize()
            nested = await session.call_tool("run_code", {"code": program})
            direct = await session.call_tool("write_file", {"path": "c.txt", "content": "c"})
    (question,) = asked  # one batch, one question with a choice per call
    assert isinstance(question, types.ElicitRequestFormParams)
    assert "write_file" in question.message and len(question.requested_schema["properties"]) == 2
    text = nested.content[0]
    assert isinstance(text, types.TextContent) and text.text.strip() == "ok denied", nested
    assert (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()
    assert not direct.is_error and (workspace / "c.txt").read_text() == "c"  # the client approved that call
    assert len(asked) == 1


async def test_a_client_without_elicitation_gets_the_hosts_default(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with stdio_client(_params(tmp_path)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(
                "run_code", {"code": "await tools.write_file({path: 'd.txt', content: 'd'}); print('ok')"}
            )
    assert not result.is_error and (tmp_path / "ws" / "d.txt").exists()
