"""The environment, working directory and workspace revision of a command."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codemode.errors import ToolError
from codemode.sandbox import SandboxPolicy
from codemode.tools._bash._proctree import MARKER_VAR

# Nothing may wait for a person: no pager, no credential prompt, no editor.
_NON_INTERACTIVE = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
    "GCM_INTERACTIVE": "never",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
}
_REMOVED = ("GOROOT",)


def command_env(
    base: Mapping[str, str],
    marker: str,
    extra: Mapping[str, str],
    *,
    term: str,
) -> dict[str, str]:
    """The environment a command runs with.

    Args:
        base: The host's environment.
        marker: This command's process id, put in ``CODEMODE_PROCESS_ID`` so its
            descendants can be found even when they leave the process group.
        extra: Variables from the sandbox confinement (``TMPDIR``).
        term: ``TERM`` for the command (``dumb`` for pipes, a real terminal for a PTY).
    """
    env = {k: v for k, v in base.items() if k not in _REMOVED}
    env.update(_NON_INTERACTIVE)
    env["TERM"] = term
    env.update(extra)
    env[MARKER_VAR] = marker
    return env


def resolve_cwd(cwd: str | None, workspace: Path, policy: SandboxPolicy) -> Path:
    """Resolve a command's working directory against the workspace.

    Raises:
        ToolError: The directory does not exist, is not a directory, or is not readable.
    """
    if cwd is None or cwd == "":
        target = workspace
    else:
        target = Path(cwd).expanduser()
        if not target.is_absolute():
            target = workspace / target
    try:
        resolved = Path(os.path.realpath(target, strict=True))
        mode = os.stat(resolved).st_mode
    except (OSError, RuntimeError, ValueError) as exc:
        raise ToolError(
            f"cwd {cwd!r} does not exist (resolved against the workspace {str(workspace)!r}); "
            "pass an existing directory or leave cwd out to use the workspace root",
            {"error": "bad_cwd", "cwd": cwd},
        ) from exc
    if not stat.S_ISDIR(mode):
        raise ToolError(
            f"cwd {cwd!r} is not a directory; pass a directory or leave cwd out",
            {"error": "bad_cwd", "cwd": cwd},
        )
    if not os.access(resolved, os.R_OK | os.X_OK):
        raise ToolError(
            f"cwd {cwd!r} is not accessible (no read/search permission); pick another directory",
            {"error": "bad_cwd", "cwd": cwd},
        )
    for protected in policy.protected:
        if resolved == protected or protected in resolved.parents:
            raise ToolError(
                f"cwd {cwd!r} lies in the host's state directory, which commands may not use",
                {"error": "bad_cwd", "cwd": cwd},
            )
    return resolved


def _find_git_dir(cwd: Path) -> tuple[Path, Path] | None:
    """(work tree root, git dir) for the tree containing ``cwd``, or None (plain stat calls)."""
    directory = str(cwd)
    while True:
        dot_git = os.path.join(directory, ".git")
        try:
            mode = os.stat(dot_git).st_mode
        except OSError:
            mode = 0
        if stat.S_ISDIR(mode):
            return Path(directory), Path(dot_git)
        if stat.S_ISREG(mode):
            try:
                with open(dot_git, encoding="utf-8", errors="replace") as f:
                    text = f.read().strip()
            except OSError:
                return None
            if text.startswith("gitdir:"):
                git_dir = Path(text[len("gitdir:") :].strip())
                root = Path(directory)
                return root, git_dir if git_dir.is_absolute() else (root / git_dir).resolve()
            return None
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _read_ref(git_dir: Path, ref: str) -> str | None:
    common = git_dir
    commondir = git_dir / "commondir"
    if commondir.is_file():
        try:
            common = (git_dir / commondir.read_text().strip()).resolve()
        except OSError:
            return None
    for base in (git_dir, common):
        try:
            return (base / ref).read_text().strip() or None
        except OSError:
            continue
    try:
        with open(common / "packed-refs", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        return None
    return None


def workspace_revision(cwd: Path, *, check_dirty: bool) -> dict[str, Any] | None:
    """Git HEAD (and, when asked, a dirty marker) of the work tree containing ``cwd``.

    HEAD is read from the files in ``.git`` (no process). The dirty check runs
    ``git status --porcelain --untracked-files=no`` (about 2 ms), so callers ask for it only
    where that cost is small next to the command's own. Returns None outside a git work tree.
    """
    found = _find_git_dir(cwd)
    if found is None:
        return None
    root, git_dir = found
    try:
        head = (git_dir / "HEAD").read_text().strip()
    except OSError:
        return None
    ref: str | None = None
    commit: str | None
    if head.startswith("ref:"):
        ref = head[4:].strip()
        commit = _read_ref(git_dir, ref)
    else:
        commit = head or None
    dirty: bool | None = None
    if check_dirty:
        try:
            status = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=root,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=5,
                env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
            )
            if status.returncode == 0:
                dirty = bool(status.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            dirty = None
    return {"root": str(root), "head": commit, "ref": ref, "dirty": dirty}
