"""Packages whose public names load their module at first use (PEP 562).

A part's ``__init__`` lists where each of its names lives; importing the part loads none of
them, and ``from codemode.sandbox import check_policy`` loads only the module that defines
``check_policy``. So a command pays only for what it uses: a cold ``codemode run`` of a
program that runs no command never loads the launch path, the command policy's parser or the
network proxy (``bench/bench_start.py``). The same names are imported under
``TYPE_CHECKING`` for the type checker and listed in ``__all__``;
``tests/test_lazy.py`` checks that the three lists agree and that every name resolves.

The ``__getattr__`` is installed only at run time (``if not TYPE_CHECKING``), so mypy still
refuses a name the package does not export.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, homes: Mapping[str, tuple[str, ...]], modules: Mapping[str, str] | None = None
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose names live in the modules
    ``homes`` maps to them (a module name relative to the package, such as ``"._policy"``, or
    absolute); ``modules`` names modules exported whole (``{"session_holds": "._holds"}``).
    A name once loaded is set on the package, found there from then on."""
    where = {name: module for module, names in homes.items() for name in names}
    whole = dict(modules or {})

    def __getattr__(name: str) -> object:
        value: object
        if name in whole:
            value = importlib.import_module(whole[name], package)
        elif name in where:
            value = getattr(importlib.import_module(where[name], package), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where, *whole})

    return __getattr__, __dir__
