"""The environment, working directory and workspace revision of a command."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import signal
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypedDict

from codemode._host_secrets import without_host_secrets
from codemode.errors import ErrorCode, SandboxUnavailable, ToolError, UserError
from codemode.sandbox import (
    SandboxMode,
    SandboxPolicy,
    UnsafePath,
    anchor,
    cgroup_kill,
    cgroup_remove,
    cgroup_root,
    read_text,
    read_text_at,
)
from codemode.tools.bash._proctree import MARKER_VAR

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

log = logging.getLogger("codemode.tools.bash.env")


def command_env(
    base: Mapping[str, str],
    marker: str,
    *,
    term: str,
) -> dict[str, str]:
    """The environment a command runs with.

    Args:
        base: The host's environment; the host's own secrets (`codemode._host_secrets`: the
            MCP token, database URLs) are left out.
        marker: This command's process id, put in ``CODEMODE_PROCESS_ID`` so its
            descendants can be found even when they leave the process group.
        term: ``TERM`` for the command (``dumb`` for pipes, a real terminal for a PTY).
    """
    env = {k: v for k, v in without_host_secrets(base).items() if k not in _REMOVED}
    env.update(_NON_INTERACTIVE)
    env["TERM"] = term
    env[MARKER_VAR] = marker
    return env


def _real_directory(path: str) -> str:
    """The canonical path of an existing directory (symlinks resolved), in two syscalls: the
    kernel resolves the path once (O_PATH) and /proc names what it found. Anything else
    (not a directory, no /proc) takes ``os.path.realpath``.

    Raises:
        OSError: The path does not exist.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except NotADirectoryError:
        return os.path.realpath(path, strict=True)
    try:
        resolved = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path, strict=True)
    finally:
        os.close(fd)
    return resolved if resolved.startswith("/") else os.path.realpath(path, strict=True)


def resolve_cwd(cwd: str | None, workspace: Path, policy: SandboxPolicy) -> Path:
    """Resolve a command's working directory against the workspace (already resolved).

    Raises:
        ToolError: The directory does not exist, is not a directory, or is not readable.
    """
    if cwd is None or cwd == "":
        # The workspace root: resolved and checked when the host started. Should it have gone
        # since, starting the command fails with a clear error naming it.
        return workspace
    # os.path on strings: this runs before every command, and pathlib costs several times more.
    target = os.path.join(workspace, os.path.expanduser(cwd))
    try:
        resolved = _real_directory(target)
        mode = os.stat(resolved).st_mode
    except (OSError, RuntimeError, ValueError) as exc:
        raise ToolError(
            f"cwd {cwd!r} does not exist (resolved against the workspace {str(workspace)!r}); "
            "pass an existing directory or leave cwd out to use the workspace root",
            {"cwd": cwd},
            code=ErrorCode.BAD_CWD,
        ) from exc
    if not stat.S_ISDIR(mode):
        raise ToolError(
            f"cwd {cwd!r} is not a directory; pass a directory or leave cwd out",
            {"cwd": cwd},
            code=ErrorCode.BAD_CWD,
        )
    if not os.access(resolved, os.R_OK | os.X_OK):
        raise ToolError(
            f"cwd {cwd!r} is not accessible (no read/search permission); pick another directory",
            {"cwd": cwd},
            code=ErrorCode.BAD_CWD,
        )
    for protected in policy.protected:
        root = os.fspath(protected)
        if resolved == root or resolved.startswith(root.rstrip("/") + "/"):
            raise ToolError(
                f"cwd {cwd!r} lies in the host's state directory, which commands may not use",
                {"cwd": cwd},
                code=ErrorCode.BAD_CWD,
            )
    return Path(resolved)


# What the host reads of a repository, all of it written by commands: through safe-open only
# (no symlink followed, regular files only, never blocking, capped), and only values of the
# shape git writes are used: a hostile HEAD never makes the host show or read anything else.
_GIT_FILE_CAP = 4096
_PACKED_REFS_CAP = 8 << 20
_OBJECT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_REF_NAME = re.compile(r"refs/(?:[A-Za-z0-9._+@-]+/)*[A-Za-z0-9._+@-]+")


def _read_git_file(directory: str, name: str, cap: int = _GIT_FILE_CAP) -> str | None:
    """The stripped text of the file ``name`` beneath ``directory``, or None: missing, reached
    through a link, not a regular file (a FIFO is refused, never waited on) or over ``cap``."""
    try:
        return read_text(directory, name, cap=cap).strip()
    except UnsafePath:
        return None


WorkTree = tuple[str, str, bool]


def _dot_git(directory: str) -> tuple[int, str | None] | None:
    """What ``directory/.git`` is, not following a link: (mode, text of a ``.git`` file)."""
    try:
        with anchor(directory) as fd:
            mode = os.stat(".git", dir_fd=fd, follow_symlinks=False).st_mode
            if not stat.S_ISREG(mode):
                return mode, None
            return mode, read_text_at(fd, ".git", cap=_GIT_FILE_CAP).strip()
    except (OSError, UnsafePath):
        return None


def _inside(path: str, root: str | os.PathLike[str]) -> bool:
    base = os.path.realpath(root)
    return path == base or path.startswith(base.rstrip("/") + "/")


def find_work_tree(cwd: Path, within: Sequence[str | os.PathLike[str]] = ()) -> WorkTree | None:
    """(work tree root, git dir, linked work tree) containing ``cwd``, or None.

    ``.git`` is taken as a directory or a ``gitdir:`` file, never through a symlink. A command
    can write the ``.git`` file: the git dir it names is taken only inside the work tree or one
    of ``within`` (the workspace and the other writable roots), never elsewhere on the host.
    """
    directory = str(cwd)
    while True:
        found = _dot_git(directory)
        if found is not None:
            mode, text = found
            if stat.S_ISDIR(mode):
                return directory, os.path.join(directory, ".git"), False
            if not stat.S_ISREG(mode) or text is None or not text.startswith("gitdir:"):
                return None
            git_dir = os.path.realpath(os.path.join(directory, text[len("gitdir:") :].strip()))
            if not any(_inside(git_dir, root) for root in (directory, *within)):
                log.warning("ignoring %s/.git: its gitdir %s is outside the workspace", directory, git_dir)
                return None
            return directory, git_dir, True
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _read_ref(git_dir: str, ref: str, linked: bool) -> str | None:
    if not _REF_NAME.fullmatch(ref) or "/." in ref or ref.endswith(".lock"):
        return None
    common = git_dir
    if linked:  # a linked work tree keeps shared refs in the common dir
        relative = _read_git_file(git_dir, "commondir")
        if relative:
            common = os.path.realpath(os.path.join(git_dir, relative))
            if not _inside(os.path.realpath(git_dir), common):
                common = git_dir  # git's common dir holds its linked work trees' dirs; no other
    for base in (git_dir, common) if common != git_dir else (git_dir,):
        value = _read_git_file(base, ref)
        if value and _OBJECT_ID.fullmatch(value):
            return value
    packed = _read_git_file(common, "packed-refs", _PACKED_REFS_CAP)
    for line in (packed or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref and _OBJECT_ID.fullmatch(parts[0]):
            return parts[0]
    return None


# git reads its configuration from the repository, and configuration can name programs to run
# (core.fsmonitor, hooks, filters, diff drivers, ...). A cloned repository is hostile: the
# host never runs git itself. The dirty check runs through the sandbox's launch path,
# read-only with the network off, with no system or global configuration, the fsmonitor and
# hooks off and no optional locks; what a repository's own filters could still run is confined
# like any command (it can read, and write nothing).
_GIT_STATUS = (
    "git",
    "--no-optional-locks",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.untrackedCache=false",
    "status",
    "--porcelain",
    "--untracked-files=no",
    "--ignore-submodules=all",
)
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "LC_ALL": "C",
}
_GIT_TIMEOUT_SECONDS = 5.0


def _git_cgroup(owner: str) -> str | None:
    """A fresh cgroup for one dirty check under ``owner`` (the host's cgroup owner, so a probe
    a killed host left behind is swept like its commands), or None where cgroups are
    unavailable."""
    root = cgroup_root()
    if root.path is None:
        return None
    try:
        return root.make(owner, f"g{os.getpid()}_{time.monotonic_ns()}")
    except OSError:
        return None


def git_dirty(root: str, policy: SandboxPolicy, *, cgroup_owner: str) -> tuple[bool | None, str | None]:
    """Whether tracked files in the work tree at ``root`` differ from HEAD, asked of git confined.

    The repository is hostile: its configuration can name programs git runs (clean filters,
    whatever their names), so no flag can turn them all off. git therefore never runs on the
    host: it runs through the sandbox's one launch path, read-only with the network off, in a
    cgroup of its own that is killed when git ends or after 5 s, with whatever it started (where
    cgroups are unavailable, like every command there, it is stopped by its process group);
    its output is read to 4 KiB at most.

    Args:
        root: The work tree.
        policy: The session's sandbox policy (made read-only, network off, for git).
        cgroup_owner: The host's cgroup owner on its state directory (``h_<tag>_<host>``, see
            ``_foreground.host_cgroup_owner``): the probe's cgroup goes under it, where the
            next host on that state directory finds it if this host is killed meanwhile.

    Returns:
        ``(dirty, None)``, or ``(None, why)`` when it cannot be known: git missing, failing,
        slower than 5 s, or no confinement available here (then git is not run at all).
    """
    confined = replace(policy, mode=SandboxMode.READ_ONLY, network=False)
    cgroup = _git_cgroup(cgroup_owner)
    try:
        return _run_git_status(root, confined, cgroup)
    finally:
        if cgroup is not None:
            cgroup_kill(cgroup)
            cgroup_remove(cgroup)


def _run_git_status(root: str, confined: SandboxPolicy, cgroup: str | None) -> tuple[bool | None, str | None]:
    from codemode.sandbox import LaunchSpec, launch  # the launch path loads with the first command

    read, write = os.pipe2(os.O_CLOEXEC)
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    env = {k: v for k, v in without_host_secrets(os.environ).items() if not k.startswith("GIT_")}
    env.update(_GIT_ENV)
    try:
        proc = launch(
            LaunchSpec(_GIT_STATUS, root, env, confined, stdio=(devnull, write, devnull), cgroup=cgroup)
        )
    except (SandboxUnavailable, UserError, OSError) as exc:
        os.close(read)
        return None, f"git status could not be started confined: {exc}"
    finally:
        os.close(write)
        os.close(devnull)
    out = bytearray()
    deadline = time.monotonic() + _GIT_TIMEOUT_SECONDS
    timed_out = False
    poller = select.poll()  # not select(): it fails once the host holds more than 1,023 fds
    poller.register(read, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(max(1, int(left * 1000))):
                timed_out = True
                break
            chunk = os.read(read, 65536)
            if not chunk:
                break
            if len(out) < 4096:  # "dirty" needs one line, not all of them
                out += chunk
    finally:
        os.close(read)
    if timed_out:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup_kill(cgroup)
        proc.wait()
        return None, f"git status took over {_GIT_TIMEOUT_SECONDS:.0f} s and was stopped"
    code = proc.wait()
    if code != 0:
        return None, f"git status failed (exit code {code})"
    return bool(out.strip()), None


def current_work_tree(cwd: Path, found: WorkTree | None) -> WorkTree | None:
    """The work tree containing ``cwd`` after a command, from ``found``, looked up as it started.

    A repository the command created in ``cwd`` itself is noticed; one it removed shows when
    `workspace_revision` cannot read its HEAD.
    """
    if found is None and os.path.lexists(os.path.join(cwd, ".git")):
        return find_work_tree(cwd)
    return found


# File times are coarse (the kernel stamps them from a clock that ticks every few ms).
_MTIME_SLACK_SECONDS = 0.05


def git_changed_since(tree: WorkTree, since: float) -> bool:
    """Whether HEAD, HEAD's reflog or the index of ``tree`` was written after ``since`` (a
    ``time.time()``), or just before it: a commit, checkout, add, reset, stash, merge or init.

    Three ``stat`` calls, no process: a cheap sign that a quick command changed the repository.
    Edits of tracked files do not show here.
    """
    git_dir = tree[1]
    for name in ("index", "HEAD", os.path.join("logs", "HEAD")):
        try:
            if (
                os.stat(os.path.join(git_dir, name), follow_symlinks=False).st_mtime
                >= since - _MTIME_SLACK_SECONDS
            ):
                return True
        except OSError:
            continue
    return False


class RevisionData(TypedDict):
    """A work tree's git revision (`_results.WorkspaceRevision`)."""

    root: str
    head: str | None
    ref: str | None
    dirty: bool | None
    dirty_reason: str | None


def workspace_revision(
    tree: WorkTree | None, *, policy: SandboxPolicy, cgroup_owner: str, skip_dirty: str | None = None
) -> RevisionData | None:
    """Git HEAD and a dirty marker of the work tree ``tree`` (see `find_work_tree`).

    HEAD is read from the files in ``.git`` (no process). The dirty check runs ``git status``
    confined (`git_dirty`, a few ms); ``dirty`` is None when it was skipped or failed, and
    ``dirty_reason`` says why.

    Args:
        tree: The work tree, or None (outside one: no revision).
        policy: The session's sandbox policy (its roots and protected dirs confine the check).
        cgroup_owner: Where the check's cgroup goes (see `git_dirty`).
        skip_dirty: Why the dirty check is skipped, or None to run it.

    Returns:
        ``{root, head, ref, dirty, dirty_reason}``, or None outside a work tree or when its
        HEAD cannot be read (the repository was removed).
    """
    if tree is None:
        return None
    root, git_dir, linked = tree
    head = _read_git_file(git_dir, "HEAD")
    if head is None:
        return None
    ref: str | None = None
    commit: str | None
    if head.startswith("ref:"):
        ref = head[4:].strip()
        commit = _read_ref(git_dir, ref, linked)
        if commit is None and not _REF_NAME.fullmatch(ref):
            ref = None  # not a ref name git writes: nothing of it is shown
    else:
        commit = head if _OBJECT_ID.fullmatch(head) else None
    dirty, reason = (
        (None, skip_dirty) if skip_dirty is not None else git_dirty(root, policy, cgroup_owner=cgroup_owner)
    )
    return {"root": root, "head": commit, "ref": ref, "dirty": dirty, "dirty_reason": reason}
