"""The OpenAI and Anthropic adapters, in the loop an agent runs, with a scripted model.

The scripted model checks what a real one would get (the tool definitions, the tool results
in the next request) and answers the way the APIs do: dicts here, attribute objects (as the
SDKs give) for OpenAI's second reply.
"""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

import pytest

from codemode.adapters import HostTools
from codemode.adapters import anthropic as anthropic_adapter
from codemode.adapters import openai as openai_adapter
from tests.adapters import adapters_support

pytestmark = pytest.mark.anyio

_COUNT = adapters_support.COUNT


async def test_openai_chat_completions_loop(host_tools: HostTools) -> None:
    tools = openai_adapter.chat_tools(host_tools)
    names = [t["function"]["name"] for t in tools]
    assert names[0] == "run_code" and {"bash", "read_file"} <= set(names)
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in tools)
    assert "tools.read_file" in tools[0]["function"]["description"]
    bash = tools[names.index("bash")]["function"]["parameters"]
    properties = bash["properties"]
    assert "oneOf" not in bash and "anyOf" not in bash  # one object
    assert isinstance(properties, dict) and "command" in properties

    def model(messages: list[Any], turn: int) -> Any:
        if turn == 0:  # two calls at once, arguments as JSON text (as the API sends them)
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "run_code", "arguments": json.dumps({"code": _COUNT})},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "echo hi"}'},
                    },
                    {
                        "id": "c3",
                        "type": "function",
                        "function": {"name": "run_code", "arguments": "{not json"},
                    },
                ],
            }
        results = {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}
        if turn == 1:
            assert results["c1"].strip() == "3 lines"
            assert "hi" in results["c2"]
            assert "not valid JSON" in results["c3"]
            call = SimpleNamespace(  # the SDK's object shape
                id="c4",
                type="function",
                function=SimpleNamespace(name="run_code", arguments='{"code": "null.x"}'),
            )
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        assert "TypeError" in results["c4"]
        return {"role": "assistant", "content": "notes.txt has 3 lines"}

    messages: list[Any] = [{"role": "user", "content": "How many lines in notes.txt?"}]
    for turn in range(5):
        reply = model(messages, turn)
        messages.append(reply)
        if not reply.get("tool_calls"):
            break
        messages += await openai_adapter.chat_tool_messages(host_tools, reply["tool_calls"])
    assert messages[-1]["content"] == "notes.txt has 3 lines" and turn == 2
    assert [m["tool_call_id"] for m in messages if m.get("role") == "tool"] == ["c1", "c2", "c3", "c4"]


async def test_openai_responses_loop(host_tools: HostTools) -> None:
    tools = openai_adapter.response_tools(host_tools)
    assert tools[0]["name"] == "run_code" and tools[0]["parameters"]["required"] == ["code"]
    output = [
        {"type": "reasoning", "id": "r1", "summary": []},
        {
            "type": "function_call",
            "call_id": "f1",
            "name": "run_code",
            "arguments": json.dumps({"code": _COUNT}),
        },
    ]
    items = await openai_adapter.response_outputs(host_tools, output)
    assert [(i["type"], i["call_id"]) for i in items] == [("function_call_output", "f1")]
    text = items[0]["output"]
    assert isinstance(text, str) and text.strip() == "3 lines"  # text only: no image items


async def test_anthropic_messages_loop(host_tools: HostTools) -> None:
    tools = anthropic_adapter.tools(host_tools)
    properties = tools[0]["input_schema"]["properties"]
    assert tools[0]["name"] == "run_code"
    assert isinstance(properties, dict) and properties["code"]["type"] == "string"

    def model(messages: list[Any], turn: int) -> dict[str, Any]:
        if turn == 0:
            return {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Counting."},
                    {"type": "tool_use", "id": "u1", "name": "run_code", "input": {"code": _COUNT}},
                    {
                        "type": "tool_use",
                        "id": "u2",
                        "name": "run_code",
                        "input": {"code": "throw new Error('boom')"},
                    },
                    {"type": "tool_use", "id": "u3", "name": "no_such_tool", "input": {}},
                ],
            }
        results = {b["tool_use_id"]: b for b in messages[-1]["content"]}
        assert results["u1"]["content"].strip() == "3 lines" and results["u1"]["is_error"] is False
        assert "Error: boom" in results["u2"]["content"] and results["u2"]["is_error"] is True
        assert results["u3"]["is_error"] is True and "searchTools" in results["u3"]["content"]
        return {"role": "assistant", "content": [{"type": "text", "text": "3 lines"}]}

    messages: list[Any] = [{"role": "user", "content": "How many lines in notes.txt?"}]
    for turn in range(5):
        reply = model(messages, turn)
        messages.append(reply)
        results = await anthropic_adapter.tool_results(host_tools, reply["content"])
        if not results:
            break
        messages.append({"role": "user", "content": results})
    assert messages[-1]["content"][0]["text"] == "3 lines" and turn == 1


async def test_run_code_only_and_a_session_of_its_own(host_tools: HostTools) -> None:
    only = HostTools(host_tools.host, session_id="agent-2", direct_tools=False)
    assert [s.name for s in only.specs()] == ["run_code"]
    refused = await only.call("bash", {"command": "echo x"})
    assert refused.is_error and "tools.bash(args)" in refused.text
    await only.call("run_code", {"code": 'await store.set("k", "two")'})
    mine = await host_tools.call("run_code", {"code": 'print(await store.get("k"))'})
    theirs = await only.call("run_code", {"code": 'print(await store.get("k"))'})
    assert (mine.text.strip(), theirs.text.strip()) == ("null", "two")
    assert theirs.structured is not None and theirs.structured["session_id"] == "agent-2"


# A GIF89a's header, 3x2 pixels: what image() checks and sizes.
_GIF = base64.b64encode(b"GIF89a\x03\x00\x02\x00\x00\x00\x00;").decode()
_SHOW = f"image('{_GIF}', 'image/gif'); print('a chart')"


async def test_run_code_images_are_anthropic_image_blocks(host_tools: HostTools) -> None:
    uses = [
        {"type": "tool_use", "id": "u1", "name": "run_code", "input": {"code": _SHOW}},
        {
            "type": "tool_use",
            "id": "u2",
            "name": "run_code",
            "input": {"code": f"image('{_GIF}', 'image/gif')"},
        },
        {"type": "tool_use", "id": "u3", "name": "run_code", "input": {"code": "print('no image')"}},
    ]
    shown, bare, plain = await anthropic_adapter.tool_results(host_tools, uses)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": _GIF}}
    assert shown["content"] == [{"type": "text", "text": "a chart\n"}, image]
    assert bare["content"] == [image]  # the API refuses an empty text block
    assert plain["content"] == "no image\n"


async def test_run_code_images_are_openai_input_images_and_a_chat_user_message(host_tools: HostTools) -> None:
    (item,) = await openai_adapter.response_outputs(
        host_tools,
        [
            {
                "type": "function_call",
                "call_id": "f1",
                "name": "run_code",
                "arguments": json.dumps({"code": _SHOW}),
            }
        ],
    )
    assert item["output"] == [
        {"type": "input_text", "text": "a chart\n"},
        {"type": "input_image", "image_url": f"data:image/gif;base64,{_GIF}"},
    ]
    calls = [
        {
            "id": c,
            "type": "function",
            "function": {"name": "run_code", "arguments": json.dumps({"code": code})},
        }
        for c, code in [("c1", "print(1)"), ("c2", _SHOW)]
    ]
    first, second, images = await openai_adapter.chat_tool_messages(host_tools, calls)
    assert first["role"] == "tool" and second["role"] == "tool"
    assert (first["tool_call_id"], second["tool_call_id"], second["content"]) == ("c1", "c2", "a chart\n")
    assert images == {
        "role": "user",
        "content": [
            {"type": "text", "text": "images from tool call c2:"},
            {"type": "image_url", "image_url": {"url": f"data:image/gif;base64,{_GIF}"}},
        ],
    }


async def test_the_structured_result_names_images_without_their_data(host_tools: HostTools) -> None:
    output = await host_tools.call("run_code", {"code": _SHOW})
    assert [i.data for i in output.images] == [_GIF]
    assert output.structured["images"] == [{"mime_type": "image/gif", "tokens": 1}]
