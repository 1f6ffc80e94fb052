"""Text fed to a shell interpreter: what a shell runs besides its own words.

A shell (``sh``, ``bash``, ``dash``, ``zsh``, ...) runs its ``-c`` string; else, with ``-s`` or
without an operand, the text on its stdin (a here-doc, a here-string, a ``<`` file, or what the
previous command of a pipeline prints); else its first operand, a script file. ``.``/``source``
run a script file in the current shell; a workspace file run by path whose ``#!`` line names a
shell is that shell running the file; ``env -S STRING`` splits STRING into more words;
``BASH_ENV``/``ENV`` name a file a shell runs when it starts.

This module says, for one command, which text that is (`ShellInput`) and reads script files: only
inside the workspace, through the safe-open module (no symlink followed, regular files only,
never blocking, at most `SCRIPT_BYTES`). The command policy checks what it gets command by
command; what it cannot read is a problem (refused under the strict policy).

Interpreters other than shells (``python -c``, ``node -e``, ``perl -e``, ``make``) are not
followed: the policy sees their name only, under every mode.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from codemode.errors import ErrorCode
from codemode.policy._shell import Command
from codemode.sandbox import UnsafePath, anchor, read_bytes_at

__all__ = [
    "SCRIPT_BYTES",
    "SHELLS",
    "SOURCE_BUILTINS",
    "STARTUP_VARIABLES",
    "STDIN_PATHS",
    "VARIABLE_SETTERS",
    "ScriptText",
    "ShellInput",
    "piped_output",
    "read_script",
    "shebang_shell",
    "shell_input",
    "shell_script",
    "split_string",
]

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "rbash", "yash", "posh"})
"""Interpreters of shell scripts: their -c strings, stdin and script files are followed."""
SOURCE_BUILTINS = frozenset({".", "source"})
"""Builtins that run a script file in the current shell."""
STARTUP_VARIABLES = frozenset({"BASH_ENV", "ENV"})
"""Variables naming a file a shell runs when it starts (non-interactive bash, POSIX sh)."""
VARIABLE_SETTERS = frozenset({"export", "declare", "typeset", "readonly", "local", "env", "sudo"})
"""Commands whose ``NAME=value`` words set a variable."""
SCRIPT_BYTES = 256 * 1024
"""The largest script file the policy reads and checks (a bigger one is not checked)."""

STDIN_PATHS = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
"""Paths of a process's own stdin: a script file named so is its stdin."""
_SHELL_VALUED = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_STDIN_FLAGS = frozenset({"-s", "-i"})


@dataclass(frozen=True)
class ShellInput:
    """What a shell command runs.

    Attributes:
        kind: ``"string"`` (a -c string or stdin text), ``"file"`` (a script file), ``"none"``
            (nothing to follow: stdin is /dev/null), or ``"unknown"``.
        text: The string, or the script file's path as written (None when computed).
        what: What could not be read, in words (for ``unknown``, or when ``text`` is None).
        via: How the text is reached, for messages (``inside sh -c``).
    """

    kind: str
    text: str | None = None
    what: str = ""
    via: str = ""


def shell_flags(words: tuple[str | None, ...]) -> set[str]:
    """The options before a shell's first operand (``-ec`` gives ``-e`` and ``-c``)."""
    flags: set[str] = set()
    index = 1
    while index < len(words):
        word = words[index]
        if word is None or not word.startswith(("-", "+")) or word in ("-", "--"):
            break
        if word.startswith("--"):
            flags.add(word)
        else:
            flags.update(f"-{c}" for c in word[1:])
        index += 2 if word in _SHELL_VALUED else 1
    return flags


def shell_operand(words: tuple[str | None, ...]) -> int | None:
    """The index of a shell's first operand (its script, or with -c its command string)."""
    index = 1
    while index < len(words):
        word = words[index]
        if word is None:
            return index
        if word == "--":
            return index + 1 if index + 1 < len(words) else None
        if word in _SHELL_VALUED:
            index += 2
            continue
        if word.startswith(("-", "+")) and word not in ("-", "+"):
            index += 1
            continue
        return index
    return None


def shell_script(words: tuple[str | None, ...]) -> tuple[str | None] | None:
    """A shell's ``-c`` string (None inside: computed), or None when it runs no -c string."""
    if "-c" not in shell_flags(words):
        return None
    index = shell_operand(words)
    if index is None or index >= len(words):
        return None
    return (words[index],)


def shell_input(words: tuple[str | None, ...], feed: Command | None, *, background: bool) -> ShellInput:
    """What the shell ``words`` runs, its stdin coming from ``feed``'s redirections and pipe
    (``feed`` None: the call's own stdin, /dev/null in the foreground)."""
    name = os.path.basename(words[0] or "")
    script = shell_script(words)
    if script is not None:
        return ShellInput("string", script[0], f"a computed {name} -c script", f"inside {name} -c")
    if "-c" in shell_flags(words):
        return ShellInput("none")  # `sh -c` without a string fails
    operand = shell_operand(words)
    if operand is not None and not (shell_flags(words) & _STDIN_FLAGS) and words[operand] not in STDIN_PATHS:
        return ShellInput(
            "file", words[operand], f"a computed {name} script file", f"{name} {words[operand]}"
        )
    if feed is not None:
        if feed.stdin_script is not None:
            return ShellInput("string", feed.stdin_script, via=f"script fed to {name}")
        if feed.stdin_file is not None:
            return ShellInput("file", feed.stdin_file, via=f"{name} < {feed.stdin_file}")
        if feed.stdin_unknown is not None:
            return ShellInput("unknown", what=f"{feed.stdin_unknown} fed to {name}")
        if feed.piped_in:
            output = piped_output(feed.piped_from) if feed.piped_from is not None else None
            if output is None:
                return ShellInput("unknown", what=f"a script piped into {name}")
            return ShellInput(output.kind, output.text, via=f"script piped into {name}")
    if background:
        return ShellInput("unknown", what=f"{name} reading its script from the process's input")
    return ShellInput("none")


def piped_output(command: Command) -> ShellInput | None:
    """What ``command`` prints when that is plain from its words (``echo``, ``printf`` without
    conversions, ``cat`` of a here-doc or one file), else None."""
    words = command.words
    if not words or any(w is None for w in words):
        return None
    name = os.path.basename(words[0] or "")
    args = [w for w in words[1:] if w is not None]
    if name == "echo":
        newline = True
        while args and args[0] in ("-n", "-e", "-E"):
            newline = newline and args.pop(0) != "-n"
        if any("\\" in a for a in args):
            return None
        return ShellInput("string", " ".join(args) + ("\n" if newline else ""))
    if name == "printf":
        if len(args) != 1 or "%" in args[0] or "\\" in args[0].replace("\\n", ""):
            return None
        return ShellInput("string", args[0].replace("\\n", "\n"))
    if name == "cat":
        if not args or args == ["-"]:
            if command.stdin_script is not None:
                return ShellInput("string", command.stdin_script)
            if command.stdin_file is not None:
                return ShellInput("file", command.stdin_file)
            return None
        if len(args) == 1 and not args[0].startswith("-"):
            return ShellInput("file", args[0])
    return None


def split_string(value: str) -> list[str] | None:
    """``env -S``'s split of ``value`` into words, or None when it holds what env expands
    itself (``${NAME}``, backslash escapes) or cannot be split."""
    if "$" in value or "\\" in value:
        return None
    try:
        return shlex.split(value, comments=False, posix=True)
    except ValueError:
        return None


@dataclass(frozen=True)
class ScriptText:
    """A script file as read: its text, or why not (``missing``: it does not exist; ``binary``:
    it holds a NUL byte, so it is a program, not a script)."""

    text: str | None
    why: str = ""
    missing: bool = False
    binary: bool = False


def read_script(path: str, cwd: Path, workspace: Path) -> ScriptText:
    """The script file ``path`` (relative to ``cwd``), read only if it is a regular file inside
    the workspace, through the safe-open module: no symlink followed, never blocking, at most
    `SCRIPT_BYTES`."""
    root = Path(os.path.normpath(workspace))
    target = Path(os.path.normpath(cwd / path))
    if root not in target.parents:
        return ScriptText(None, "outside the workspace")
    try:
        with anchor(root) as fd:
            data = read_bytes_at(fd, str(target.relative_to(root)), cap=SCRIPT_BYTES)
    except UnsafePath as error:
        reason = error.message.replace(str(target.relative_to(root)), "it", 1)
        return ScriptText(None, _cut(reason), missing=error.code is ErrorCode.NOT_FOUND)
    if b"\x00" in data:
        return ScriptText(None, "it is not text", binary=True)
    return ScriptText(data.decode("utf-8", "surrogateescape"))


def shebang_shell(text: str) -> str | None:
    """The shell that runs a text file started by path: the one its ``#!`` line names
    (``#!/bin/sh``, ``#!/usr/bin/env bash``), or bash itself when it has no ``#!`` line (bash
    runs such a file as a script when the kernel will not execute it); None for another
    interpreter."""
    if not text.startswith("#!"):
        return "bash"
    words = text[2:].split("\n", 1)[0].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    if words and os.path.basename(words[0]) in SHELLS:
        return os.path.basename(words[0])
    return None


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:79] + "…"
