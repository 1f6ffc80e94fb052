"""TypeScript-style signatures from JSON Schema, for models to copy."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codemode.tools._model import Tool

_MAX_DEPTH = 6


def schema_to_ts(schema: Any, defs: dict[str, Any] | None = None, depth: int = 0) -> str:
    """Render a JSON Schema as a TypeScript type expression."""
    if not isinstance(schema, dict):
        return "any"
    defs = defs if defs is not None else schema.get("$defs", {})
    if depth > _MAX_DEPTH:
        return "any"
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        target = defs.get(name)
        return schema_to_ts(target, defs, depth + 1) if target is not None else "any"
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    if "enum" in schema:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts: list[str] = []
            for sub in schema[key]:
                rendered = schema_to_ts(sub, defs, depth + 1)
                if rendered not in parts:
                    parts.append(rendered)
            return " | ".join(parts) if parts else "any"
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return schema_to_ts(schema["allOf"][0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(schema_to_ts({**schema, "type": k}, defs, depth + 1) for k in kind)
    if kind == "string":
        return "string"
    if kind in ("integer", "number"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "null":
        return "null"
    if kind == "array":
        item = schema_to_ts(schema.get("items", {}), defs, depth + 1)
        return f"({item})[]" if "|" in item else f"{item}[]"
    if kind == "object" or "properties" in schema:
        return _object_to_ts(schema, defs, depth)
    return "any"


def _object_to_ts(schema: dict[str, Any], defs: dict[str, Any], depth: int) -> str:
    props: dict[str, Any] = schema.get("properties", {})
    if not props:
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return f"Record<string, {schema_to_ts(extra, defs, depth + 1)}>"
        return "Record<string, any>"
    required = set(schema.get("required", []))
    fields = []
    for name, sub in props.items():
        optional = "" if name in required else "?"
        key = name if name.isidentifier() else json.dumps(name)
        rendered = schema_to_ts(sub, defs, depth + 1)
        comment = _field_comment(sub)
        fields.append(f"{key}{optional}: {rendered}{comment}")
    return "{ " + "; ".join(fields) + " }"


def _field_comment(sub: Any) -> str:
    if not isinstance(sub, dict):
        return ""
    notes = []
    if "default" in sub and sub["default"] is not None:
        notes.append(f"default {json.dumps(sub['default'], ensure_ascii=False)}")
    for key, label in (("minimum", ">="), ("maximum", "<=")):
        if key in sub:
            notes.append(f"{label} {sub[key]}")
    if sub.get("description"):
        notes.append(str(sub["description"]))
    return f" /* {'; '.join(notes)} */" if notes else ""


def typescript_signature(t: Tool) -> str:
    """One line a model can copy: ``tools.name(args: {...}): Promise<...>``."""
    args = schema_to_ts(t.input_schema)
    returns = schema_to_ts(t.output_schema) if t.output_schema else "any"
    required = t.input_schema.get("required", [])
    optional_args = "" if required else "?"
    return f"tools.{t.name}(args{optional_args}: {args}): Promise<{returns}>"
