"""JavaScript names for upstream servers and tools: valid identifiers, collisions resolved.

A name keeps its letters, digits and ``_``; every other character becomes ``_``, a leading
digit gets a ``_`` in front, and an empty result is ``tool`` (or ``server``). When two names
come out the same, the one whose original sorts first keeps it and the others get ``_2``,
``_3``, ... in that order, so the result never depends on the order a server lists its tools.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

__all__ = ["identifier", "unique_identifiers"]

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def identifier(name: str, empty: str = "tool") -> str:
    """``name`` as a JavaScript identifier (ASCII letters, digits, ``_``)."""
    ident = _NOT_IDENT.sub("_", name)
    if not ident:
        return empty
    return f"_{ident}" if ident[0].isdigit() else ident


def unique_identifiers(
    names: Iterable[str], *, taken: Collection[str] = (), suffix: str = "", empty: str = "tool"
) -> dict[str, str]:
    """Map each original name to a distinct identifier, deterministically.

    Args:
        names: The original names (each once).
        taken: Identifiers already in use elsewhere: a name that would take one gets
            ``suffix`` (then a number if that is taken too).
        suffix: What a name that collides with ``taken`` gets appended first (e.g. ``_mcp``).
        empty: The identifier of a name with no usable character.
    """
    result: dict[str, str] = {}
    used = set(taken)
    for name in sorted(set(names)):
        base = identifier(name, empty)
        if base in used and suffix:
            base = f"{base}{suffix}"
        candidate, n = base, 1
        while candidate in used:
            n += 1
            candidate = f"{base}_{n}"
        used.add(candidate)
        result[name] = candidate
    return result
