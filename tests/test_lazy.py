"""Packages whose names load at first use (`codemode._lazy`): for each, the names imported for
the type checker, the run-time table and ``__all__`` are the same names from the same modules;
every name resolves to what its module defines; a name the package does not export raises
AttributeError. (What a cold start leaves unloaded: tests/test_public_api.py.)"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

import codemode
from codemode._lazy import lazy_exports

PACKAGE_ROOT = Path(codemode.__file__).parent


def _lazy_packages() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE_ROOT.rglob("__init__.py")
        if "lazy_exports(" in path.read_text() and path.parent != PACKAGE_ROOT.parent
    )


def _module_name(init: Path) -> str:
    return ".".join(init.parent.relative_to(PACKAGE_ROOT.parent).parts)


def _typed_homes(tree: ast.Module) -> dict[str, str]:
    """name -> absolute module, from the imports under ``if TYPE_CHECKING``."""
    homes: dict[str, str] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test)
            and "not" not in ast.unparse(node.test)
        ):
            for inner in node.body:
                assert isinstance(inner, ast.ImportFrom) and inner.module is not None
                for alias in inner.names:
                    if alias.asname is not None:  # a module exported whole
                        homes[alias.asname] = f"{inner.module}.{alias.name}"
                    else:
                        homes[alias.name] = inner.module
    return homes


@pytest.mark.parametrize("init", _lazy_packages(), ids=lambda p: _module_name(p))
def test_the_three_lists_of_a_lazy_package_agree(init: Path) -> None:
    package = _module_name(init)
    tree = ast.parse(init.read_text())
    typed = _typed_homes(tree)
    module = importlib.import_module(package)
    exported = set(module.__all__) - {"__version__"}
    assert set(typed) == exported, f"{package}: TYPE_CHECKING imports vs __all__: {set(typed) ^ exported}"
    for name, home in typed.items():
        value = getattr(module, name)
        if isinstance(value, type(sys)):  # a module exported whole
            assert value is importlib.import_module(home), (package, name)
        else:
            assert getattr(importlib.import_module(home), name) is value, (
                f"{package}.{name} is not {home}.{name}"
            )
    assert set(dir(module)) >= exported
    with pytest.raises(AttributeError, match="no attribute 'not_exported'"):
        getattr(module, "not_exported")  # noqa: B009 - the point is a dynamic lookup


def test_a_loaded_name_is_kept_on_the_package() -> None:
    fake = type(sys)("fake_lazy_package")
    sys.modules[fake.__name__] = fake
    try:
        getter, lister = lazy_exports(fake.__name__, {"json": ("dumps",)}, {"whole": "json"})
        value = getter("dumps")
        assert value is importlib.import_module("json").dumps and vars(fake)["dumps"] is value
        assert getter("whole") is importlib.import_module("json")
        assert {"dumps", "whole"} <= set(lister())
        with pytest.raises(AttributeError, match="fake_lazy_package"):
            getter("loads")
    finally:
        del sys.modules[fake.__name__]
