"""The tool registry: registration, extensions, search, description, validation, calls."""

from __future__ import annotations

import difflib
import json
import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

import anyio.to_thread

from codemode._json import JsonObject
from codemode._trace import SpanHandle, Trace, failed
from codemode.errors import ErrorCode, ToolError, UserError
from codemode.tools._model import (
    Extension,
    LazyExtension,
    Tool,
    ToolContext,
    ToolResult,
    failure_of,
    make_tool,
    to_tool_result,
)
from codemode.tools._search import MAX_NAME_CHARS, SearchIndex, check_name, check_query, words
from codemode.tools._signature import typescript_signature


def _tool_names(extension: Extension | LazyExtension) -> list[str]:
    if isinstance(extension, LazyExtension):
        return list(extension.tool_names)
    return [t.name for t in extension.tools]


class ToolDescription(TypedDict):
    """`ToolRegistry.describe`: what ``describeTool`` returns. ``guide``: its extension's
    guidance when too long for run_code's description; ``origin`` and ``result_type`` for an
    upstream MCP tool (its original names; whether its result type is declared, observed or
    unknown)."""

    name: str
    title: str | None
    description: str
    input_schema: JsonObject
    output_schema: JsonObject | None
    signature: str
    guide: NotRequired[str]
    origin: NotRequired[dict[str, str]]
    result_type: NotRequired[Literal["unknown", "observed", "declared"]]


@dataclass(frozen=True)
class ArgumentProblem:
    """Why arguments failed validation: a JSON path and what was expected there."""

    path: str
    message: str


# An extension's guidance longer than this is left out of run_code's description; describe()
# returns it with each of the extension's tools (codemode._description inlines the rest).
GUIDE_INLINE_CHARS = 500


class ToolRegistry:
    """Holds the host's tools and extensions.

    Tools registered directly belong to no extension; an extension's tools come and go
    with it. A `LazyExtension` is loaded at the first use of one of its tools (`get`), or
    when every tool is needed; until then only its tools' names and effects are known.
    """

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._extensions: dict[str, Extension] = {}
        self._disabled: dict[str, Extension | LazyExtension] = {}
        self._lazy: dict[str, LazyExtension] = {}  # enabled, not loaded yet
        self._lazy_names: dict[str, str] = {}  # their tools' names -> the extension's name
        self._lock = threading.RLock()  # held by every change (see "registration")
        self._effectful_json: str | None = None  # effectful_names_json, until the tools change
        self._namespaces_json: str | None = None  # namespaces_json, until the tools change
        self._inline_json: str | None = None  # inline_names_json, until the tools change
        self._index: SearchIndex | None = None  # search's index, until the tools change

    # -- registration -------------------------------------------------------------------
    #
    # Changes happen under one lock: programs' threads load lazy extensions (`get`) while the
    # host registers or disables others. Readers iterate over copies of the dicts (a copy is
    # made in one step under the GIL), so a change never breaks an iteration in progress.

    def add(self, item: Tool | Any, **kwargs: Any) -> Tool:
        """Register a `Tool`, or build one from a function (keyword args as `make_tool`).

        Raises:
            UserError: The name is taken or the function cannot be described.
        """
        tool_obj = item if isinstance(item, Tool) else make_tool(item, **kwargs)
        with self._lock:
            if tool_obj.name in self._tools or tool_obj.name in self._lazy_names:
                raise UserError(f"a tool named {tool_obj.name!r} is already registered")
            self._tools[tool_obj.name] = tool_obj
            self._changed()
        return tool_obj

    def remove(self, name: str) -> None:
        """Unregister a tool by name (a lazy extension's is loaded first).

        Raises:
            UserError: No such tool.
        """
        with self._lock:
            if name in self._lazy_names:
                self._load(self._lazy_names[name])
            if self._tools.pop(name, None) is None:
                raise UserError(f"no tool named {name!r} is registered")
            self._changed()

    def add_extension(self, extension: Extension | LazyExtension) -> None:
        """Register an extension and its tools (a lazy one's load at their first use).

        Raises:
            UserError: The extension name or one of its tool names is taken.
        """
        with self._lock:
            if (
                extension.name in self._extensions
                or extension.name in self._lazy
                or extension.name in self._disabled
            ):
                raise UserError(f"an extension named {extension.name!r} is already registered")
            names = _tool_names(extension)
            clashes = [n for n in names if n in self._tools or n in self._lazy_names]
            if clashes:
                raise UserError(f"extension {extension.name!r}: tool names already registered: {clashes}")
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise UserError(f"extension {extension.name!r} has several tools named {repeated}")
            if isinstance(extension, LazyExtension):
                self._lazy[extension.name] = extension
                self._lazy_names.update(dict.fromkeys(names, extension.name))
            else:
                for t in extension.tools:
                    t.extension = extension.name
                    self.add(t)
                self._extensions[extension.name] = extension
            self._changed()

    def disable_extension(self, name: str) -> None:
        """Remove an extension's tools and guidance (it can be enabled again).

        Raises:
            UserError: No enabled extension has that name.
        """
        with self._lock:
            extension: Extension | LazyExtension | None = self._extensions.pop(name, None) or self._lazy.pop(
                name, None
            )
            if extension is None:
                raise UserError(f"no enabled extension named {name!r}")
            for tool_name in _tool_names(extension):
                self._tools.pop(tool_name, None)
                self._lazy_names.pop(tool_name, None)
            self._disabled[name] = extension
            self._changed()

    def remove_extension(self, name: str) -> None:
        """Forget an extension (enabled or disabled) and its tools; no error if unknown."""
        with self._lock:
            lazy = self._lazy.pop(name, None)
            if lazy is not None:
                for tool_name in lazy.tool_names:
                    self._lazy_names.pop(tool_name, None)
                self._changed()
            extension = self._extensions.pop(name, None) or self._disabled.pop(name, None)
            if isinstance(extension, Extension):
                for t in extension.tools:
                    if self._tools.get(t.name) is t:
                        del self._tools[t.name]
                self._changed()

    def enable_extension(self, name: str) -> None:
        """Bring back a disabled extension.

        Raises:
            UserError: No disabled extension has that name.
        """
        with self._lock:
            extension = self._disabled.pop(name, None)
            if extension is None:
                raise UserError(f"no disabled extension named {name!r}")
            try:
                self.add_extension(extension)
            except UserError:
                self._disabled[name] = extension  # still disabled, and can be enabled once the clash is gone
                raise

    def _load(self, name: str) -> None:
        """Load the lazy extension ``name`` in place, once (any thread).

        Raises:
            UserError: It failed to load, or loaded other tools than it declared (names or
                effects): a bug in it.
        """
        with self._lock:
            lazy = self._lazy.get(name)
            if lazy is None:
                return  # loaded by another thread meanwhile, or disabled
            try:
                extension = lazy.load()
            except Exception as exc:
                raise UserError(
                    f"the {name!r} extension failed to load: {type(exc).__name__}: {exc}"
                ) from exc
            names = tuple(t.name for t in extension.tools)
            effectful = frozenset(t.name for t in extension.tools if t.destructive is True)
            if (
                extension.name != lazy.name
                or sorted(names) != sorted(lazy.tool_names)
                or effectful != lazy.effectful
            ):
                raise UserError(
                    f"lazy extension {lazy.name!r} declared tools {sorted(lazy.tool_names)} "
                    f"(effectful {sorted(lazy.effectful)}) but loaded {extension.name!r} with "
                    f"{sorted(names)} (effectful {sorted(effectful)})"
                )
            for t in extension.tools:  # first: `get` relies on this order
                t.extension = extension.name
                self._tools[t.name] = t
            self._extensions[extension.name] = extension
            for tool_name in names:
                self._lazy_names.pop(tool_name, None)
            del self._lazy[name]
            self._namespaces_json = None  # (the effectful names are what it declared)
            self._inline_json = None
            self._index = None

    def _load_all(self) -> None:
        if self._lazy:
            with self._lock:
                for name in list(self._lazy):
                    self._load(name)

    @property
    def extensions(self) -> list[Extension]:
        """The enabled extensions (lazy ones are loaded first)."""
        self._load_all()
        return list(self._extensions.values())

    # -- lookup -------------------------------------------------------------------------

    def get(self, name: str) -> Tool | None:
        """The tool with this name, or None (its lazy extension is loaded at this first use)."""
        found = self._tools.get(name)
        if found is not None:
            return found
        lazy = self._lazy_names.get(name)
        if lazy is None:
            # Or another thread has just loaded it: `_load` adds the tools before their names
            # leave `_lazy_names`.
            return self._tools.get(name)
        with self._lock:
            self._load(lazy)  # (nothing to do if another thread loaded it meanwhile)
            return self._tools.get(name)

    def _changed(self) -> None:
        """Forget what was derived from the set of tools."""
        self._effectful_json = None
        self._namespaces_json = None
        self._inline_json = None
        self._index = None

    def effectful_names_json(self) -> str:
        """The names of the tools that declare they change things (``destructive=True``: the
        built-in bash, write_file and edit_file), as a JSON array. The prelude tracks their
        calls, so one nothing awaited is still reported with what it did; tracking costs an
        extra job per await (~14 us a call), so tools that do not declare it are not tracked."""
        if self._effectful_json is None:
            effectful = {n for n, t in list(self._tools.items()) if t.destructive is True}
            for lazy in list(self._lazy.values()):
                effectful.update(lazy.effectful)
            self._effectful_json = json.dumps(sorted(effectful))
        return self._effectful_json

    def inline_names_json(self) -> str:
        """The names of the loaded tools registered ``inline=True``, as a JSON array: the prelude
        calls them on the program's thread (one crossing, answered at once) and posts every
        other call to the event loop. A tool of a lazy extension not loaded yet is not named;
        its first calls go through the loop, which runs an inline tool where it is."""
        if self._inline_json is None:
            self._inline_json = json.dumps(sorted(n for n, t in list(self._tools.items()) if t.inline))
        return self._inline_json

    def namespaces_json(self) -> str:
        """The first parts of dotted tool names (an upstream server's tools are named
        ``server.tool``, called as ``tools.server.tool(args)``), as a JSON array."""
        if self._namespaces_json is None:
            spaces = {n.split(".", 1)[0] for n in list(self._tools) if "." in n}
            spaces.update(e.namespace for e in list(self._extensions.values()) if e.namespace is not None)
            self._namespaces_json = json.dumps(sorted(spaces))
        return self._namespaces_json

    def names(self) -> list[str]:
        """All tool names, sorted (lazy extensions stay unloaded)."""
        with self._lock:  # not a name missing while it moves from lazy to loaded
            return sorted([*self._tools, *self._lazy_names])

    def __iter__(self) -> Any:
        self._load_all()
        return iter(sorted(list(self._tools.values()), key=lambda t: t.name))

    def __len__(self) -> int:
        with self._lock:
            return len(self._tools) + len(self._lazy_names)

    def suggestions(self, name: str) -> list[str]:
        """Up to three tool names a mistyped ``name`` may have meant (spelling, then search); none
        for a name longer than any tool's (`MAX_NAME_CHARS`: comparing it would cost the host)."""
        if len(name) > MAX_NAME_CHARS:
            return []
        close = difflib.get_close_matches(name, self.names(), n=3, cutoff=0.5)
        return close or [r["name"] for r in self.search(name, limit=3)]

    def unknown_tool_message(self, name: str) -> str:
        """A model-facing message for a tool name that does not exist."""
        if len(name) > MAX_NAME_CHARS:
            try:
                check_name(name)
            except ToolError as exc:
                return exc.message
        close = self.suggestions(name)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        space = name.split(".", 1)[0] if "." in name else None
        for extension in list(self._extensions.values()):
            if space is not None and extension.namespace == space and extension.guidance:
                hint += f" {extension.guidance.strip()}"
        return (
            f'Unknown tool {name!r}.{hint} Use searchTools("<what you need>") to find tools '
            "and describeTool(name) for their arguments."
        )

    def search(self, query: str, limit: int = 10) -> list[dict[str, str]]:
        """Rank tools for a free-text query by name, description and parameter names
        (`SearchIndex`, rebuilt after the tools change).

        Returns:
            Up to ``limit`` ``{name, description}`` dicts, best first; all tools (sorted)
            for an empty query.

        Raises:
            ToolError: The query is longer than `MAX_QUERY_CHARS` (code ``invalid_arguments``).
        """
        check_query(query)
        if not words(query):
            return [{"name": t.name, "description": t.description} for t in self][:limit]
        self._load_all()
        if self._index is None:
            self._index = SearchIndex(list(self._tools.values()))
        tools = self._tools
        return [
            {"name": name, "description": tools[name].description}
            for name in self._index.search(query, limit)
            if name in tools
        ]

    def describe(self, name: str) -> ToolDescription:
        """Name, title, description, input and output JSON Schema and a TypeScript signature;
        ``guide``: its extension's guidance, when too long for run_code's description.

        ``output_schema`` is None where the result has no known shape.

        Raises:
            ToolError: No such tool (code ``unknown_tool``; the message names close matches).
        """
        t = self.get(name)
        if t is None:
            check_name(name)
            raise ToolError(self.unknown_tool_message(name), code=ErrorCode.UNKNOWN_TOOL)
        described: ToolDescription = {
            "name": t.name,
            "title": t.title,
            "description": t.description,
            "input_schema": t.input_schema,
            "output_schema": t.output_schema,
            "signature": typescript_signature(t),
        }
        extension = self._extensions.get(t.extension) if t.extension is not None else None
        if extension is not None and len(extension.guidance.strip()) > GUIDE_INLINE_CHARS:
            described["guide"] = extension.guidance.strip()  # too long for run_code's description
        if t.origin is not None:  # an upstream MCP tool: its original names, where its type comes from
            described["origin"] = dict(t.origin)
            described["result_type"] = (
                "unknown" if t.output_schema is None else "observed" if t.output_observed else "declared"
            )
        return described

    # -- validation and calls -------------------------------------------------------------
    #
    # Exceptions become results through `failure_of` (in `_failure`); the one check of the
    # arguments is `Tool.parse`, the one check of results `Tool.check_result`.

    def validate(self, t: Tool, args: Any) -> ArgumentProblem | None:
        """Check arguments with `Tool.parse`; None when valid (for the engine, which rejects
        bad calls on the program's thread and passes the arguments on as they came)."""
        try:
            t.parse(args)
        except ToolError as exc:
            return ArgumentProblem(exc.data["path"], exc.data["message"])
        return None

    def argument_error_message(self, t: Tool, problem: ArgumentProblem) -> str:
        """A model-facing message for invalid arguments (the one `Tool.parse` raises)."""
        return (
            f"Invalid arguments for {t.name}: at {problem.path}: {problem.message}. "
            f"Expected: {typescript_signature(t, with_result=False)}"
        )

    async def call(self, name: str, args: Any, ctx: ToolContext) -> ToolResult:
        """Validate and run one tool; every failure the model can cause becomes an error result.

        Args:
            name: Tool name.
            args: JSON arguments (a dict).
            ctx: The call's context.

        Returns:
            The tool's result; for unknown tools, bad arguments, refusals (`ToolError`) and
            handler bugs, an error result whose ``error`` has the code and the message.

        Raises:
            UserError: The handler raised one (the embedding developer's mistake).
        """
        t = self.get(name)
        if t is None:
            message = self.unknown_tool_message(name)
            return ToolResult.failure(ErrorCode.UNKNOWN_TOOL, message, {"name": name})
        return await self.invoke(t, args, ctx)

    async def invoke(
        self, t: Tool, args: Any, ctx: ToolContext, *, trace: Trace | None = None, call_id: str | None = None
    ) -> ToolResult:
        """Run a tool on JSON arguments (or its parsed input model), mapping failures to results.

        Raises:
            UserError: The handler raised one.
        """
        value = await self.invoke_raw(t, args, ctx, trace=trace, call_id=call_id)
        try:
            return to_tool_result(value)
        except Exception as exc:  # a value pydantic cannot serialise
            return self._failure(t, exc)

    async def invoke_raw(
        self, t: Tool, args: Any, ctx: ToolContext, *, trace: Trace | None = None, call_id: str | None = None
    ) -> Any:
        """Like `invoke`, but return what the handler returned as it is (a `ToolResult` or
        plain data; `to_tool_result` makes it a result). Failures are error results.

        ``trace``: the call runs in a span of its own under it (GenAI's ``execute_tool``, its
        ``gen_ai.tool.call.id`` ``call_id``), current while the handler runs.

        Raises:
            UserError: The handler raised one.
        """
        if trace is not None:
            with _call_span(trace, t.name, call_id, ctx.session_id, args) as span:
                value = await self.invoke_raw(t, args, ctx)
                _note(span, value)
            return value
        model = self._parsed(t, args)
        if isinstance(model, ToolResult):
            return model
        try:
            kwargs = t.bind(model, ctx)
            if t.is_async:
                value = await t.handler(**kwargs)
            else:
                value = await anyio.to_thread.run_sync(lambda: t.handler(**kwargs))
        except Exception as exc:  # a handler bug must not take the host down
            return self._failure(t, exc)
        return t.check_result(value) or value

    def invoke_inline(
        self, t: Tool, args: Any, ctx: ToolContext, *, trace: Trace | None = None, call_id: str | None = None
    ) -> Any:
        """Run an ``inline`` tool's sync handler on the calling thread (the program's JS thread).

        Returns:
            What the handler returned, as `invoke_raw` does (``trace`` and ``call_id`` too).

        Raises:
            UserError: The handler raised one.
        """
        if trace is not None:
            with _call_span(trace, t.name, call_id, ctx.session_id, args) as span:
                value = self.invoke_inline(t, args, ctx)
                _note(span, value)
            return value
        model = self._parsed(t, args)
        if isinstance(model, ToolResult):
            return model
        try:
            value = t.handler(**t.bind(model, ctx))
        except Exception as exc:
            return self._failure(t, exc)
        return t.check_result(value) or value

    @staticmethod
    def _parsed(t: Tool, args: Any) -> Any:
        """The parsed input model, or the error result for invalid arguments (its message names the tool)."""
        if isinstance(args, t.input_model):
            return args
        try:
            return t.parse(args)
        except ToolError as exc:
            return ToolResult.failed(failure_of(exc, t.name, prefix=False))

    @staticmethod
    def _failure(t: Tool, exc: Exception) -> ToolResult:
        """A handler's exception as its result (`failure_of`); a `UserError` (the developer's
        mistake) is re-raised."""
        if isinstance(exc, UserError):
            raise exc
        return ToolResult.failed(failure_of(exc, t.name))


def _call_span(
    trace: Trace, name: str, call_id: str | None, session: str, args: Any
) -> AbstractContextManager[SpanHandle]:
    """A tool call's span: GenAI's ``execute_tool`` (no argument or result is recorded there;
    its arguments, as parsed, are a watcher's detail ``args``)."""
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "codemode.session.id": session,
    }
    if call_id is not None:
        attributes["gen_ai.tool.call.id"] = call_id
    return trace.span(f"execute_tool {name}", attributes, {"args": args})


def _note(span: SpanHandle, value: Any) -> None:
    """A failed call's code as its span's ``error.type``."""
    if isinstance(value, ToolResult) and value.error is not None:
        failed(span, value.error.code.value)
