"""The tool registry: registration, extensions, search, description, validation, calls."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import pydantic

from codemode.errors import ToolError, UserError
from codemode.tools._model import Extension, Tool, ToolContext, ToolResult, make_tool, to_tool_result
from codemode.tools._signature import typescript_signature


@dataclass(frozen=True)
class ArgumentProblem:
    """Why arguments failed validation: a JSON path and what was expected there."""

    path: str
    message: str


def _json_path(parts: Iterable[Any]) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    # Split camelCase and snake_case so "readFile" and "read_file" both match "read".
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return _WORD.findall(spaced.lower())


class ToolRegistry:
    """Holds the host's tools and extensions.

    Tools registered directly belong to no extension; an extension's tools come and go
    with it.
    """

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._extensions: dict[str, Extension] = {}
        self._disabled: dict[str, Extension] = {}

    # -- registration -------------------------------------------------------------------

    def add(self, item: Tool | Any, **kwargs: Any) -> Tool:
        """Register a `Tool`, or build one from a function (keyword args as `make_tool`).

        Raises:
            UserError: The name is taken or the function cannot be described.
        """
        tool_obj = item if isinstance(item, Tool) else make_tool(item, **kwargs)
        if tool_obj.name in self._tools:
            raise UserError(f"a tool named {tool_obj.name!r} is already registered")
        tool_obj.validator  # noqa: B018 - compile the schema now so mistakes surface at registration
        self._tools[tool_obj.name] = tool_obj
        return tool_obj

    def remove(self, name: str) -> None:
        """Unregister a tool by name.

        Raises:
            UserError: No such tool.
        """
        if self._tools.pop(name, None) is None:
            raise UserError(f"no tool named {name!r} is registered")

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
            t.validator  # noqa: B018 - a bad schema must fail before any of the tools is added
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

    def remove_extension(self, name: str) -> None:
        """Forget an extension (enabled or disabled) and its tools; no error if unknown."""
        extension = self._extensions.pop(name, None) or self._disabled.pop(name, None)
        if extension is not None:
            for t in extension.tools:
                if self._tools.get(t.name) is t:
                    del self._tools[t.name]

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

    def names(self) -> list[str]:
        """All tool names, sorted."""
        return sorted(self._tools)

    def __iter__(self) -> Any:
        return iter(sorted(self._tools.values(), key=lambda t: t.name))

    def __len__(self) -> int:
        return len(self._tools)

    def unknown_tool_message(self, name: str) -> str:
        """A model-facing message for a tool name that does not exist."""
        close = difflib.get_close_matches(name, list(self._tools), n=3, cutoff=0.5)
        if not close:
            close = [r["name"] for r in self.search(name, limit=3)]
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        return (
            f'Unknown tool {name!r}.{hint} Use searchTools("<what you need>") to find tools '
            "and describeTool(name) for their arguments."
        )

    def search(self, query: str, limit: int = 10) -> list[dict[str, str]]:
        """Rank tools for a free-text query by name, description and parameter names.

        Returns:
            Up to ``limit`` ``{name, description}`` dicts, best first; all tools (sorted)
            for an empty query.
        """
        terms = _words(query)
        if not terms:
            return [{"name": t.name, "description": t.description} for t in self][:limit]
        scored: list[tuple[float, str]] = []
        n_tools = max(len(self._tools), 1)
        fields_per_tool = {t.name: self._search_fields(t) for t in self}
        doc_freq: dict[str, int] = {}
        for fields in fields_per_tool.values():
            seen = set(fields[0]) | set(fields[1]) | set(fields[2])
            for w in seen:
                doc_freq[w] = doc_freq.get(w, 0) + 1
        for t in self:
            name_words, param_words, desc_words = fields_per_tool[t.name]
            score = 0.0
            for term in terms:
                idf = 1.0 + math.log(n_tools / (1 + doc_freq.get(term, 0)) + 1)
                if term == t.name.lower():
                    score += 10 * idf
                if term in name_words:
                    score += 5 * idf
                elif any(w.startswith(term) or term.startswith(w) for w in name_words if len(w) > 2):
                    score += 3 * idf
                if term in param_words:
                    score += 2 * idf
                if term in desc_words:
                    score += 1.5 * idf
                elif any(w.startswith(term) for w in desc_words if len(term) > 2):
                    score += 0.75 * idf
            if score > 0:
                scored.append((score, t.name))
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [{"name": name, "description": self._tools[name].description} for _, name in scored[:limit]]

    @staticmethod
    def _search_fields(t: Tool) -> tuple[list[str], list[str], list[str]]:
        props = t.input_schema.get("properties", {})
        param_words = [w for p in props for w in _words(p)]
        return _words(t.name), param_words, _words(t.description)

    def describe(self, name: str) -> dict[str, Any]:
        """Name, description, input JSON Schema and a TypeScript signature for one tool.

        Raises:
            ToolError: No such tool (the message names close matches).
        """
        t = self._tools.get(name)
        if t is None:
            raise ToolError(self.unknown_tool_message(name))
        described: dict[str, Any] = {
            "name": t.name,
            "description": t.description,
            "input_schema": t.input_schema,
            "signature": typescript_signature(t),
        }
        if t.output_schema is not None:
            described["output_schema"] = t.output_schema
        return described

    # -- validation and calls -------------------------------------------------------------

    def validate(self, t: Tool, args: Any) -> ArgumentProblem | None:
        """Check arguments against the tool's JSON Schema; None when valid."""
        fast = t.fast_validator
        if fast is not None:
            try:
                if fast.is_valid(args):
                    return None
            except (ValueError, OverflowError):  # e.g. an integer beyond 64 bits: ask jsonschema
                pass
        if t.validator.is_valid(args):
            return None
        error = min(t.validator.iter_errors(args), key=lambda e: (len(e.path), str(e.message)))
        return ArgumentProblem(_json_path(error.absolute_path), error.message)

    def argument_error_message(self, t: Tool, problem: ArgumentProblem) -> str:
        """A model-facing message for invalid arguments."""
        return (
            f"Invalid arguments for {t.name}: at {problem.path}: {problem.message}. "
            f"Expected: {typescript_signature(t)}"
        )

    async def call(self, name: str, args: Any, ctx: ToolContext, *, validated: bool = False) -> ToolResult:
        """Validate and run one tool; every failure the model can cause becomes an error result.

        Args:
            name: Tool name.
            args: JSON arguments (a dict).
            ctx: The call's context.
            validated: Skip validation (the engine validated on the JS thread already).

        Returns:
            The tool's result; ``is_error`` is set for unknown tools, bad arguments, and
            handler failures (the message names what went wrong, never a traceback).
        """
        t = self._tools.get(name)
        if t is None:
            return ToolResult.from_text(self.unknown_tool_message(name), is_error=True)
        if not validated:
            problem = self.validate(t, args)
            if problem is not None:
                return ToolResult.from_text(
                    self.argument_error_message(t, problem),
                    {"error": "invalid_arguments", "path": problem.path, "message": problem.message},
                    is_error=True,
                )
        return await self.invoke(t, args, ctx)

    async def invoke(self, t: Tool, args: Any, ctx: ToolContext) -> ToolResult:
        """Run a tool's handler on already-validated arguments, mapping failures to results."""
        value = await self.invoke_raw(t, args, ctx)
        try:
            return to_tool_result(value)
        except Exception as exc:  # a value pydantic cannot serialise
            return self._failure(t, exc)

    async def invoke_raw(self, t: Tool, args: Any, ctx: ToolContext) -> Any:
        """Like `invoke`, but return what the handler returned as it is (a `ToolResult` or
        plain data; `to_tool_result` makes it a result). Failures are error results."""
        parsed = self._parse(t, args)
        if isinstance(parsed, ToolResult):
            return parsed
        try:
            return await self._run_handler(t, parsed, ctx)
        except Exception as exc:  # a handler bug must not take the host down
            return self._failure(t, exc)

    def invoke_inline(self, t: Tool, args: Any, ctx: ToolContext) -> Any:
        """Run an ``inline`` tool's sync handler on the calling thread (the program's JS thread).

        Returns:
            What the handler returned, as `invoke_raw` does.
        """
        parsed = self._parse(t, args)
        if isinstance(parsed, ToolResult):
            return parsed
        try:
            return t.handler(**t.bind(parsed, ctx))
        except Exception as exc:
            return self._failure(t, exc)

    @staticmethod
    def _parse(t: Tool, args: Any) -> pydantic.BaseModel | ToolResult:
        try:
            return t.input_model.model_validate(args)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            message = f"Invalid arguments for {t.name}: at {_json_path(first['loc'])}: {first['msg']}"
            return ToolResult.from_text(message, {"error": "invalid_arguments"}, is_error=True)

    @staticmethod
    def _failure(t: Tool, exc: Exception) -> ToolResult:
        """The error result for a handler failure; `UserError` (the developer's) is re-raised."""
        if isinstance(exc, ToolError):
            return ToolResult.from_text(f"{t.name}: {exc.message}", exc.data, is_error=True)
        if isinstance(exc, UserError):
            raise exc
        detail = f"{type(exc).__name__}: {exc}"
        return ToolResult.from_text(
            f"{t.name} failed: {detail}", {"error": "handler_failed", "detail": detail}, is_error=True
        )

    async def _run_handler(self, t: Tool, model: pydantic.BaseModel, ctx: ToolContext) -> Any:
        kwargs = t.bind(model, ctx)
        if t.is_async:
            return await t.handler(**kwargs)
        return await anyio.to_thread.run_sync(lambda: t.handler(**kwargs))
