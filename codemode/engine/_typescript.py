"""TypeScript in: type syntax blanked to spaces, so every line and column stays the model's.

A program is compiled as JavaScript first; only one QuickJS rejects with a SyntaxError is
parsed here (tree-sitter's TypeScript grammar), so plain JavaScript pays nothing. What is only
types (annotations, interfaces, type aliases, generics, ``as``/``satisfies``, ``!``, modifiers)
becomes spaces, newlines kept, as ts-blank-space does. What would need code generated (an
``enum``, a ``namespace``, a constructor parameter property) is an error naming the construct,
its line and what to write instead.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["TypeScriptError", "strip_types"]

# What is only types, as tree-sitter query patterns: @blank is blanked whole, @tail from the
# keyword to the end of its expression (``x as T``), @bang the trailing ``!`` of ``x!``.
_QUERY = """
[(type_annotation) (type_parameters) (type_arguments) (interface_declaration)
 (type_alias_declaration) (ambient_declaration) (function_signature) (abstract_method_signature)
 (index_signature) (implements_clause) (accessibility_modifier) (override_modifier)] @blank
(optional_parameter "?" @blank)
(public_field_definition ["?" "!" "readonly" "abstract"] @blank)
(public_field_definition "declare") @blank
(variable_declarator "!" @blank)
(abstract_class_declaration "abstract" @blank)
(method_definition "?" @blank)
(as_expression "as" @tail)
(satisfies_expression "satisfies" @tail)
(non_null_expression "!" @blank)
(enum_declaration) @enum
(internal_module) @namespace
(module) @module
(import_alias) @import_alias
(required_parameter [(accessibility_modifier) "readonly"]) @parameter_property
(optional_parameter [(accessibility_modifier) "readonly"]) @parameter_property
"""
# Constructs that need code generated: (what, what to write instead).
_UNSUPPORTED: dict[str, tuple[str, str]] = {
    "enum": ("an enum", "use a plain object, e.g. const Color = {Red: 0, Green: 1}"),
    "namespace": ("a namespace", "use a plain object or separate functions"),
    "module": ("a module declaration", "use a plain object or separate functions"),
    "import_alias": ("import x = ...", "programs have no modules: use the tools object"),
    "parameter_property": (
        "a constructor parameter property",
        "declare the field in the class and assign it in the constructor (this.x = x)",
    ),
}


class TypeScriptError(ValueError):
    """TypeScript that cannot be stripped to JavaScript; the message names the construct.

    Attributes:
        line: 1-based line of the construct.
        column: 1-based column of the construct.
    """

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


@functools.cache
def _parser() -> tuple[Any, Any]:
    import tree_sitter
    import tree_sitter_typescript

    language = tree_sitter.Language(tree_sitter_typescript.language_typescript())
    return tree_sitter.Parser(language), tree_sitter.QueryCursor(tree_sitter.Query(language, _QUERY))


def _refuse(node: Any, kind: str, source: bytes) -> TypeScriptError:
    what, instead = _UNSUPPORTED[kind]
    line_start = node.start_byte - node.start_point[1]
    column = len(source[line_start : node.start_byte].decode("utf-8", "replace")) + 1
    return TypeScriptError(
        f"TypeScript {what} cannot be run as JavaScript (types are stripped, nothing is generated); {instead}",
        node.start_point[0] + 1,
        column,
    )


def _blank(source: bytes, ranges: list[tuple[int, int]]) -> str:
    """``source`` with each range replaced by one space per character (line breaks kept)."""
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    parts: list[str] = []
    at = 0
    for start, end in merged:
        parts.append(source[at:start].decode("utf-8"))
        piece = source[start:end].decode("utf-8")
        parts.append("".join(ch if ch in "\r\n\u2028\u2029" else " " for ch in piece))
        at = end
    parts.append(source[at:].decode("utf-8"))
    return "".join(parts)


def strip_types(source: str) -> str | None:
    """The program with its TypeScript type syntax blanked, or None when it has none.

    Raises:
        TypeScriptError: A construct that needs code generated (enum, namespace, parameter
            property, ``import x =``); the message says what to write instead.
    """
    data = source.encode("utf-8")
    parser, query = _parser()
    captures: dict[str, list[Any]] = query.captures(parser.parse(data).root_node)
    refused = [(node.start_byte, kind, node) for kind in _UNSUPPORTED for node in captures.get(kind, ())]
    if refused:
        _, kind, node = min(refused, key=lambda item: item[0])
        raise _refuse(node, kind, data)
    ranges = [(node.start_byte, node.end_byte) for node in captures.get("blank", ())]
    ranges += [(node.start_byte, node.parent.end_byte) for node in captures.get("tail", ())]
    if not ranges:
        return None
    return _blank(data, ranges)
