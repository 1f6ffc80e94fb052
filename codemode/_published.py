"""What every front publishes to a model: ``run_code``'s input schema, and a tool's input
schema as one object (several model APIs refuse a ``oneOf``/``anyOf`` at its top)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codemode._ids import ID_MAX_CHARS
from codemode._json import JsonObject

__all__ = ["RUN_CODE_SCHEMA", "flat_input_schema"]

RUN_CODE_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "The JavaScript program. Optional first line: "
            '// @run_code: {"max_output_tokens": N, "timeout_seconds": N}',
        },
        "call_id": {
            "type": "string",
            "description": f"Optional id (1 to {ID_MAX_CHARS} characters, no control characters); "
            "calling again with a recorded id returns the recorded result.",
            "minLength": 1,
            "maxLength": ID_MAX_CHARS,
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}


def flat_input_schema(schema: JsonObject) -> JsonObject:
    """``schema`` as one object, for clients whose model APIs refuse a ``oneOf``/``anyOf`` at
    the top of a tool's input schema (several do).

    A union of objects (bash: one object per action) becomes one object with every branch's
    properties (a property in several branches: its first definition, with the enums of
    ``const`` tags merged) and only what every branch requires. The tool itself still checks
    the arguments against the union, so a wrong combination gets its precise message.
    """
    branches = schema.get("oneOf") or schema.get("anyOf")
    if not isinstance(branches, list) or "properties" in schema:
        return schema
    defs = schema.get("$defs", {})
    resolved = [_resolve_ref(b, defs) for b in branches]
    if not all(isinstance(b, dict) and b.get("type") == "object" for b in resolved):
        return schema
    properties: dict[str, JsonObject] = {}
    tags: dict[str, list[Any]] = {}
    for branch in resolved:
        for name, prop in branch.get("properties", {}).items():
            if isinstance(prop, dict) and "const" in prop:
                tags.setdefault(name, []).append(prop["const"])
            properties.setdefault(name, prop)
    for name, values in tags.items():
        first = dict(properties[name])
        first.pop("const", None)
        properties[name] = {**first, "enum": list(dict.fromkeys(values))}
    required = set.intersection(*(set(b.get("required", [])) for b in resolved)) if resolved else set()
    flat: dict[str, object] = {"type": "object", "properties": properties}
    if required - set(tags):
        flat["required"] = sorted(required - set(tags))
    # Which fields go with which tag (the union said it; one object has to say it in words).
    by_tag = []
    for branch in resolved:
        tag = next((str(p["const"]) for n, p in branch.get("properties", {}).items() if "const" in p), None)
        fields = [n for n in branch.get("properties", {}) if n not in tags]
        if tag is not None:
            by_tag.append(f"{tag}: {', '.join(fields) or 'no other fields'}")
    words = [schema["description"]] if "description" in schema else []
    if by_tag:
        words.append(f"Fields by {', '.join(tags)}: " + "; ".join(by_tag) + ".")
    if words:
        flat["description"] = " ".join(words)
    used = _referenced(properties, defs)
    if used:  # only what the properties refer to: the branches themselves are said above
        flat["$defs"] = {name: defs[name] for name in defs if name in used}
    return flat


def _referenced(value: Any, defs: Mapping[str, object]) -> set[str]:
    """The names of the ``$defs`` that ``value`` refers to, directly or through other defs."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] not in found:
                found.add(ref[8:])
                stack.append(defs.get(ref[8:]))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _resolve_ref(branch: Any, defs: Mapping[str, object]) -> Any:
    ref = branch.get("$ref") if isinstance(branch, dict) else None
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return defs.get(ref.removeprefix("#/$defs/"), branch)
    return branch
