"""TypeScript-style signatures from JSON Schema, for models to copy."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from codemode._json import JsonObject

if TYPE_CHECKING:
    from codemode.tools._model import Tool

_MAX_DEPTH = 8  # nested objects and arrays rendered before "any"


def schema_to_ts(
    schema: Any, defs: Mapping[str, object] | None = None, depth: int = 0, refs: tuple[str, ...] = ()
) -> str:
    """Render a JSON Schema as a TypeScript type expression.

    A ``$ref`` already being expanded (a recursive type) renders as its definition's name.
    """
    if not isinstance(schema, dict):
        return "any"
    defs = defs if defs is not None else schema.get("$defs", {})
    if depth > _MAX_DEPTH:
        return "any"
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        target = defs.get(name)
        if target is None:
            return "any"
        if name in refs:
            return name if name.isidentifier() else "any"
        return schema_to_ts(target, defs, depth, (*refs, name))
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    if "enum" in schema:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts: list[str] = []
            for sub in schema[key]:
                rendered = schema_to_ts(sub, defs, depth, refs)
                if rendered not in parts:
                    parts.append(rendered)
            return " | ".join(parts) if parts else "any"
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return schema_to_ts(schema["allOf"][0], defs, depth, refs)
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(schema_to_ts({**schema, "type": k}, defs, depth, refs) for k in kind)
    if kind == "string":
        return "string"
    if kind in ("integer", "number"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "null":
        return "null"
    if kind == "array":
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and prefix and schema.get("maxItems") == len(prefix):
            return "[" + ", ".join(schema_to_ts(sub, defs, depth + 1, refs) for sub in prefix) + "]"
        item = schema_to_ts(schema.get("items", {}), defs, depth + 1, refs)
        return f"({item})[]" if "|" in item else f"{item}[]"
    if kind == "object" or "properties" in schema:
        return _object_to_ts(schema, defs, depth, refs)
    return "any"


def _object_to_ts(schema: JsonObject, defs: Mapping[str, object], depth: int, refs: tuple[str, ...]) -> str:
    props: Mapping[str, object] = schema.get("properties", {})
    if not props:
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return f"Record<string, {schema_to_ts(extra, defs, depth + 1, refs)}>"
        if extra is False:
            return "{}"
        return "Record<string, any>"
    required = set(schema.get("required", []))
    fields = []
    for name, sub in props.items():
        optional = "" if name in required else "?"
        key = name if name.isidentifier() else json.dumps(name)
        rendered = schema_to_ts(sub, defs, depth + 1, refs)
        comment = _field_comment(sub)
        fields.append(f"{key}{optional}: {rendered}{comment}")
    return "{ " + "; ".join(fields) + " }"


def _field_comment(sub: Any) -> str:
    if not isinstance(sub, dict):
        return ""
    notes = []
    if "default" in sub and sub["default"] is not None and [sub["default"]] != _only_value(sub):
        notes.append(f"default {json.dumps(sub['default'], ensure_ascii=False)}")
    for key, label in (("minimum", ">="), ("maximum", "<=")):
        if key in sub:
            notes.append(f"{label} {sub[key]}")
    if sub.get("description"):
        notes.append(" ".join(str(sub["description"]).split()))
    # A "*/" inside a note would end the comment early and garble the signature.
    return f" /* {'; '.join(notes).replace('*/', '* /')} */" if notes else ""


def _only_value(sub: Mapping[str, object]) -> list[object] | None:
    """The one value a schema allows (a const or a one-value enum), else None: its default goes
    without saying."""
    if "const" in sub:
        return [sub["const"]]
    enum = sub.get("enum")
    return enum if isinstance(enum, list) and len(enum) == 1 else None


def _takes_no_args(schema: Any, defs: Mapping[str, object], refs: tuple[str, ...] = ()) -> bool:
    """Whether ``{}`` fits an arguments schema: an object with nothing required, or a union
    with such an object among its options."""
    if not isinstance(schema, dict):
        return True
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return name not in refs and _takes_no_args(defs.get(name), defs, (*refs, name))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return any(_takes_no_args(sub, defs, refs) for sub in schema[key])
    return not schema.get("required")


def typescript_signature(t: Tool, *, with_result: bool = True) -> str:
    """One line a model can copy: ``tools.name(args: {...}): Promise<...>``.

    The result type is the tool's output schema, ``void`` for a tool that returns nothing,
    ``any`` where the result has no known shape. ``with_result=False`` leaves the
    ``: Promise<...>`` part out (the arguments are all an argument error needs to show).
    """
    schema = t.input_schema
    args = schema_to_ts(schema)
    optional_args = "?" if _takes_no_args(schema, schema.get("$defs", {})) else ""
    call = f"tools.{t.name}(args{optional_args}: {args})"
    if not with_result:
        return call
    if t.output_schema is not None:
        returns = schema_to_ts(t.output_schema)
        if t.output_observed:
            returns += " /* observed from a call, not declared */"
    else:
        returns = "void" if t.result_type is type(None) else "any"
    return f"{call}: Promise<{returns}>"
