"""OpenAI tool definitions and tool results (Chat Completions and Responses), no dependency.

Example:
    ```python
    tools = HostTools(host)
    reply = client.chat.completions.create(model=..., messages=messages, tools=chat_tools(tools))
    message = reply.choices[0].message
    messages.append(message)
    messages += await chat_tool_messages(tools, message.tool_calls or [])
    ```

The calls of one reply run concurrently (a model asks for several at once); the results keep
the order of the calls. Items and calls may be dicts or the ``openai`` SDK's objects.

Images (``image()`` in a program, or a mounted server's tool that returned one): a Responses
``function_call_output`` then has a list output, ``input_text`` and an ``input_image`` (data
URL) each. A Chat Completions tool message takes text only, so the images come in one ``user``
message after the tool messages, its text naming the call each came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypedDict

from codemode.adapters._fields import field
from codemode.adapters._host_tools import HostTools, ToolOutput, data_url

__all__ = ["chat_tool_messages", "chat_tools", "response_outputs", "response_tools"]


class ChatFunction(TypedDict):
    """A Chat Completions function definition (``parameters``: a JSON Schema, as the SDK types it)."""

    name: str
    description: str
    parameters: dict[str, object]


class ChatTool(TypedDict):
    """One entry of a Chat Completions request's ``tools``."""

    type: Literal["function"]
    function: ChatFunction


class ResponseTool(TypedDict):
    """One entry of a Responses request's ``tools``."""

    type: Literal["function"]
    name: str
    description: str
    parameters: dict[str, object]
    strict: bool


class ChatToolMessage(TypedDict):
    """A ``tool`` message: one call's text."""

    role: Literal["tool"]
    tool_call_id: Any  # the call's id, as the reply gave it
    content: str


class ChatTextPart(TypedDict):
    """A text part of a ``user`` message."""

    type: Literal["text"]
    text: str


class ChatImageUrl(TypedDict):
    """An image's data URL."""

    url: str


class ChatImagePart(TypedDict):
    """An image part of a ``user`` message."""

    type: Literal["image_url"]
    image_url: ChatImageUrl


class ChatUserMessage(TypedDict):
    """The ``user`` message that carries the calls' images."""

    role: Literal["user"]
    content: list[ChatTextPart | ChatImagePart]


class InputText(TypedDict):
    """An ``input_text`` item of a ``function_call_output``."""

    type: Literal["input_text"]
    text: str


class InputImage(TypedDict):
    """An ``input_image`` item of a ``function_call_output`` (a data URL)."""

    type: Literal["input_image"]
    image_url: str


class FunctionCallOutput(TypedDict):
    """A ``function_call_output`` input item: one call's text, or its text and images."""

    type: Literal["function_call_output"]
    call_id: Any  # the call's id, as the response gave it
    output: str | list[InputText | InputImage]


def chat_tools(tools: HostTools) -> list[ChatTool]:
    """The ``tools`` parameter of a Chat Completions request."""
    return [
        {
            "type": "function",
            "function": {"name": s.name, "description": s.description, "parameters": s.input_schema},
        }
        for s in tools.specs()
    ]


def response_tools(tools: HostTools) -> list[ResponseTool]:
    """The ``tools`` parameter of a Responses request."""
    return [
        {
            "type": "function",
            "name": s.name,
            "description": s.description,
            "parameters": s.input_schema,
            "strict": False,
        }
        for s in tools.specs()
    ]


async def chat_tool_messages(
    tools: HostTools, tool_calls: Sequence[Any]
) -> list[ChatToolMessage | ChatUserMessage]:
    """One ``{"role": "tool", "tool_call_id", "content"}`` message per call of an assistant
    message's ``tool_calls``, to append after it; then one ``user`` message holding the calls'
    images, if any showed some."""
    calls = [
        (field(c, "id"), field(field(c, "function"), "name"), field(field(c, "function"), "arguments"))
        for c in tool_calls
    ]
    outputs = await tools.call_all([(str(name), args) for _, name, args in calls])
    messages: list[ChatToolMessage | ChatUserMessage] = [
        {"role": "tool", "tool_call_id": ident, "content": out.text}
        for (ident, _, _), out in zip(calls, outputs, strict=True)
    ]
    parts: list[ChatTextPart | ChatImagePart] = []
    for (ident, _, _), out in zip(calls, outputs, strict=True):
        if out.images:
            parts.append({"type": "text", "text": f"images from tool call {ident}:"})
            parts += [{"type": "image_url", "image_url": {"url": data_url(i)}} for i in out.images]
    if parts:
        messages.append({"role": "user", "content": parts})
    return messages


async def response_outputs(tools: HostTools, output: Sequence[Any]) -> list[FunctionCallOutput]:
    """One ``function_call_output`` input item per ``function_call`` item of a response's
    ``output``, for the next request's ``input``."""
    calls = [item for item in output if field(item, "type") == "function_call"]
    outputs = await tools.call_all([(str(field(c, "name")), field(c, "arguments")) for c in calls])
    return [
        {"type": "function_call_output", "call_id": field(c, "call_id"), "output": _output(out)}
        for c, out in zip(calls, outputs, strict=True)
    ]


def _output(out: ToolOutput) -> str | list[InputText | InputImage]:
    if not out.images:
        return out.text
    items: list[InputText | InputImage] = [{"type": "input_text", "text": out.text}] if out.text else []
    return items + [{"type": "input_image", "image_url": data_url(i)} for i in out.images]
