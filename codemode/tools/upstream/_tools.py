"""Upstream tools as codemode `Tool`s: JSON Schema arguments, declared or observed results."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import jsonschema.exceptions  # type: ignore[import-untyped]
import pydantic
from mcp import types

from codemode.tools._model import Tool, ToolContext, ToolResult

__all__ = ["UpstreamArguments", "UpstreamTool", "make_upstream_tool"]


class UpstreamArguments(pydantic.BaseModel):
    """The arguments of an upstream call, checked against the tool's ``inputSchema``."""

    values: dict[str, object]


Call = Callable[[UpstreamArguments, ToolContext], Awaitable[ToolResult]]


@dataclass
class UpstreamTool(Tool):
    """A tool of an upstream MCP server (its arguments are the server's JSON Schema).

    Attributes:
        upstream_schema: The server's ``inputSchema``.
    """

    upstream_schema: dict[str, Any] = field(default_factory=dict)
    _validator: Any = field(default=None, init=False, repr=False, compare=False)
    _absent_if_null: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        schema = self.upstream_schema
        try:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            self._validator = cls(schema)
        except jsonschema.exceptions.SchemaError:
            self._validator = None  # a schema the validator cannot use: the server checks
        required = set(schema.get("required", ()))
        self._absent_if_null = frozenset(
            name
            for name, sub in schema.get("properties", {}).items()
            if name not in required and not _takes_null(sub)
        )

    @functools.cached_property
    def input_schema(self) -> dict[str, Any]:
        """The server's ``inputSchema``."""
        return self.upstream_schema

    def parse(self, args: Any) -> pydantic.BaseModel:
        """Check JSON arguments against the ``inputSchema`` (null for an optional argument that
        takes no null: absent).

        Raises:
            ToolError: Code ``invalid_arguments``, naming the JSON path and the problem.
        """
        if isinstance(args, dict) and self._absent_if_null:
            args = {k: v for k, v in args.items() if v is not None or k not in self._absent_if_null}
        if not isinstance(args, dict):
            problem, path = "Input should be an object", "$"
        elif self._validator is None:
            return UpstreamArguments.model_construct(values=args)
        else:
            error = jsonschema.exceptions.best_match(self._validator.iter_errors(args))
            if error is None:
                return UpstreamArguments.model_construct(values=args)
            path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            problem = error.message if len(error.message) <= 200 else error.message[:197] + "..."
        raise self.invalid_arguments(path, problem)


def _takes_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return True
    kind = schema.get("type")
    if kind is None and not any(k in schema for k in ("anyOf", "oneOf", "const", "enum")):
        return True
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_takes_null(s) for key in ("anyOf", "oneOf") for s in schema.get(key, ()))


def make_upstream_tool(
    name: str,
    server: str,
    spec: types.Tool,
    call: Call,
    observed: dict[str, object] | None,
) -> UpstreamTool:
    """The codemode tool for one upstream tool (``name``: ``server_ident.tool_ident``)."""
    annotations = spec.annotations
    description = " ".join((spec.description or spec.title or f"{spec.name} (MCP server {server})").split())
    tool = UpstreamTool(
        name=name,
        description=description,
        input_model=UpstreamArguments,
        handler=call,
        title=spec.title or (annotations.title if annotations is not None else None),
        read_only=bool(annotations is not None and annotations.read_only_hint),
        destructive=annotations.destructive_hint if annotations is not None else None,
        context_param="ctx",
        model_param="args",
        is_async=True,
        origin={"server": server, "tool": spec.name},
        upstream_schema=dict(spec.input_schema) if spec.input_schema else {"type": "object"},
    )
    if spec.output_schema is not None:
        tool.output_schema = dict(spec.output_schema)
    elif observed is not None:
        tool.output_schema = observed
        tool.output_observed = True
    return tool
