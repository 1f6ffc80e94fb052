"""The tool contract: what a tool is, what it gets, what it returns."""

from __future__ import annotations

import functools
import inspect
import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_type_hints

import jsonschema
import jsonschema_rs
import pydantic

from codemode.errors import UserError
from codemode.sandbox import SandboxPolicy

if TYPE_CHECKING:
    from codemode.archive import Archive


class TextContent(pydantic.BaseModel):
    """One block of text content (MCP-shaped)."""

    type: Literal["text"] = "text"
    text: str


class ToolResult(pydantic.BaseModel):
    """What a tool returns: MCP-shaped content plus optional structured data.

    ``structured_content`` is the producer data a Code Mode program receives; when it is
    ``None`` the program receives the text.
    """

    content: list[TextContent] = pydantic.Field(default_factory=list)
    structured_content: Any = None
    is_error: bool = False

    @property
    def text(self) -> str:
        """All text blocks joined by newlines."""
        return "\n".join(block.text for block in self.content)

    @classmethod
    def from_text(cls, text: str, structured: Any = None, *, is_error: bool = False) -> ToolResult:
        """Build a result from one text block and optional structured data."""
        # Plain construction: pydantic's model_construct is pure Python and twice as slow.
        return cls(content=[TextContent(text=text)], structured_content=structured, is_error=is_error)

    def producer_data(self) -> Any:
        """The value a program's ``await tools.x()`` resolves with."""
        return self.text if self.structured_content is None else self.structured_content


@dataclass(frozen=True)
class ToolContext:
    """What the host hands a tool handler that asks for it (a parameter typed ``ToolContext``).

    Attributes:
        session_id: The calling session; process ids and ``store`` are scoped to it.
        workspace: The workspace root (absolute, symlinks resolved: the Host resolves it);
            relative paths resolve against it.
        policy: The sandbox policy in force for this call.
        archive: The durable archive (logs, overflow text, records).
        call_id: Id of the surrounding ``run_code`` or direct call, when there is one.
    """

    session_id: str
    workspace: Path
    policy: SandboxPolicy
    archive: Archive
    call_id: str | None = None


Handler = Callable[..., Any]


@dataclass
class Tool:
    """A registered tool.

    Attributes:
        name: Identifier used as ``tools.<name>`` (letters, digits, ``_``).
        description: What it does, for the model.
        input_model: Pydantic model of the arguments; its JSON Schema is the contract.
        handler: ``(args, [ctx]) -> ToolResult | str | JSON``; sync handlers run in a worker
            thread.
        output_schema: Optional JSON Schema of ``structured_content``.
        extension: Name of the extension that registered it, if any.
        inline: A cheap, non-blocking sync handler that a program calls directly on its own
            JS thread, without the trip to the event loop (its time counts as the program's
            CPU time, and inline calls run one at a time).
    """

    name: str
    description: str
    input_model: type[pydantic.BaseModel]
    handler: Handler
    output_schema: dict[str, Any] | None = None
    extension: str | None = None
    context_param: str | None = None
    model_param: str | None = None
    is_async: bool = True
    inline: bool = False

    def bind(self, args: pydantic.BaseModel, ctx: ToolContext) -> dict[str, Any]:
        """Keyword arguments for the handler: the model (or its fields) and the context."""
        kwargs: dict[str, Any] = (
            {self.model_param: args} if self.model_param is not None else dict(args.__dict__)
        )
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        return kwargs

    @functools.cached_property
    def input_schema(self) -> dict[str, Any]:
        """JSON Schema of the arguments, derived from ``input_model``."""
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        return schema

    @functools.cached_property
    def validator(self) -> Any:
        """A compiled jsonschema validator for the arguments (the reference, and its messages)."""
        cls = jsonschema.validators.validator_for(self.input_schema)
        cls.check_schema(self.input_schema)
        return cls(self.input_schema)

    @functools.cached_property
    def fast_validator(self) -> Any:
        """A compiled jsonschema-rs validator that says quickly whether arguments are valid.

        It only ever accepts: a "no" goes to `validator`, whose verdict and message stand.
        None when the schema uses regular expressions (the two libraries' regex dialects
        differ) or jsonschema-rs cannot compile it.
        """
        text = json.dumps(self.input_schema)
        if '"pattern' in text:
            return None
        try:
            return jsonschema_rs.validator_for(self.input_schema)
        except Exception:  # whatever it cannot compile, jsonschema checks alone
            return None


@dataclass
class Extension:
    """A named group of tools plus the guidance text they add to the run_code description.

    Disabling an extension removes its tools and its guidance.
    """

    name: str
    tools: Sequence[Tool] = ()
    guidance: str = ""
    on_close: Callable[[], Awaitable[None]] | None = None


def _call_target(fn: Handler) -> Any:
    """What actually runs when ``fn`` is called: itself, or a callable object's ``__call__``."""
    return fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)  # noqa: B004


def _plan_from_signature(
    fn: Handler, name: str, input_model: type[pydantic.BaseModel] | None
) -> tuple[type[pydantic.BaseModel], str | None, str | None]:
    """Work out how to call a handler: its input model, context parameter and model parameter.

    A handler either takes one parameter typed with a pydantic model (the arguments), or
    plain keyword parameters that become the model's fields. A parameter typed
    ``ToolContext`` receives the context and is not part of the schema.

    Returns:
        ``(input_model, context_param, model_param)``; ``model_param`` is None when the
        model's fields are passed as keyword arguments.
    """
    target = _call_target(fn)
    hints = get_type_hints(target)
    params = [p for p in inspect.signature(target).parameters.values() if p.name != "self"]
    context_param = next((p.name for p in params if hints.get(p.name) is ToolContext), None)
    fields = [p for p in params if p.name != context_param]
    if len(fields) == 1:
        hinted = hints.get(fields[0].name)
        if inspect.isclass(hinted) and issubclass(hinted, pydantic.BaseModel):
            if input_model is not None and input_model is not hinted:
                raise UserError(f"tool {name!r}: input_model differs from the handler's parameter type")
            return hinted, context_param, fields[0].name
    if input_model is not None:
        if len(fields) == 1:
            return input_model, context_param, fields[0].name
        raise UserError(f"tool {name!r}: with input_model, the handler takes one parameter for the arguments")
    definitions: dict[str, Any] = {}
    for p in fields:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise UserError(f"tool {name!r}: *args/**kwargs cannot describe arguments; name each one")
        annotation = hints.get(p.name, Any)
        default = ... if p.default is p.empty else p.default
        definitions[p.name] = (annotation, default)
    model = pydantic.create_model(  # type: ignore[call-overload]
        f"{name}_args", __config__=pydantic.ConfigDict(extra="forbid"), **definitions
    )
    return model, context_param, None


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return inspect.cleandoc(doc).split("\n\n", 1)[0].replace("\n", " ").strip()


def make_tool(
    fn: Handler,
    *,
    name: str | None = None,
    description: str | None = None,
    input_model: type[pydantic.BaseModel] | None = None,
    output_schema: dict[str, Any] | None = None,
    extension: str | None = None,
    inline: bool = False,
) -> Tool:
    """Build a `Tool` from a handler function.

    Raises:
        UserError: The name is not a valid identifier, the signature cannot be described, or
            ``inline`` was asked for an async handler.
    """
    tool_name: str = name or str(getattr(fn, "__name__", ""))
    if not tool_name.isidentifier():
        raise UserError(f"tool name {tool_name!r} must be a valid identifier (letters, digits, _)")
    model, context_param, model_param = _plan_from_signature(fn, tool_name, input_model)
    target = _call_target(fn)
    is_async = inspect.iscoroutinefunction(target)
    if inline and is_async:
        raise UserError(f"tool {tool_name!r}: inline tools must be plain (sync) functions")
    return Tool(
        name=tool_name,
        description=description if description is not None else _first_paragraph(fn.__doc__),
        input_model=model,
        handler=fn,
        output_schema=output_schema,
        extension=extension,
        context_param=context_param,
        model_param=model_param,
        is_async=is_async,
        inline=inline,
    )


def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    input_model: type[pydantic.BaseModel] | None = None,
    output_schema: dict[str, Any] | None = None,
    inline: bool = False,
) -> Callable[[Handler], Tool]:
    """Decorator that turns a function into a `Tool` (arguments as `make_tool`).

    Example:
        ```python
        @tool()
        async def add(a: int, b: int) -> int:
            "Add two integers."
            return a + b
        ```
    """

    def decorate(fn: Handler) -> Tool:
        return make_tool(
            fn,
            name=name,
            description=description,
            input_model=input_model,
            output_schema=output_schema,
            inline=inline,
        )

    return decorate


def to_tool_result(value: Any) -> ToolResult:
    """Normalise what a handler returned into a `ToolResult`."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult.from_text(value)
    if isinstance(value, pydantic.BaseModel):
        data = value.model_dump(mode="json")
        return ToolResult.from_text(json.dumps(data, ensure_ascii=False), data)
    if value is None:
        return ToolResult.from_text("", None)
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):  # bool is an int
        return ToolResult.from_text(json.dumps(value), value)
    data = _ANY_ADAPTER.dump_python(value, mode="json")
    return ToolResult.from_text(json.dumps(data, ensure_ascii=False), data)


_ANY_ADAPTER: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)
