"""``run_code`` plus the host's direct tools as plain specs and one call: what every adapter wraps.

Which direct tools, under which names: the surface (`codemode._surface`), as ``codemode mcp``
lists them; every name matches ``^[a-zA-Z0-9_-]{1,64}$``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from codemode._ids import check_id
from codemode._json import JsonObject
from codemode._published import RUN_CODE_SCHEMA, flat_input_schema
from codemode._results import RunImage, error_content
from codemode._surface import SurfaceName, check_surface, listed_tools
from codemode.errors import ErrorCode, UserError
from codemode.host import Host

__all__ = ["HostTools", "ToolOutput", "ToolSpec", "data_url"]


@dataclass(frozen=True)
class ToolSpec:
    """One tool as a model API is told about it.

    Attributes:
        name: The tool's listed name (``run_code``, or a registered tool's, made valid for model
            APIs: ``everything.echo`` is ``everything__echo``).
        description: What it does (``run_code``'s: the JS API plus the tools' signatures).
        input_schema: The JSON Schema of its arguments, one object at the top.
    """

    name: str
    description: str
    input_schema: JsonObject


@dataclass(frozen=True)
class ToolOutput:
    """What one call gave, for the model.

    Attributes:
        text: The text the model reads (cut to the token budget; a cut names its archive ref).
        is_error: Whether the call failed (the text says how and what to do).
        structured: The structured result (``run_code``: its `RunResult` as JSON, each image's
            type and tokens without its data), if any.
        images: The images the model sees after the text: those a program showed
            (``image()``) or a mounted server's tool returned, within the budget. Each
            adapter gives them in its API's own form.
    """

    text: str
    is_error: bool
    structured: Any = None
    images: list[RunImage] = field(default_factory=list)


def data_url(image: RunImage) -> str:
    """The image as a ``data:`` URL (what OpenAI's image parts take)."""
    return f"data:{image.mime_type};base64,{image.data}"


class HostTools:
    """``run_code`` and, optionally, each registered tool for direct calls, over an open `Host`.

    Args:
        host: The open host.
        session_id: The codemode session the calls run in (default: the host's).
        surface: Which tools are offered by themselves besides ``run_code``: ``code`` (none),
            ``default`` (bash, read_file, edit_file, write_file, read_archive) or ``all`` (every
            registered tool); every tool stays callable from programs.
        direct_tools: False offers ``run_code`` only, whatever ``surface`` says.

    Raises:
        UserError: ``session_id`` is not a valid id, or ``surface`` is not code, default, all.
    """

    def __init__(
        self,
        host: Host,
        *,
        session_id: str | None = None,
        surface: SurfaceName = "default",
        direct_tools: bool = True,
    ) -> None:
        self.host = host
        self.session_id = check_id(session_id, "session_id") if session_id is not None else None
        self.surface: SurfaceName = check_surface(surface) if direct_tools else "code"
        self.direct_tools = self.surface != "code"

    def specs(self) -> list[ToolSpec]:
        """``run_code`` first, then the surface's direct tools, as the model sees them."""
        specs = [ToolSpec("run_code", self.host.run_code_description(), RUN_CODE_SCHEMA)]
        for listed in listed_tools(self.host.registry, self.surface):
            specs.append(
                ToolSpec(listed.name, listed.tool.description, flat_input_schema(listed.tool.input_schema))
            )
        return specs

    async def call(self, name: str, arguments: Mapping[str, Any] | str | None) -> ToolOutput:
        """Run one call the model asked for; every failure it can cause is an error output.

        Args:
            name: The tool's name.
            arguments: The arguments: a mapping, or the JSON text a model API sends.

        Raises:
            UserError: The host is not open.
        """
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return ToolOutput(
                    f"the arguments of {name} are not valid JSON ({exc}); send a JSON object", True
                )
        args = dict(arguments) if isinstance(arguments, Mapping) else {} if arguments is None else None
        if args is None:
            return ToolOutput(
                f"the arguments of {name} must be a JSON object, not {type(arguments).__name__}", True
            )
        if name == "run_code":
            return await self._run_code(args)
        real = next(
            (item.tool.name for item in listed_tools(self.host.registry, self.surface) if item.name == name),
            None,
        )
        if real is None and self.host.registry.get(name) is not None:
            return ToolOutput(
                f"{name} is offered inside run_code only: call it as tools.{name}(args) there",
                True,
                error_content(ErrorCode.UNKNOWN_TOOL, {"name": name}),
            )
        called = await self.host.call_tool(real or name, args, session_id=self.session_id)
        return ToolOutput(called.text, called.is_error, called.structured_content, called.images)

    async def _run_code(self, args: Mapping[str, object]) -> ToolOutput:
        code, given_id = args.get("code"), args.get("call_id")
        if not isinstance(code, str):
            return ToolOutput('run_code needs {"code": "<JavaScript program>"}', True)
        call_id = None
        if given_id is not None:
            try:
                call_id = check_id(given_id, "call_id")
            except UserError as exc:
                return ToolOutput(f"run_code: {exc}; nothing ran", True)
        result = await self.host.run_code(code, session_id=self.session_id, call_id=call_id)
        structured = result.model_dump(mode="json", exclude={"images": {"__all__": {"data"}}})
        return ToolOutput(result.text, not result.ok, structured, result.images)

    async def call_all(self, calls: Sequence[tuple[str, Mapping[str, Any] | str | None]]) -> list[ToolOutput]:
        """Run the calls of one model reply concurrently; the outputs keep their order.

        Raises:
            UserError: The host is not open.
        """
        outputs: list[ToolOutput] = [ToolOutput("", True)] * len(calls)

        async def one(index: int, name: str, args: Mapping[str, Any] | str | None) -> None:
            outputs[index] = await self.call(name, args)

        async with anyio.create_task_group() as group:
            for index, (name, args) in enumerate(calls):
                group.start_soon(one, index, name, args)
        return outputs
