"""The tool registry: registration, extensions, search, description, validation, calls."""

from __future__ import annotations

import difflib
import json
import logging
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from codemode.errors import ErrorCode, ToolError, UserError
from codemode.tools._model import Extension, Tool, ToolContext, ToolResult, make_tool, to_tool_result
from codemode.tools._search import SearchIndex, words
from codemode.tools._signature import typescript_signature

logger = logging.getLogger("codemode.tools")


@dataclass(frozen=True)
class ArgumentProblem:
    """Why arguments failed validation: a JSON path and what was expected there."""

    path: str
    message: str


class ToolRegistry:
    """Holds the host's tools and extensions.

    Tools registered directly belong to no extension; an extension's tools come and go
    with it.
    """

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._extensions: dict[str, Extension] = {}
        self._disabled: dict[str, Extension] = {}
        self._effectful_json: str | None = None  # effectful_names_json, until the tools change
        self._index: SearchIndex | None = None  # search's index, until the tools change

    # -- registration -------------------------------------------------------------------

    def add(self, item: Tool | Any, **kwargs: Any) -> Tool:
        """Register a `Tool`, or build one from a function (keyword args as `make_tool`).

        Raises:
            UserError: The name is taken or the function cannot be described.
        """
        tool_obj = item if isinstance(item, Tool) else make_tool(item, **kwargs)
        if tool_obj.name in self._tools:
            raise UserError(f"a tool named {tool_obj.name!r} is already registered")
        self._tools[tool_obj.name] = tool_obj
        self._changed()
        return tool_obj

    def remove(self, name: str) -> None:
        """Unregister a tool by name.

        Raises:
            UserError: No such tool.
        """
        if self._tools.pop(name, None) is None:
            raise UserError(f"no tool named {name!r} is registered")
        self._changed()

    def add_extension(self, extension: Extension) -> None:
        """Register an extension and its tools.

        Raises:
            UserError: The extension name or one of its tool names is taken.
        """
        if extension.name in self._extensions or extension.name in self._disabled:
            raise UserError(f"an extension named {extension.name!r} is already registered")
        clashes = [t.name for t in extension.tools if t.name in self._tools]
        if clashes:
            raise UserError(f"extension {extension.name!r}: tool names already registered: {clashes}")
        names = [t.name for t in extension.tools]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise UserError(f"extension {extension.name!r} has several tools named {repeated}")
        for t in extension.tools:
            t.extension = extension.name
            self.add(t)
        self._extensions[extension.name] = extension

    def disable_extension(self, name: str) -> None:
        """Remove an extension's tools and guidance (it can be enabled again).

        Raises:
            UserError: No enabled extension has that name.
        """
        extension = self._extensions.pop(name, None)
        if extension is None:
            raise UserError(f"no enabled extension named {name!r}")
        for t in extension.tools:
            self._tools.pop(t.name, None)
        self._disabled[name] = extension
        self._changed()

    def remove_extension(self, name: str) -> None:
        """Forget an extension (enabled or disabled) and its tools; no error if unknown."""
        extension = self._extensions.pop(name, None) or self._disabled.pop(name, None)
        if extension is not None:
            for t in extension.tools:
                if self._tools.get(t.name) is t:
                    del self._tools[t.name]
            self._changed()

    def enable_extension(self, name: str) -> None:
        """Bring back a disabled extension.

        Raises:
            UserError: No disabled extension has that name.
        """
        extension = self._disabled.pop(name, None)
        if extension is None:
            raise UserError(f"no disabled extension named {name!r}")
        try:
            self.add_extension(extension)
        except UserError:
            self._disabled[name] = extension  # still disabled, and can be enabled once the clash is gone
            raise

    @property
    def extensions(self) -> list[Extension]:
        """The enabled extensions, in registration order."""
        return list(self._extensions.values())

    # -- lookup -------------------------------------------------------------------------

    def get(self, name: str) -> Tool | None:
        """The tool with this name, or None."""
        return self._tools.get(name)

    def _changed(self) -> None:
        """Forget what was derived from the set of tools."""
        self._effectful_json = None
        self._index = None

    def effectful_names_json(self) -> str:
        """The names of the tools that declare they change things (``destructive=True``: the
        built-in bash, write_file and edit_file), as a JSON array. The prelude tracks their
        calls, so one nothing awaited is still reported with what it did; tracking costs an
        extra job per await (~14 us a call), so tools that do not declare it are not tracked."""
        if self._effectful_json is None:
            self._effectful_json = json.dumps(
                sorted(n for n, t in self._tools.items() if t.destructive is True)
            )
        return self._effectful_json

    def names(self) -> list[str]:
        """All tool names, sorted."""
        return sorted(self._tools)

    def __iter__(self) -> Any:
        return iter(sorted(self._tools.values(), key=lambda t: t.name))

    def __len__(self) -> int:
        return len(self._tools)

    def suggestions(self, name: str) -> list[str]:
        """Up to three tool names a mistyped ``name`` may have meant (spelling, then search)."""
        close = difflib.get_close_matches(name, list(self._tools), n=3, cutoff=0.5)
        return close or [r["name"] for r in self.search(name, limit=3)]

    def unknown_tool_message(self, name: str) -> str:
        """A model-facing message for a tool name that does not exist."""
        close = self.suggestions(name)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
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
        """
        if not words(query):
            return [{"name": t.name, "description": t.description} for t in self][:limit]
        if self._index is None:
            self._index = SearchIndex(self._tools.values())
        return [
            {"name": name, "description": self._tools[name].description}
            for name in self._index.search(query, limit)
        ]

    def describe(self, name: str) -> dict[str, Any]:
        """Name, title, description, input and output JSON Schema and a TypeScript signature.

        ``output_schema`` is None where the result has no known shape.

        Raises:
            ToolError: No such tool (code ``unknown_tool``; the message names close matches).
        """
        t = self._tools.get(name)
        if t is None:
            raise ToolError(self.unknown_tool_message(name), code=ErrorCode.UNKNOWN_TOOL)
        return {
            "name": t.name,
            "title": t.title,
            "description": t.description,
            "input_schema": t.input_schema,
            "output_schema": t.output_schema,
            "signature": typescript_signature(t),
        }

    # -- validation and calls -------------------------------------------------------------
    #
    # The one boundary where exceptions become results is `_failure`; the one check of the
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
        t = self._tools.get(name)
        if t is None:
            message = self.unknown_tool_message(name)
            return ToolResult.failure(
                ErrorCode.UNKNOWN_TOOL, message, {"error": "unknown_tool", "name": name}
            )
        return await self.invoke(t, args, ctx)

    async def invoke(self, t: Tool, args: Any, ctx: ToolContext) -> ToolResult:
        """Run a tool on JSON arguments (or its parsed input model), mapping failures to results.

        Raises:
            UserError: The handler raised one.
        """
        value = await self.invoke_raw(t, args, ctx)
        try:
            return to_tool_result(value)
        except Exception as exc:  # a value pydantic cannot serialise
            return self._failure(t, exc)

    async def invoke_raw(self, t: Tool, args: Any, ctx: ToolContext) -> Any:
        """Like `invoke`, but return what the handler returned as it is (a `ToolResult` or
        plain data; `to_tool_result` makes it a result). Failures are error results.

        Raises:
            UserError: The handler raised one.
        """
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

    def invoke_inline(self, t: Tool, args: Any, ctx: ToolContext) -> Any:
        """Run an ``inline`` tool's sync handler on the calling thread (the program's JS thread).

        Returns:
            What the handler returned, as `invoke_raw` does.

        Raises:
            UserError: The handler raised one.
        """
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
            return ToolResult.failure(exc.code, exc.message, exc.data)

    @staticmethod
    def _failure(t: Tool, exc: Exception) -> ToolResult:
        """The one place a handler's exception becomes a result.

        A `ToolError` keeps its code and data (its message is prefixed with the tool's name);
        any other exception is a handler bug (code ``handler_failed``, logged with its
        traceback); a `UserError` (the developer's mistake) is re-raised.
        """
        if isinstance(exc, ToolError):
            return ToolResult.failure(exc.code, f"{t.name}: {exc.message}", exc.data)
        if isinstance(exc, UserError):
            raise exc
        detail = f"{type(exc).__name__}: {exc}"
        logger.error("tool %s failed: %s", t.name, detail, exc_info=exc)
        return ToolResult.failure(
            ErrorCode.HANDLER_FAILED,
            f"{t.name} failed: {detail}",
            {"error": "handler_failed", "detail": detail},
        )
