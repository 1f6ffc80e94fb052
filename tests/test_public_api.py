"""The public surface is exactly what codemode.__all__ names (like httpx's test of its API)."""

from __future__ import annotations

import codemode

PUBLIC = {
    "ApprovalRequest",
    "CallResult",
    "CodemodeError",
    "Decision",
    "Extension",
    "Host",
    "HostConfig",
    "HostFault",
    "Notification",
    "ProcessNotFound",
    "Progress",
    "RunError",
    "RunResult",
    "SandboxDenied",
    "SandboxMode",
    "SandboxPolicy",
    "SandboxUnavailable",
    "StateDirError",
    "TextContent",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "UnknownRefError",
    "Usage",
    "UserError",
    "__version__",
    "make_tool",
    "run_code",
    "tool",
}


def test_all_is_the_public_api() -> None:
    assert set(codemode.__all__) == PUBLIC
    assert sorted(codemode.__all__) == list(codemode.__all__)  # kept sorted, one per line


def test_every_public_name_is_importable_and_documented() -> None:
    for name in codemode.__all__:
        value = getattr(codemode, name)
        if name != "__version__":
            assert (value.__doc__ or "").strip(), f"codemode.{name} has no docstring"


def test_nothing_else_public_leaks_from_the_package() -> None:
    leaked = {
        name
        for name in vars(codemode)
        if not name.startswith("_") and name not in codemode.__all__ and not _is_submodule(name)
    }
    assert leaked == set()


def _is_submodule(name: str) -> bool:
    import types

    return isinstance(getattr(codemode, name), types.ModuleType)
