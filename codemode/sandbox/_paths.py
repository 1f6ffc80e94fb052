"""Path policy for tools that touch files: resolve by descriptor, then check the sandbox roots.

A path is resolved with `codemode.sandbox._fs.walk`: component by component, each opened by
descriptor without following symlinks, a symlink's target resolved the same way, so the checks
run on the *real* path (a symlink that points out of the writable roots, a ``..`` escape, or a
final-component symlink whose target lies outside are all refused) and the caller keeps
descriptors that pin what was checked. A path that does not exist yet resolves its deepest
existing parent and appends the rest. The protected directories (the state directory) are
refused by identity (device and inode) as soon as the walk would enter one, and by real path.

`locate_readable` and `locate_writable` return the `Walk` (with its descriptors) for the file
tools; `check_readable`, `check_writable` and `resolve_path` return only the real path.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import NoReturn

from codemode.errors import ErrorCode, SandboxDenied, ToolError
from codemode.sandbox._fs import EnteredProtected, SymlinkLoop, Walk, walk
from codemode.sandbox._policy import SandboxMode, SandboxPolicy

__all__ = ["check_readable", "check_writable", "locate_readable", "locate_writable", "resolve_path"]


def _absolute(workspace: Path, path: str) -> str:
    if not path:
        raise ToolError(
            "path is empty; give a file path (relative to the workspace or absolute)",
            code=ErrorCode.TOOL_FAILED,
        )
    if "\x00" in path:
        raise ToolError(
            f"path {path!r} contains a NUL byte; file paths cannot contain NUL", code=ErrorCode.TOOL_FAILED
        )
    try:
        os.fsencode(path)
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"path {path!r} contains an unpaired surrogate at character {exc.start}; send the path as "
            "complete characters",
            {"path": path.encode("utf-8", "backslashreplace").decode()},
            code=ErrorCode.TOOL_FAILED,
        ) from None
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded):
        return expanded
    return os.path.join(os.path.abspath(os.fspath(workspace)), expanded)


def _walk(workspace: Path, path: str, protected: dict[tuple[int, int], str] | None = None) -> Walk:
    """`walk` with its failures as ToolErrors that name the path."""
    absolute = _absolute(workspace, path)
    try:
        return walk(absolute, protected)
    except SymlinkLoop as exc:
        raise ToolError(
            f"path {path!r} runs into a symlink loop at {exc.at}; fix or remove that symlink",
            {"path": path, "loop_at": exc.at},
            code=ErrorCode.TOOL_FAILED,
        ) from None
    except NotADirectoryError as exc:
        raise ToolError(
            f"path {path!r} goes through {exc.filename}, which is a file, not a directory; check the path.",
            {"path": path, "not_a_directory": exc.filename},
            code=ErrorCode.TOOL_FAILED,
        ) from None
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            what = "permission denied by the file system (not by codemode's sandbox)"
        elif exc.errno == errno.ENAMETOOLONG:
            what = "a name or the whole path is too long"
        else:
            what = exc.strerror or str(exc)
        at = f" at {exc.filename}" if exc.filename else ""
        raise ToolError(
            f"cannot resolve path {path!r}{at}: {what}.",
            {"path": path, "errno": errno.errorcode.get(exc.errno or 0, str(exc.errno)), "error": str(exc)},
            code=ErrorCode.TOOL_FAILED,
        ) from None


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
        ToolError: The path is empty, contains a NUL byte or an unpaired surrogate, runs into
            a symlink loop, or cannot be resolved (a file used as a directory, permissions).
    """
    with _walk(workspace, path) as found:
        return Path(found.path)


def _real_roots(roots: tuple[Path, ...]) -> list[Path]:
    return [Path(os.path.realpath(root)) for root in roots]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _protected(policy: SandboxPolicy) -> tuple[list[Path], dict[tuple[int, int], str]]:
    """The protected directories' real paths, and their identities for the walk."""
    roots = _real_roots(policy.protected)
    identities: dict[tuple[int, int], str] = {}
    for root in roots:
        try:
            st = os.stat(root)
        except OSError:
            continue  # not created yet: the real-path check still covers it
        identities[(st.st_dev, st.st_ino)] = str(root)
    return roots, identities


def _locate(policy: SandboxPolicy, workspace: Path, path: str, verb: str) -> Walk:
    """Walk ``path``, refusing it when it enters or lies in a protected directory."""
    roots, identities = _protected(policy)
    try:
        found = _walk(workspace, path, identities)
    except EnteredProtected as exc:
        _denied_protected(policy, path, Path(exc.at), Path(exc.root), verb)
    real = Path(found.path)
    for root in roots:
        if _inside(real, root):
            found.close()
            _denied_protected(policy, path, real, root, verb)
    return found


def _shown(path: str, real: Path) -> str:
    return f"{path!r}" if str(real) == path else f"{path!r} (resolves to {real})"


def _denied_protected(policy: SandboxPolicy, path: str, real: Path, root: Path, verb: str) -> NoReturn:
    where = "lies in" if _inside(real, root) else "goes through"
    if verb == "reading":
        what = (
            f"it {where} {root}, codemode's state directory (secrets and logs), which no tool may read. "
            "Archived output is read with read_archive."
        )
    else:
        what = (
            f"it {where} {root}, codemode's state directory, which no tool may write in any mode. "
            "Write somewhere else."
        )
    raise SandboxDenied(
        f"sandbox denied {verb} {_shown(path, real)}: {what}",
        {
            "path": path,
            "resolved": str(real),
            "mode": policy.mode.value,
            "reason": "protected",
            "protected": str(root),
        },
    )


def locate_writable(policy: SandboxPolicy, workspace: Path, path: str) -> Walk:
    """Resolve ``path`` by descriptor and check that the policy lets a tool write it.

    In ``workspace-write`` the real path must lie inside one of ``policy.all_writable()``;
    ``full-access`` allows any path; ``read-only`` refuses every write. The protected
    directories (the state directory) are refused in every mode.

    Args:
        policy: The sandbox policy in force.
        workspace: The workspace root relative paths resolve against.
        path: The path as the model gave it.

    Returns:
        The `Walk`: the real path, the descriptor of its deepest existing directory and of the
        target when it exists. The caller closes it, and writes only through its descriptors.

    Raises:
        SandboxDenied: The policy does not allow writing this path.
        ToolError: The path itself is invalid (see `resolve_path`).
    """
    found = _locate(policy, workspace, path, "writing")
    real = Path(found.path)
    if policy.mode is SandboxMode.FULL_ACCESS:
        return found
    roots = _real_roots(policy.all_writable())
    if policy.mode is not SandboxMode.READ_ONLY and any(_inside(real, root) for root in roots):
        return found
    found.close()
    data = {
        "path": path,
        "resolved": str(real),
        "mode": policy.mode.value,
        "writable_roots": [str(root) for root in roots],
    }
    if policy.mode is SandboxMode.READ_ONLY:
        raise SandboxDenied(
            f"sandbox denied writing {_shown(path, real)}: the sandbox mode is read-only, so no file may be "
            "written. Only the user can allow this, by changing the sandbox mode.",
            {**data, "reason": "read-only"},
        )
    listed = ", ".join(str(root) for root in roots) or "none"
    raise SandboxDenied(
        f"sandbox denied writing {_shown(path, real)}: it is outside the writable roots of mode "
        f"{policy.mode.value} ({listed}). Only the user can allow this, by adding a writable root "
        "or changing the sandbox mode.",
        {**data, "reason": "outside-roots"},
    )


def locate_readable(policy: SandboxPolicy, workspace: Path, path: str) -> Walk:
    """Resolve ``path`` by descriptor and check that the policy lets a tool read it.

    Reading is allowed everywhere in every mode except the protected directories (the state
    directory holds secrets and logs), however the path reaches them.

    Args:
        policy: The sandbox policy in force.
        workspace: The workspace root relative paths resolve against.
        path: The path as the model gave it.

    Returns:
        The `Walk`; the caller closes it and reads only through its descriptors.

    Raises:
        SandboxDenied: The path lies in (or goes through) a protected directory.
        ToolError: The path itself is invalid (see `resolve_path`).
    """
    return _locate(policy, workspace, path, "reading")


def check_writable(policy: SandboxPolicy, workspace: Path, path: str) -> Path:
    """The real path `locate_writable` checks, without descriptors (for messages and tests).

    Raises:
        SandboxDenied: The policy does not allow writing this path.
        ToolError: The path itself is invalid (see `resolve_path`).
    """
    with locate_writable(policy, workspace, path) as found:
        return Path(found.path)


def check_readable(policy: SandboxPolicy, workspace: Path, path: str) -> Path:
    """The real path `locate_readable` checks, without descriptors (for messages and tests).

    Raises:
        SandboxDenied: The path lies in a protected directory.
        ToolError: The path itself is invalid (see `resolve_path`).
    """
    with locate_readable(policy, workspace, path) as found:
        return Path(found.path)
