"""Reading a model API's message parts whether they are dicts or its SDK's objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["field"]


def field(item: Any, name: str, default: Any = None) -> Any:
    """``item[name]`` for a mapping, ``item.name`` for an SDK object; ``default`` when absent."""
    if isinstance(item, Mapping):
        return item.get(name, default)
    return getattr(item, name, default)
