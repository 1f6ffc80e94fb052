"""What a client lists: which tools (the surface), under which names, with which schemas.

Every front (the MCP server, the adapters) lists through here, so they agree:

- ``code``: ``run_code`` alone; programs still reach every tool.
- ``default``: ``run_code`` plus the direct tools a client needs without writing a program:
  run a command, read, edit and write a file, and read back what a cut result archived (its
  recovery line names ``read_archive``).
- ``all``: ``run_code`` plus every registered tool, mounted servers' included.

Names: model APIs (OpenAI, Anthropic) take ``^[a-zA-Z0-9_-]{1,64}$``. A tool's name that
matches stays; another (``everything.echo``) has each ``.`` replaced by ``__`` and any other
character by ``_``; one that is still too long, or collides with another listed name, is cut to
57 characters and gets ``_`` plus 6 hex digits of the SHA-256 of its real name. The result
depends only on the set of names, so it is the same across calls and restarts. Inside programs
the real names stay (``tools.everything.echo``).

Output schemas: off by default. Model APIs take a tool's name, description and input schema
only, so a client forwarding MCP tools to a model drops ``outputSchema``; what it costs is the
clients that put the whole ``tools/list`` in the prompt, and the SDK clients that validate every
result against it. On, each is its top level only (property names and JSON types, no
descriptions): a result that matches the full schema matches it, at a tenth of the size.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from codemode._json import JsonObject
from codemode.errors import UserError
from codemode.tools import Tool

__all__ = [
    "DEFAULT_DIRECT_TOOLS",
    "NAME_PATTERN",
    "SURFACES",
    "Listed",
    "SurfaceName",
    "check_surface",
    "listed_names",
    "listed_tools",
    "shallow_output_schema",
]

SurfaceName = Literal["code", "default", "all"]
SURFACES: tuple[str, ...] = get_args(SurfaceName)

# The direct tools of the default surface, in the order they are listed.
DEFAULT_DIRECT_TOOLS: tuple[str, ...] = ("bash", "read_file", "edit_file", "write_file", "read_archive")

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_MAX_NAME = 64
_HASH_DIGITS = 6


def check_surface(value: str) -> SurfaceName:
    """``value`` as a surface name.

    Raises:
        UserError: Not one of code, default, all.
    """
    if value not in SURFACES:
        raise UserError(f"unknown tool surface {value!r}: use one of {', '.join(SURFACES)}")
    return value  # type: ignore[return-value]  # checked just above


def listed_names(names: Iterable[str]) -> dict[str, str]:
    """Each real name's listed name (see the module's docstring); reserved: ``run_code``."""
    real = sorted(set(names))
    valid = {name for name in real if NAME_PATTERN.match(name)}
    taken = set(valid) | {"run_code"}
    candidates = {name: _sanitized(name) for name in real if name not in valid}
    counts: dict[str, int] = {}
    for candidate in candidates.values():
        counts[candidate] = counts.get(candidate, 0) + 1
    listed = {name: name for name in valid}
    for name, candidate in candidates.items():
        if len(candidate) > _MAX_NAME or candidate in taken or counts[candidate] > 1:
            digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_DIGITS]
            candidate = f"{candidate[: _MAX_NAME - _HASH_DIGITS - 1]}_{digest}"
        listed[name] = candidate
    return listed


def _sanitized(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name.replace(".", "__")) or "_"


@dataclass(frozen=True)
class Listed:
    """One direct tool as listed: its listed name and the tool behind it."""

    name: str
    tool: Tool


def listed_tools(tools: Iterable[Tool], surface: SurfaceName) -> list[Listed]:
    """The direct tools ``surface`` lists besides ``run_code``, in a stable order: the default
    surface's in `DEFAULT_DIRECT_TOOLS` order, every other by listed name."""
    if surface == "code":
        return []
    every = list(tools)
    names = listed_names(t.name for t in every)
    if surface == "default":
        by_name = {t.name: t for t in every}
        return [Listed(names[n], by_name[n]) for n in DEFAULT_DIRECT_TOOLS if n in by_name]
    rank = {name: i for i, name in enumerate(DEFAULT_DIRECT_TOOLS)}
    ordered = sorted(every, key=lambda t: (rank.get(t.name, len(rank)), names[t.name]))
    return [Listed(names[t.name], t) for t in ordered]


def shallow_output_schema(schema: JsonObject) -> JsonObject:
    """An object schema's top level: its properties' JSON types, what every branch requires; a
    union of objects merged. Looser than ``schema``, so whatever matches ``schema`` matches it."""
    defs = schema.get("$defs", {})
    branches = _object_branches(schema, defs)
    properties: dict[str, set[str] | None] = {}
    for branch in branches:
        for name, prop in branch.get("properties", {}).items():
            kinds = _json_types(prop, defs)
            known = properties.get(name, set()) if name in properties else set()
            properties[name] = None if kinds is None or known is None else known | kinds
    required = set.intersection(*(set(b.get("required", ())) for b in branches)) if branches else set()
    shallow: dict[str, object] = {
        "type": "object",
        "properties": {name: _type_schema(kinds) for name, kinds in properties.items()},
    }
    if required:
        shallow["required"] = sorted(required)
    return shallow


def _object_branches(schema: JsonObject, defs: Mapping[str, object]) -> list[JsonObject]:
    schema = _resolve(schema, defs)
    options = schema.get("anyOf") or schema.get("oneOf")
    if options and "properties" not in schema:
        return [b for option in options for b in _object_branches(option, defs)]
    return [schema] if schema.get("type") == "object" or "properties" in schema else []


def _json_types(schema: Any, defs: Mapping[str, object]) -> set[str] | None:
    """The JSON types a property may take; None when any."""
    if not isinstance(schema, dict):
        return None
    schema = _resolve(schema, defs)
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {str(k) for k in kind}
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        found: set[str] = set()
        for option in options:
            kinds = _json_types(option, defs)
            if kinds is None:
                return None
            found |= kinds
        return found
    if "const" in schema or "enum" in schema:
        values = schema.get("enum", [schema.get("const")])
        return {_type_of(value) for value in values}
    if "properties" in schema:
        return {"object"}
    return None


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _type_schema(kinds: set[str] | None) -> dict[str, str | list[str]]:
    if kinds is None:
        return {}
    if "number" in kinds:
        kinds = kinds - {"integer"}
    ordered = sorted(kinds)
    return {"type": ordered[0] if len(ordered) == 1 else ordered}


def _resolve(schema: JsonObject, defs: Mapping[str, object]) -> JsonObject:
    for _ in range(8):
        ref = schema.get("$ref")
        if not (isinstance(ref, str) and ref.startswith("#/$defs/")):
            break
        target = defs.get(ref[8:])
        if not isinstance(target, dict):
            break
        schema = target
    return schema
