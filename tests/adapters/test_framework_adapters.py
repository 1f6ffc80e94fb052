"""The pydantic-ai and LangChain adapters, driven the way each framework calls tools, with a
scripted model (pydantic-ai's FunctionModel; LangChain's fake chat model)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from codemode.adapters import HostTools
from tests.adapters import adapters_support

pytestmark = pytest.mark.anyio

_COUNT = adapters_support.COUNT


async def test_pydantic_ai_agent_runs_run_code_through_the_toolset(host_tools: HostTools) -> None:
    pytest.importorskip(
        "pydantic_ai", reason="pydantic-ai is not installed (pip install 'codemode[pydantic-ai]')"
    )
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from codemode.adapters.pydantic_ai import codemode_toolset

    seen: list[Any] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tools = {t.name: t for t in info.function_tools}
        assert "tools.read_file" in (tools["run_code"].description or "")
        assert tools["run_code"].parameters_json_schema["required"] == ["code"]
        assert {"bash", "read_file"} <= set(tools)
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        seen.append(returns)
        if not returns:
            return ModelResponse(
                parts=[
                    ToolCallPart("run_code", {"code": _COUNT}, tool_call_id="t1"),
                    ToolCallPart("run_code", {"code": "null.x"}, tool_call_id="t2"),
                ]
            )
        return ModelResponse(parts=[TextPart("notes.txt has 3 lines")])

    agent = Agent(FunctionModel(model), toolsets=[codemode_toolset(host_tools)])
    result = await agent.run("How many lines in notes.txt?")
    assert result.output == "notes.txt has 3 lines"
    ok, failed = sorted(seen[-1], key=lambda p: p.tool_call_id)
    assert ok.content.strip() == "3 lines"
    # A failed program reaches the model as a failed tool result carrying codemode's text.
    assert "TypeError" in failed.model_response_str()
    assert failed.outcome == "failed"


async def test_langchain_tools_answer_tool_calls_with_tool_messages(host_tools: HostTools) -> None:
    pytest.importorskip(
        "langchain_core", reason="langchain-core is not installed (pip install 'codemode[langchain]')"
    )
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from codemode.adapters.langchain import codemode_tools

    tools = codemode_tools(host_tools)
    by_name = {t.name: t for t in tools}
    bound = convert_to_openai_tool(by_name["run_code"])  # what bind_tools sends a model
    assert bound["function"]["parameters"]["required"] == ["code"]
    script = iter(
        [
            AIMessage(
                content="",
                tool_calls=[
                    {"name": "run_code", "args": {"code": _COUNT}, "id": "l1"},
                    {"name": "read_file", "args": {"path": "missing.txt"}, "id": "l2"},
                ],
            ),
            AIMessage(content="notes.txt has 3 lines"),
        ]
    )
    model = GenericFakeChatModel(messages=script)
    messages: list[Any] = [HumanMessage("How many lines in notes.txt?")]
    while True:  # what an agent loop (or LangGraph's ToolNode) does with tool calls
        reply = await model.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append(await by_name[call["name"]].ainvoke(call))
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    assert results["l1"].content.strip() == "3 lines" and results["l1"].status == "success"
    assert results["l2"].status == "error" and "missing.txt" in str(results["l2"].content)
    assert messages[-1].content == "notes.txt has 3 lines"


# A GIF89a's header, 3x2 pixels: what image() checks and sizes.
_GIF = b"GIF89a\x03\x00\x02\x00\x00\x00\x00;"
_SHOW = f"image('{base64.b64encode(_GIF).decode()}', 'image/gif'); print('a chart')"


async def test_pydantic_ai_gets_the_images_as_binary_content(host_tools: HostTools) -> None:
    pytest.importorskip(
        "pydantic_ai", reason="pydantic-ai is not installed (pip install 'codemode[pydantic-ai]')"
    )
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        BinaryContent,
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from codemode.adapters.pydantic_ai import codemode_toolset

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": _SHOW}, tool_call_id="t1")])
        return ModelResponse(parts=[TextPart("seen")])

    agent = Agent(FunctionModel(model), toolsets=[codemode_toolset(host_tools)])
    result = await agent.run("Draw the chart")
    parts = [p for m in result.all_messages() if isinstance(m, ModelRequest) for p in m.parts]
    (returned,) = [p for p in parts if isinstance(p, ToolReturnPart)]
    assert returned.content == "a chart\n"
    shown = [
        c
        for p in parts
        if isinstance(p, UserPromptPart) and not isinstance(p.content, str)
        for c in p.content
        if isinstance(c, BinaryContent)
    ]
    assert [(c.media_type, c.data) for c in shown] == [("image/gif", _GIF)]


async def test_langchain_tool_message_holds_an_image_block(host_tools: HostTools) -> None:
    pytest.importorskip(
        "langchain_core", reason="langchain-core is not installed (pip install 'codemode[langchain]')"
    )
    from langchain_core.messages import ToolMessage

    from codemode.adapters.langchain import codemode_tools

    (run_code,) = [t for t in codemode_tools(host_tools) if t.name == "run_code"]
    message = await run_code.ainvoke(
        {"name": "run_code", "args": {"code": _SHOW}, "id": "l1", "type": "tool_call"}
    )
    assert isinstance(message, ToolMessage) and message.status == "success"
    assert message.content == [
        {"type": "text", "text": "a chart\n"},
        {"type": "image", "base64": base64.b64encode(_GIF).decode(), "mime_type": "image/gif"},
    ]
