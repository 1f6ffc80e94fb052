"""One rule, one module: the host opens, reads, lists or writes a path a command can write only
through ``codemode.sandbox._safeopen``. This walks every call in the modules that handle such
paths and fails on a raw ``open``/``os.open``/``Path.open``/``read_text``/``read_bytes``/
``write_text``/``write_bytes``/``os.listdir``/``os.scandir``/``os.walk``/``glob``/``iterdir``
that is not in the allowlist below, each entry of which says why that call touches only the
host's own files (or /proc, cgroupfs, /dev/null, or a directory fd safe-open gave)."""

from __future__ import annotations

import ast
from pathlib import Path

import codemode

ROOT = Path(codemode.__file__).parent.parent

#: The modules that handle command-writable paths, and which paths.
MODULES = {
    "codemode/policy/_trash.py": "the trash inbox and the rm shim's dir in a session's $TMPDIR; restore into the workspace",
    "codemode/policy/_guard.py": "files the session's inbox and installs the shim around every run",
    "codemode/policy/_walk.py": "reads the workspace's package.json for `npm run` scripts",
    "codemode/policy/_scripts.py": "reads script files of the workspace that a command line runs",
    "codemode/tools/bash/_env.py": "reads the workspace's .git (a .git file, HEAD, refs, packed-refs)",
    "codemode/tools/bash/_foreground.py": "runs commands in the workspace and looks up its work tree",
    "codemode/tools/bash/_background.py": "starts commands in the workspace",
    "codemode/tools/bash/_manager.py": "resolves cwds in the workspace and files the trash after a run",
    "codemode/sandbox/_tmpfs.py": "walks a session's $TMPDIR to count what it holds",
    "codemode/state/_capped.py": "looks at the STATE/tmp/s-* session temp dirs",
}

#: (module, function, call) -> why it is not a command-writable path.
ALLOWED = {
    ("codemode/tools/bash/_background.py", "_stderr_tail", "err_path.read_text"): (
        "the supervisor's error file, made by the host in STATE/bash (commands cannot reach the state dir)"
    ),
    (
        "codemode/tools/bash/_background.py",
        "start_background",
        "open",
    ): "the same error file, created by the host",
    ("codemode/tools/bash/_background.py", "adopt", "open"): "the same error file, created by the host",
    ("codemode/tools/bash/_background.py", "start_background", "os.open"): "cgroup.procs in cgroupfs",
    ("codemode/tools/bash/_env.py", "_real_directory", "os.open"): (
        "an O_PATH fd of a command's cwd: nothing is read and it never blocks; a cwd may be a link "
        "by design, and what it names is confined like the command"
    ),
    ("codemode/tools/bash/_env.py", "_run_git_status", "os.open"): "/dev/null",
    ("codemode/tools/bash/_foreground.py", "_devnull", "os.open"): "/dev/null",
    ("codemode/sandbox/_tmpfs.py", "tmp_mounts", "open"): "/proc/self/mountinfo",
    (
        "codemode/sandbox/_tmpfs.py",
        "counted_use",
        "os.listdir",
    ): "a directory fd from safe-open (open_anchor / dir fds)",
    (
        "codemode/state/_capped.py",
        "_probe_holes",
        "os.open",
    ): "a probe file the host makes in its own archive dir",
    (
        "codemode/state/_capped.py",
        "CappedLog.__init__",
        "os.open",
    ): "an archive file the host makes in its state dir",
    ("codemode/state/_capped.py", "session_tmpfs_usage", "os.listdir"): (
        "STATE/tmp itself, the host's own (commands write only inside the s-* dirs, which are only stat'ed)"
    ),
}

_BANNED_ATTRIBUTES = frozenset(
    {
        "open",
        "read_text",
        "read_bytes",
        "write_text",
        "write_bytes",
        "listdir",
        "scandir",
        "walk",
        "glob",
        "rglob",
        "iterdir",
    }
)


def raw_calls(source: str) -> list[tuple[str, str, int]]:
    """(enclosing function, call, line) of every raw file-system call in ``source``."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{scope}.{child.name}" if scope else child.name
            if isinstance(child, ast.Call):
                func = child.func
                if isinstance(func, ast.Name) and func.id == "open":
                    found.append((scope, "open", child.lineno))
                elif isinstance(func, ast.Attribute) and func.attr in _BANNED_ATTRIBUTES:
                    found.append((scope, f"{ast.unparse(func.value)}.{func.attr}", child.lineno))
            visit(child, inner)

    visit(ast.parse(source), "")
    return found


def test_modules_touch_command_writable_paths_only_through_safe_open() -> None:
    offenders = []
    used = set()
    for module in MODULES:
        path = ROOT / module
        if not path.exists():  # a module that went: nothing of it to check
            continue
        for scope, call, line in raw_calls(path.read_text()):
            key = (module, scope, call)
            if key in ALLOWED:
                used.add(key)
            else:
                offenders.append(f"{module}:{line} {call} in {scope or '<module>'}")
    assert offenders == [], (
        "raw file-system calls in modules that handle command-writable paths; use codemode.sandbox "
        f"safe-open (or allowlist a host-own file here, saying why): {offenders}"
    )
    stale = sorted(set(ALLOWED) - used)
    assert stale == [], f"allowlist entries that match no call any more (remove them): {stale}"


def test_the_rule_catches_each_kind_of_raw_call() -> None:
    """The checker itself: every banned form is found (a rule that finds nothing cannot fail)."""
    source = (
        "import os, glob\n"
        "def f(p, d):\n"
        "    open(p)\n    os.open(p, 0)\n    p.open()\n    p.read_text()\n    p.read_bytes()\n"
        "    p.write_text('x')\n    os.listdir(d)\n    os.scandir(d)\n    os.walk(d)\n"
        "    glob.glob('*')\n    p.iterdir()\n    p.glob('*')\n"
    )
    calls = [call for _, call, _ in raw_calls(source)]
    assert calls == [
        "open",
        "os.open",
        "p.open",
        "p.read_text",
        "p.read_bytes",
        "p.write_text",
        "os.listdir",
        "os.scandir",
        "os.walk",
        "glob.glob",
        "p.iterdir",
        "p.glob",
    ]
