"""The tool contract: what a tool is, what it gets, what it returns."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import types
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import pydantic
import pydantic.json_schema

from codemode._json import JsonObject
from codemode.errors import ErrorCode, ToolError, UserError
from codemode.sandbox import SandboxPolicy
from codemode.tools._signature import typescript_signature
from codemode.tools._turns import WriterTurn

if TYPE_CHECKING:
    from codemode.state import Archive, SessionValues


class TextContent(pydantic.BaseModel):
    """One block of text content (MCP-shaped)."""

    type: Literal["text"] = "text"
    text: str


class ToolFailure(pydantic.BaseModel):
    """Why a call failed, as data: the one shape of a `ToolError`.

    Attributes:
        code: What kind of failure (see `ErrorCode`).
        message: What went wrong and what to do instead, for the model.
        data: JSON details (paths, candidates, limits), or None.
    """

    code: ErrorCode
    message: str
    data: Any = None


class ToolResult(pydantic.BaseModel):
    """What a tool returns: MCP-shaped content plus optional structured data.

    ``structured_content`` is the producer data a Code Mode program receives; when it is
    ``None`` the program receives the text.

    Two flags, two meanings:

    * ``error`` is set when the call failed (a `ToolError`, bad arguments, an unknown tool, a
      handler bug); a program's promise rejects with it. Build such a result with `failure`,
      or better, raise `ToolError` from the handler.
    * ``is_error`` is the MCP flag: it tells an MCP client the outcome was a failure. Every
      failed call has it; a result may also set it without failing (``bash`` sets it for a
      command that ran and exited non-zero: that is data for a program, not a rejection).
    """

    content: list[TextContent] = pydantic.Field(default_factory=list)
    structured_content: Any = None
    is_error: bool = False
    error: ToolFailure | None = None

    @property
    def text(self) -> str:
        """All text blocks joined by newlines."""
        return "\n".join(block.text for block in self.content)

    @classmethod
    def from_text(cls, text: str, structured: Any = None, *, is_error: bool = False) -> ToolResult:
        """Build a result from one text block and optional structured data.

        ``is_error=True`` here means the call failed (code ``tool_failed``; a program's promise
        rejects), as it always has. A result that reports a failed *outcome* as data (``bash``:
        a command that ran and exited non-zero) sets ``is_error`` on a result built directly.
        """
        # Plain construction: pydantic's model_construct is pure Python and twice as slow.
        if is_error:
            return cls.failure(ErrorCode.TOOL_FAILED, text, structured)
        return cls(content=[TextContent(text=text)], structured_content=structured)

    @classmethod
    def failure(cls, code: ErrorCode, message: str, data: Any = None) -> ToolResult:
        """The result of a call that failed: ``message`` is its text, ``data`` its structured content."""
        return cls.failed(ToolFailure(code=code, message=message, data=data))

    @classmethod
    def failed(cls, failure: ToolFailure) -> ToolResult:
        """The result of a call that failed as ``failure`` says (`failure_of` maps an exception)."""
        return cls(
            content=[TextContent(text=failure.message)],
            structured_content=failure.data,
            is_error=True,
            error=failure,
        )

    def producer_data(self) -> Any:
        """The value a program's ``await tools.x()`` resolves with."""
        return self.text if self.structured_content is None else self.structured_content


def failure_of(exc: Exception, name: str, *, prefix: bool = True) -> ToolFailure:
    """The one map from an exception to the failure a model sees, for every call path (the
    registry's direct and program calls, the engine's inline calls, host functions and faults).

    A `ToolError` keeps its code and data; its message gets ``name: `` in front when ``prefix``
    (a handler's refusal; the call machinery's own messages, bad arguments or an unknown tool,
    name the tool already). Any other exception is a bug of ``name`` or a host fault: code
    ``handler_failed``, its type and text in the message and in ``data.detail``, logged with its
    traceback. A caller that must let a `UserError` through (the registry, to the embedding
    developer) re-raises it before calling this.

    Args:
        exc: What was raised.
        name: The tool (or host function) that was called.
        prefix: Put ``name: `` in front of a `ToolError`'s message.
    """
    if isinstance(exc, ToolError):
        message = f"{name}: {exc.message}" if prefix else exc.message
        return ToolFailure(code=exc.code, message=message, data=exc.data)
    detail = f"{type(exc).__name__}: {exc}"
    logger.error("tool %s failed: %s", name, detail, exc_info=exc)
    return ToolFailure(
        code=ErrorCode.HANDLER_FAILED, message=f"{name} failed: {detail}", data={"detail": detail}
    )


@dataclass
class ProgramScope:
    """What a tool called from inside a program knows of that program.

    Attributes:
        deadline: ``time.monotonic()`` at which the program's wall-clock limit ends (no later
            than the engine's own deadline). A call of a program waits for its answer up to
            then; only a direct call, where a model is waiting, hands long commands off early.
        promoted: Process ids of commands that were still running at the deadline and go on
            in the background (the host names them in the program's error).
    """

    deadline: float
    promoted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ToolContext:
    """What the host hands a tool handler that asks for it (a parameter typed ``ToolContext``).

    Attributes:
        session_id: The calling session; process ids and ``store`` are scoped to it.
        workspace: The workspace root (absolute, symlinks resolved: the Host resolves it);
            relative paths resolve against it.
        policy: The sandbox policy in force for this call.
        archive: The archive (command logs, overflow text).
        call_id: Id of the surrounding ``run_code`` or direct call, when there is one.
        store: The session's store values (what a program's ``store`` reaches); None where
            the caller gave none (a program's ``store`` calls then fail with a clear error).
        program: Set for a call made by a program (`ProgramScope`), None for a direct call.
        writers: The session's line of calls that may change things (`WriterTurn`): a
            writer waits there for the writers before it; None lets every call run at once
            (the command policy's ``serialize_writers`` off, or no host).
    """

    session_id: str
    workspace: Path
    policy: SandboxPolicy
    archive: Archive
    call_id: str | None = None
    store: SessionValues | None = None
    program: ProgramScope | None = None
    writers: WriterTurn | None = None


Handler = Callable[..., Any]

logger = logging.getLogger("codemode.tools")


@dataclass
class Tool:
    """A registered tool.

    Attributes:
        name: Identifier used as ``tools.<name>`` (letters, digits, ``_``).
        description: What it does, for the model.
        input_model: Pydantic model of the arguments: the one validator, and its JSON Schema is
            the contract.
        handler: ``(args, [ctx]) -> ToolResult | str | JSON``; sync handlers run in a worker
            thread.
        result_type: The type of what a program receives (a pydantic model, TypedDict,
            dataclass, primitive, or a list or dict of them): its JSON Schema is the output
            schema. ``Any`` when the result has no known shape; ``NoneType`` when the tool
            returns nothing.
        title: A short human-readable name (MCP clients show it); default from the name.
        read_only: The tool changes nothing (MCP ``readOnlyHint``).
        destructive: The tool may change or delete what exists (MCP ``destructiveHint``);
            None when unknown.
        extension: Name of the extension that registered it, if any.
        inline: A cheap, non-blocking sync handler that a program calls directly on its own
            JS thread, without the trip to the event loop (its time counts as the program's
            CPU time, and inline calls run one at a time).
        origin: Where the tool comes from when it is not codemode's: an upstream MCP server's
            name and the tool's own name there (``{"server": ..., "tool": ...}``).
        output_observed: ``output_schema`` was learned from a call's result, not declared.
        derive_now: Derive the JSON Schemas at once, so a type that has none fails here (the
            default). codemode's own tools, whose schemas a test derives, leave them to first
            use: 10 schemas cost ~25 ms of every start (bench/bench_cold.py).

    Raises:
        UserError: ``result_type`` (or the input model) cannot be described as JSON Schema.
    """

    name: str
    description: str
    input_model: type[pydantic.BaseModel]
    handler: Handler
    result_type: Any = Any
    title: str | None = None
    read_only: bool = False
    destructive: bool | None = None
    extension: str | None = None
    context_param: str | None = None
    model_param: str | None = None
    is_async: bool = True
    inline: bool = False
    origin: dict[str, str] | None = None
    output_observed: bool = False
    derive_now: bool = field(default=True, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.title is None:
            self.title = self.name.replace("_", " ").strip().capitalize() or self.name
        if self.derive_now:  # a type without a JSON Schema must fail at registration
            self.input_schema  # noqa: B018
            self.output_schema  # noqa: B018

    @property
    def _where(self) -> str:
        return f"tool {self.name!r} ({_qualname(self.handler)})"

    @functools.cached_property
    def _result(self) -> tuple[pydantic.TypeAdapter[Any] | None, JsonObject | None]:
        return _result_schema(self.result_type, self._where)

    @functools.cached_property
    def result_adapter(self) -> pydantic.TypeAdapter[Any] | None:
        """The validator of ``result_type`` (None when there is none)."""
        return self._result[0]

    @functools.cached_property
    def output_schema(self) -> JsonObject | None:
        """JSON Schema of ``result_type`` (None when it is unknown or void; an upstream tool's
        is set from what its server declares or what a call returned)."""
        return self._result[1]

    @functools.cached_property
    def null_means_absent(self) -> frozenset[str]:
        """Optional arguments that do not take null: a null for one of them means it is absent."""
        return _null_means_absent(self.input_model)

    def bind(self, args: pydantic.BaseModel, ctx: ToolContext) -> dict[str, object]:
        """Keyword arguments for the handler: the model (or its fields) and the context."""
        kwargs: dict[str, object] = (
            {self.model_param: args} if self.model_param is not None else dict(args.__dict__)
        )
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        return kwargs

    @functools.cached_property
    def input_schema(self) -> JsonObject:
        """JSON Schema of the arguments, derived from ``input_model``.

        Raises:
            UserError: The arguments cannot be described as JSON Schema.
        """
        try:
            schema = self.input_model.model_json_schema()
        except Exception as exc:
            raise UserError(
                f"{self._where}: its arguments cannot be described as JSON Schema: {exc}"
            ) from exc
        schema.pop("title", None)
        return schema

    def parse(self, args: Any) -> pydantic.BaseModel:
        """Validate JSON arguments into the input model: the one check arguments get.

        ``null`` for an optional argument that does not take ``null`` means the argument is
        absent (its default applies).

        Raises:
            ToolError: Code ``invalid_arguments``; the message names the JSON path and what
                was expected there, ``data`` holds ``path`` and ``message``.
        """
        if self.null_means_absent and isinstance(args, dict):
            absent = self.null_means_absent
            args = {key: value for key, value in args.items() if value is not None or key not in absent}
        try:
            return self.input_model.model_validate(args)
        except pydantic.ValidationError as exc:
            raise self.invalid_arguments(*_first_problem(exc)) from None

    def invalid_arguments(self, path: str, problem: str) -> ToolError:
        """The one error for arguments that do not fit (code ``invalid_arguments``): names the
        JSON ``path``, the ``problem`` and the tool's signature."""
        message = (
            f"Invalid arguments for {self.name}: at {path}: {problem}. "
            f"Expected: {typescript_signature(self, with_result=False)}"
        )
        return ToolError(
            message,
            {"path": path, "message": problem},
            code=ErrorCode.INVALID_ARGUMENTS,
        )

    def check_result(self, value: Any) -> ToolResult | None:
        """Check what the handler returned against ``result_type``.

        A value of the declared class passes at once (pydantic checked it when it was made);
        other values are checked strictly, as Python data. Failed calls are not checked.

        Returns:
            None when the value fits (or nothing is declared); else the error result to hand
            the program (code ``invalid_result``), which is also logged: the tool has a bug.
        """
        adapter = self.result_adapter
        if adapter is None or (value.__class__ is self.result_type):
            return None
        data = value
        if isinstance(value, ToolResult):
            if value.error is not None:
                return None
            data = value.producer_data()
        try:
            adapter.validate_python(data, strict=True)
        except pydantic.ValidationError as exc:
            path, problem = _first_problem(exc)
            expected = _type_name(self.result_type)
            logger.warning(
                "tool %s returned a result that does not match its declared type %s: at %s: %s",
                self.name,
                expected,
                path,
                problem,
            )
            message = (
                f"{self.name} returned a result that does not match its declared result type {expected}: "
                f"at {path}: {problem}. This is a bug in the tool, not in the call."
            )
            return ToolResult.failure(ErrorCode.INVALID_RESULT, message, {"path": path, "message": problem})
        return None


def _qualname(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(type(fn), "__qualname__", repr(fn)))


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else repr(tp).replace("typing.", "")


class _StrictJsonSchema(pydantic.json_schema.GenerateJsonSchema):
    """JSON Schema generation that fails where pydantic would only warn (a type it cannot describe)."""

    def emit_warning(self, kind: Any, detail: str) -> None:
        raise ValueError(detail)


def _result_schema(
    result_type: Any, where: str
) -> tuple[pydantic.TypeAdapter[Any] | None, JsonObject | None]:
    """The validator and the output JSON Schema of a result type (None, None when it is unknown or void).

    Raises:
        UserError: The type cannot be described as JSON Schema.
    """
    if result_type is Any or result_type is type(None):
        return None, None
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(result_type)
        schema = adapter.json_schema(mode="serialization", schema_generator=_StrictJsonSchema)
    except Exception as exc:
        raise UserError(
            f"{where}: its result type {_type_name(result_type)} cannot be described as JSON Schema "
            f"(use a pydantic model, TypedDict, dataclass, primitive, or a list or dict of them): {exc}"
        ) from exc
    return adapter, schema


def _first_problem(exc: pydantic.ValidationError) -> tuple[str, str]:
    """The JSON path and a JSON-speaking description of a validation error's first problem."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    kind = first["type"]
    problem = _JSON_WORDS.get(kind, first["msg"])
    if kind not in _NO_INPUT_SHOWN:
        try:
            shown = json.dumps(first.get("input"), ensure_ascii=False)
        except (TypeError, ValueError):
            shown = ""
        if shown:
            problem += f" (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return _json_path(first["loc"]), problem


# pydantic's words for JSON types, where they are Python's
_JSON_WORDS = {
    "model_type": "Input should be an object",
    "model_attributes_type": "Input should be an object",
    "dict_type": "Input should be an object",
    "list_type": "Input should be an array",
    "tuple_type": "Input should be an array",
    "set_type": "Input should be an array",
    "none_required": "Input should be null",
}
# problems where the input is not worth repeating (absent, or the whole arguments)
_NO_INPUT_SHOWN = frozenset({"missing", "extra_forbidden", "arguments_for_action"})


def _json_path(parts: Iterable[Any]) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _accepts_none(annotation: Any) -> bool:
    """Whether a field annotation takes None (Optional, a union with None, Any, Literal[None])."""
    if annotation in (Any, object, None, type(None)):
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _accepts_none(get_args(annotation)[0])
    if origin is Literal:
        return None in get_args(annotation)
    if origin is Union or origin is types.UnionType:
        return any(_accepts_none(arg) for arg in get_args(annotation))
    return False


def _null_means_absent(model: type[pydantic.BaseModel]) -> frozenset[str]:
    """Optional top-level arguments that do not take null: there a null means "absent"."""
    return frozenset(
        field.alias or name
        for name, field in model.model_fields.items()
        if not field.is_required() and not _accepts_none(field.annotation)
    )


@dataclass
class Extension:
    """A named group of tools plus the guidance text they add to the run_code description.

    Disabling an extension removes its tools and its guidance. An extension with a
    ``namespace`` (an upstream MCP server's) names its tools ``<namespace>.<tool>``; programs
    reach them as ``tools.<namespace>.<tool>`` even while it has none (a call then fails with
    the guidance, which says why).
    """

    name: str
    tools: Sequence[Tool] = ()
    guidance: str = ""
    on_close: Callable[[], Awaitable[None]] | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class LazyExtension:
    """An extension registered before its module is imported; `ToolRegistry` loads it at the
    first use of one of its tools, or when every tool is needed (a search, the description).

    codemode's own tools register this way: importing their modules (mostly their pydantic
    argument and result models) was ~30 ms of every start (``bench/bench_cold.py``), and a
    run that calls none of them never pays it.

    Attributes:
        name: The extension's name.
        tool_names: The names of the tools `load` makes, as it makes them.
        effectful: Those of them that declare ``destructive=True`` (the prelude tracks their
            calls before any is loaded: `ToolRegistry.effectful_names_json`).
        load: Makes the real `Extension` (and imports its module).
    """

    name: str
    tool_names: tuple[str, ...]
    effectful: frozenset[str]
    load: Callable[[], Extension]


def _call_target(fn: Handler) -> Any:
    """What actually runs when ``fn`` is called: itself, or a callable object's ``__call__``."""
    return fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)  # noqa: B004


def _hints(fn: Handler, name: str) -> dict[str, object]:
    """The handler's resolved annotations.

    Raises:
        UserError: An annotation cannot be resolved (a name that is not defined).
    """
    try:
        return get_type_hints(_call_target(fn), include_extras=True)
    except Exception as exc:
        raise UserError(
            f"tool {name!r} ({_qualname(fn)}): its annotations cannot be resolved: {exc}"
        ) from exc


def _declared_result(hints: dict[str, object]) -> Any:
    """The result type a handler's return annotation declares (``Any`` when it declares none)."""
    annotation = hints.get("return", Any)
    if annotation is None:
        return type(None)
    if annotation in (ToolResult, object):
        return Any
    return annotation


def _plan_from_signature(
    fn: Handler, name: str, input_model: type[pydantic.BaseModel] | None, hints: dict[str, object]
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
    definitions: dict[str, tuple[object, object]] = {}
    for p in fields:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise UserError(f"tool {name!r}: *args/**kwargs cannot describe arguments; name each one")
        annotation = hints.get(p.name, Any)
        default = ... if p.default is p.empty else p.default
        definitions[p.name] = (annotation, default)
    try:
        model = pydantic.create_model(  # type: ignore[call-overload]
            f"{name}_args", __config__=pydantic.ConfigDict(extra="forbid"), **definitions
        )
    except Exception as exc:
        raise UserError(
            f"tool {name!r} ({_qualname(fn)}): its parameters cannot be described: {exc}"
        ) from exc
    return model, context_param, None


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return inspect.cleandoc(doc).split("\n\n", 1)[0].replace("\n", " ").strip()


def make_tool(
    fn: Handler,
    *,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    input_model: type[pydantic.BaseModel] | None = None,
    result_model: Any = None,
    read_only: bool = False,
    destructive: bool | None = None,
    extension: str | None = None,
    inline: bool = False,
    derive_now: bool = True,
) -> Tool:
    """Build a `Tool` from a handler function.

    Args:
        fn: The handler (sync or async function, or callable object).
        name: Tool name (default: the function's name).
        title: Short human-readable name (default: from the name).
        description: For the model (default: the docstring's first paragraph).
        input_model: The arguments' pydantic model (default: from the handler's parameters).
        result_model: The result's type (default: the handler's return annotation; a handler
            annotated ``-> ToolResult`` or not at all declares none).
        read_only: The tool changes nothing.
        destructive: The tool may change or delete what exists (None: unknown).
        extension: Name of the extension the tool belongs to.
        inline: Run the sync handler on the program's own thread (see `Tool`).
        derive_now: Derive the JSON Schemas now (see `Tool`).

    Raises:
        UserError: The name is not a valid identifier, the signature or the result type cannot
            be described, or ``inline`` was asked for an async handler.
    """
    tool_name: str = name or str(getattr(fn, "__name__", ""))
    if not tool_name.isidentifier():
        raise UserError(f"tool name {tool_name!r} must be a valid identifier (letters, digits, _)")
    hints = _hints(fn, tool_name)
    model, context_param, model_param = _plan_from_signature(fn, tool_name, input_model, hints)
    is_async = inspect.iscoroutinefunction(_call_target(fn))
    if inline and is_async:
        raise UserError(f"tool {tool_name!r}: inline tools must be plain (sync) functions")
    return Tool(
        name=tool_name,
        description=description if description is not None else _first_paragraph(fn.__doc__),
        input_model=model,
        handler=fn,
        result_type=_declared_result(hints) if result_model is None else result_model,
        title=title,
        read_only=read_only,
        destructive=destructive,
        extension=extension,
        context_param=context_param,
        model_param=model_param,
        is_async=is_async,
        inline=inline,
        derive_now=derive_now,
    )


def tool(
    name: str | None = None,
    *,
    title: str | None = None,
    description: str | None = None,
    input_model: type[pydantic.BaseModel] | None = None,
    result_model: Any = None,
    read_only: bool = False,
    destructive: bool | None = None,
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

    Raises:
        UserError: As `make_tool`, when the decorator is applied.
    """

    def decorate(fn: Handler) -> Tool:
        return make_tool(
            fn,
            name=name,
            title=title,
            description=description,
            input_model=input_model,
            result_model=result_model,
            read_only=read_only,
            destructive=destructive,
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
