"""Escalation: the one form a command may leave the sandbox in, and the shapes refused around it.

A bash run escalates when it carries ``sandbox: false`` (it runs outside every layer with the
user's rights) or is the argv ``["sudo", PROGRAM, ...]`` (it runs outside the sandbox as
``sudo -n PROGRAM ...``). Either is asked of a person on every call (approval kind
``escalation``, never remembered). Around it the policy refuses:

* ``sudo`` with flags or ``NAME=value`` words, a PROGRAM given as a path, or a nested
  ``sudo``/``su``/``doas``/``pkexec``/``run0`` (sudo's own options can run anything as anyone);
* any of those programs anywhere else: in a shell string (``sh -c 'sudo …'``, a command line),
  behind a wrapper (``env sudo …``) or by path (``/usr/bin/sudo``): only the argv form is asked
  for, so only it runs;
* ``["cd", …]`` as argv: no shell, so it would change nothing (pass ``cwd`` instead).

Plain data and functions; `CommandPolicy.check` applies them.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from codemode.errors import ErrorCode

__all__ = ["ELEVATORS", "SUDO_FORM", "argv_refusal", "elevator_refusal", "escalation", "sudo_refusal"]

ELEVATORS = frozenset({"sudo", "su", "doas", "pkexec", "run0", "sudoedit"})
"""Programs that run a command as another user: only the argv form ``["sudo", PROGRAM, ...]``
runs, and only after a person allowed that one call."""

_SHELL_ONLY = frozenset({"cd", "pushd", "popd"})

SUDO_FORM = '["sudo", PROGRAM, ...]'


def escalation(arguments: Mapping[str, Any]) -> str | None:
    """The escalation a bash run's arguments ask for, shown as a person reads it, or None.

    ``argv`` starting with ``sudo`` is ``sudo: <the rest>``; ``sandbox: false`` is
    ``unsandboxed: <the command>``. Reads nothing.
    """
    if arguments.get("action", "run") not in (None, "run"):
        return None
    argv, command = arguments.get("argv"), arguments.get("command")
    if isinstance(argv, list) and argv and argv[0] == "sudo":
        return "sudo: " + shlex.join(str(a) for a in argv[1:])
    if arguments.get("sandbox") is False:
        shown = command if isinstance(command, str) else shlex.join(str(a) for a in argv or ())
        return "unsandboxed: " + shown
    return None


def sudo_refusal(argv: Sequence[str]) -> str | None:
    """Why the argv ``["sudo", ...]`` is refused, or None when it has the one allowed form."""
    if len(argv) < 2:
        return f"sudo needs the program to run: argv {SUDO_FORM}"
    program = argv[1]
    if program.startswith("-") or "=" in program:
        return (
            f"sudo takes no options or NAME=value words here (`{program}`): argv {SUDO_FORM}, run as "
            "`sudo -n PROGRAM ...`"
        )
    if "/" in program:
        return f"sudo's program `{program}` is a path: name it bare (`{os.path.basename(program)}`)"
    if program in ELEVATORS:
        return f"`sudo {program}` is refused: no sudo, su or doas inside sudo; argv {SUDO_FORM}"
    return None


def argv_refusal(argv: Sequence[str]) -> tuple[ErrorCode, str] | None:
    """Why an argv run is refused before any other check (``cd``, the shape of ``sudo``), or None."""
    first = argv[0]
    if first in _SHELL_ONLY:
        return ErrorCode.BAD_COMMAND, (
            f"`{first}` is a shell builtin and argv runs no shell, so it would change nothing: pass "
            'cwd, use absolute paths, or command: "cd DIR && CMD"'
        )
    if first == "sudo":
        why = sudo_refusal(argv)
        return None if why is None else (ErrorCode.DENIED_BY_POLICY, why)
    return None


def elevator_refusal(name: str, where: str) -> str:
    """The message for a sudo/su/... found anywhere but argv's first word."""
    return f"`{name}`{where} is refused: run sudo only as argv {SUDO_FORM} (asks the user)"
