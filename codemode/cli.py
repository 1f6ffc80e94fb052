"""The ``codemode`` command line: run programs, call tools, inspect the archive and processes.

Standard output carries the result only (``PID=$(codemode run prog.js)`` captures just what the
program printed); completions of background processes, hints and errors go to standard error.

Exit status: 0 done; 1 the program, the tool or the command failed, including an unknown tool,
process, session or archived text, a search nothing matches, and a problem ``doctor`` found;
2 a usage error (bad arguments or options, an unreadable program, a configuration codemode
refuses); 3 an internal error; 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from codemode._version import __version__
from codemode.errors import CodemodeError, ToolError

_EPILOG = """\
standard output carries the result only; background completions, hints and errors go to
standard error.

exit status: 0 done; 1 the program, tool or command failed (also: an unknown tool, process,
session or archived text, a search with no match, a problem doctor found); 2 usage error;
3 internal error; 130 interrupted."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs).

    Args:
        only: Build just this subcommand (what `main` parses with, when argv names one: the
            whole parser, twelve subcommands, takes ~10 ms of a ~240 ms ``codemode run``).
    """
    parser = argparse.ArgumentParser(
        prog="codemode",
        description="Code Mode for LLM agents: run a JavaScript program that calls tools in a QuickJS sandbox.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in _SUBCOMMANDS:
        if only is None or only == name:
            _part(name, "add_")(sub)
    return parser


# Each subcommand's module under codemode._cli (its add_<name> builds its parser, cmd_<name> runs
# it): imported only when the command line names it, so `codemode run` loads no other group.
_SUBCOMMANDS = {
    "run": "_tools",
    "call": "_tools",
    "tools": "_tools",
    "describe": "_tools",
    "archive": "_inspect",
    "doctor": "_doctor",
    "mcp": "_mcp",
    "ps": "_inspect",
    "logs": "_inspect",
    "stop": "_inspect",
    "session": "_inspect",
    "trash": "_inspect",
}
# The handlers named for the subcommand's own subcommand (the only one each has).
_HANDLERS = {"archive": "archive_read", "session": "session_close"}


def _part(command: str, kind: str) -> Any:
    """``add_<command>`` or ``cmd_<command>`` of the subcommand's module."""
    module = importlib.import_module(f"codemode._cli.{_SUBCOMMANDS[command]}")
    return getattr(module, kind + (_HANDLERS.get(command, command) if kind == "cmd_" else command))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``codemode`` console script; returns the exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    # The first word names the subcommand (the top level takes only --help and --version).
    only = words[0] if words and words[0] in _SUBCOMMANDS else None
    if only == "run":
        _start_zygote_early(words[1:])
    args = build_parser(only).parse_args(words)
    args.words = words  # as given: `mcp --processes` starts its front processes with them
    handler: Callable[[argparse.Namespace], int] = _part(args.command, "cmd_")
    try:
        return handler(args)
    except ToolError as exc:
        sys.stderr.write(f"codemode: {exc.message}\n")
        return 1
    except CodemodeError as exc:
        sys.stderr.write(f"codemode: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `| head`); nothing left to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # a host fault: one line, never a traceback
        sys.stderr.write(f"codemode: internal error: {type(exc).__name__}: {exc}\n")
        return 3


def _start_zygote_early(words: list[str]) -> None:
    """``codemode run`` in engine mode process: start the engine's zygote before the host's
    modules import (most of a cold run), so that its interpreter boots meanwhile on another CPU
    instead of after them. Only the mode is read here; a bad one is refused later as usual."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--engine")
    known, _ = probe.parse_known_args(words)
    mode = known.engine or os.environ.get("CODEMODE_ENGINE", "").strip() or "process"
    if mode == "process":
        from codemode import _zygote_start

        _zygote_start.launch_early()


def entry_point() -> NoReturn:
    """The ``codemode`` console script and ``python -m codemode``: `main`, then a quick exit.

    When `main` returns it has closed everything it opened (the Host's context manager closes
    its state, processes and servers). What is left is the interpreter's teardown, which frees
    every object of some 400 modules one by one: ~50 ms of a ~320 ms ``codemode run``
    (``bench/bench_cold.py``). So once the output and the logs are flushed, the process ends
    at once.
    """
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader went away, or the stream is closed
            pass
    os._exit(code)
