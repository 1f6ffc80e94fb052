"""Path policy for tools that touch files: resolve to the real path, then check the sandbox roots.

Every check runs on the *real* path (symlinks and ``..`` resolved), so a symlink that points out
of the writable roots, a ``..`` escape, or a final-component symlink whose target lies outside
are all refused. A path that does not exist yet resolves its deepest existing parent and appends
the rest.
"""

from __future__ import annotations

import os
from pathlib import Path

from codemode.errors import SandboxDenied, ToolError
from codemode.sandbox._policy import SandboxMode, SandboxPolicy

__all__ = ["check_readable", "check_writable", "resolve_path"]


def resolve_path(workspace: Path, path: str) -> Path:
    """Return the real absolute path that ``path`` names.

    ``~`` is expanded; a relative path is taken relative to ``workspace``. Symlinks and ``..``
    are resolved; for a path that does not exist yet the deepest existing parent is resolved
    and the rest appended.

    Args:
        workspace: The workspace root relative paths resolve against.
        path: The path as the model gave it.

    Returns:
        The resolved absolute path.

    Raises:
        ToolError: The path is empty, contains a NUL byte or an unpaired surrogate, or runs into
            a symlink loop.
    """
    if not path:
        raise ToolError("path is empty; give a file path (relative to the workspace or absolute)")
    if "\x00" in path:
        raise ToolError(f"path {path!r} contains a NUL byte; file paths cannot contain NUL")
    try:
        os.fsencode(path)
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"path {path!r} contains an unpaired surrogate at character {exc.start}; send the path as "
            "complete characters",
            {"path": path.encode("utf-8", "backslashreplace").decode()},
        ) from None
    expanded = os.path.expanduser(path)
    joined = expanded if os.path.isabs(expanded) else os.path.join(os.fspath(workspace), expanded)
    real = os.path.realpath(joined)
    # Non-strict realpath leaves a component unresolved only when it meets a symlink loop.
    probe = real
    while True:
        if os.path.islink(probe):
            raise ToolError(
                f"path {path!r} runs into a symlink loop at {probe}; fix or remove that symlink",
                {"path": path, "loop_at": probe},
            )
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return Path(real)


def _real_roots(roots: tuple[Path, ...]) -> list[Path]:
    return [Path(os.path.realpath(root)) for root in roots]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _protected_root(policy: SandboxPolicy, real: Path) -> Path | None:
    for root in _real_roots(policy.protected):
        if _inside(real, root):
            return root
    return None


def check_writable(policy: SandboxPolicy, workspace: Path, path: str) -> Path:
    """Resolve ``path`` and check that the policy lets a tool write it.

    In ``workspace-write`` the real path must lie inside one of ``policy.all_writable()``;
    ``full-access`` allows any path; ``read-only`` refuses every write. The protected
    directories (the state directory) are refused in every mode.

    Args:
        policy: The sandbox policy in force.
        workspace: The workspace root relative paths resolve against.
        path: The path as the model gave it.

    Returns:
        The resolved real path to write.

    Raises:
        SandboxDenied: The policy does not allow writing this path.
        ToolError: The path itself is invalid (see `resolve_path`).
    """
    real = resolve_path(workspace, path)
    roots = _real_roots(policy.all_writable())
    data = {
        "path": path,
        "resolved": str(real),
        "mode": policy.mode.value,
        "writable_roots": [str(root) for root in roots],
    }
    shown = f"{path!r}" if str(real) == path else f"{path!r} (resolves to {real})"
    protected = _protected_root(policy, real)
    if protected is not None:
        raise SandboxDenied(
            f"sandbox denied writing {shown}: it lies in {protected}, codemode's state directory, "
            "which no tool may write in any mode. Write somewhere else.",
            {**data, "reason": "protected", "protected": str(protected)},
        )
    if policy.mode is SandboxMode.FULL_ACCESS:
        return real
    if policy.mode is SandboxMode.READ_ONLY:
        raise SandboxDenied(
            f"sandbox denied writing {shown}: the sandbox mode is read-only, so no file may be "
            "written. Only the user can allow this, by changing the sandbox mode.",
            {**data, "reason": "read-only"},
        )
    if any(_inside(real, root) for root in roots):
        return real
    listed = ", ".join(str(root) for root in roots) or "none"
    raise SandboxDenied(
        f"sandbox denied writing {shown}: it is outside the writable roots of mode "
        f"{policy.mode.value} ({listed}). Only the user can allow this, by adding a writable root "
        "or changing the sandbox mode.",
        {**data, "reason": "outside-roots"},
    )


def check_readable(policy: SandboxPolicy, workspace: Path, path: str) -> Path:
    """Resolve ``path`` and check that the policy lets a tool read it.

    Reading is allowed everywhere in every mode except the protected directories (the state
    directory holds secrets and logs).

    Args:
        policy: The sandbox policy in force.
        workspace: The workspace root relative paths resolve against.
        path: The path as the model gave it.

    Returns:
        The resolved real path to read.

    Raises:
        SandboxDenied: The path lies in a protected directory.
        ToolError: The path itself is invalid (see `resolve_path`).
    """
    real = resolve_path(workspace, path)
    protected = _protected_root(policy, real)
    if protected is not None:
        shown = f"{path!r}" if str(real) == path else f"{path!r} (resolves to {real})"
        raise SandboxDenied(
            f"sandbox denied reading {shown}: it lies in {protected}, codemode's state directory "
            "(secrets and logs), which no tool may read. Archived output is read with read_archive.",
            {
                "path": path,
                "resolved": str(real),
                "mode": policy.mode.value,
                "reason": "protected",
                "protected": str(protected),
            },
        )
    return real
