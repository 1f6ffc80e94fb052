"""The one name for a JSON object whose shape codemode does not fix.

`JsonObject` is for values that cross a real JSON boundary and stay JSON: JSON Schema
documents, tool arguments as a model sent them, MCP payloads, a framework's message format.
Everything with a fixed shape has a model or a TypedDict instead; what is only serialised
takes ``Mapping[str, object]``. ``tests/test_typing_rules.py`` counts the uses (and
``dict[str, Any]``) so that the name cannot spread.
"""

from __future__ import annotations

from typing import Any, TypeAlias

__all__ = ["JsonObject"]

JsonObject: TypeAlias = dict[str, Any]
"""A JSON object as parsed (``json.loads``) or about to be dumped, its shape not fixed here."""
