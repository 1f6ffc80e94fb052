"""The ``codemode`` command line: run programs, call tools, inspect the archive and processes."""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import anyio

from codemode._results import default_state_dir
from codemode.errors import CodemodeError, ToolError
from codemode.host import Host, dumps_result
from codemode.sandbox import SandboxMode

T = TypeVar("T")
# Commands in `codemode ps` are cut to this many characters (`ps --json` shows them whole).
_PS_COMMAND_CHARS = 200


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", type=Path, default=Path.cwd(), help="workspace root (default: .)")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="state directory (default: $CODEMODE_HOME or XDG state)"
    )
    parser.add_argument(
        "--session",
        default=None,
        help="session id (runs with one id share store and processes; default: cli, and for mcp a "
        "fresh one per server)",
    )
    parser.add_argument(
        "--sandbox",
        choices=[m.value for m in SandboxMode],
        default=SandboxMode.WORKSPACE_WRITE.value,
        help="sandbox mode for commands and file tools (default: workspace-write)",
    )
    parser.add_argument(
        "--network", choices=["on", "off"], default="on", help="TCP for sandboxed commands (default: on)"
    )
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
        prog="codemode",
        description="Code Mode for LLM agents: run a JavaScript program that calls tools in a QuickJS sandbox.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a program (a file, or - for standard input)")
    run.add_argument("file", help="program file, or - to read standard input")
    run.add_argument("--max-output-tokens", type=int, default=None, help="budget of the printed output")
    run.add_argument("--timeout", type=float, default=None, help="wall-clock limit in seconds")
    run.add_argument("--call-id", default=None, help="record under this id; a recorded id replays")
    _common(run)

    call = sub.add_parser("call", help="call one tool directly with JSON arguments")
    call.add_argument("tool")
    call.add_argument("args", nargs="?", default="{}", help="JSON object of arguments (default {})")
    call.add_argument("--max-output-tokens", type=int, default=None)
    _common(call)

    tools = sub.add_parser("tools", help="search tools (searchTools from the shell)")
    tools.add_argument("query", nargs="*", help="words to search for (none: list all)")
    _common(tools)

    describe = sub.add_parser("describe", help="a tool's schema and TypeScript signature")
    describe.add_argument("name")
    _common(describe)

    archive = sub.add_parser("archive", help="read archived text")
    archive_sub = archive.add_subparsers(dest="archive_command", required=True)
    read = archive_sub.add_parser("read", help="print bytes of an archived text")
    read.add_argument("ref")
    read.add_argument("--offset", type=int, default=0)
    read.add_argument("--limit", type=int, default=None, help="bytes to print (default: to the end)")
    _common(read)

    doctor = sub.add_parser("doctor", help="engine, tokenizer, state directory and sandbox facts")
    _common(doctor)

    mcp = sub.add_parser("mcp", help="serve run_code and the tools over MCP (stdio)")
    _common(mcp)

    ps = sub.add_parser("ps", help="list background processes")
    ps.add_argument("--all", action="store_true", help="every session's processes")
    _common(ps)

    logs = sub.add_parser("logs", help="print a background process's output")
    logs.add_argument("process_id")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until it exits")
    _common(logs)

    stop = sub.add_parser("stop", help="stop a background process and its whole tree")
    stop.add_argument("process_id")
    _common(stop)

    session = sub.add_parser("session", help="session control")
    session_sub = session.add_subparsers(dest="session_command", required=True)
    close = session_sub.add_parser("close", help="stop a session's lifecycle=session processes")
    close.add_argument("session_id")
    _common(close)
    return parser


def _host(args: argparse.Namespace) -> Host:
    return Host(
        workspace=args.workspace,
        state_dir=args.state_dir or default_state_dir(),
        session_id=args.session or ("mcp-" + uuid.uuid4().hex[:12] if args.command == "mcp" else "cli"),
        sandbox=SandboxMode(args.sandbox),
        network=args.network == "on",
    )


async def _with_host(args: argparse.Namespace, body: Callable[[Host], Awaitable[T]]) -> T:
    async with _host(args) as host:
        return await body(host)


def _emit(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def _read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CodemodeError(f"cannot read program {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CodemodeError(f"program {path} is not UTF-8 text") from exc


def _cmd_run(args: argparse.Namespace) -> int:
    source = _read_source(args.file)

    async def body(host: Host) -> int:
        result = await host.run_code(
            source,
            call_id=args.call_id,
            max_output_tokens=args.max_output_tokens,
            timeout_seconds=args.timeout,
        )
        _emit(dumps_result(result) if args.json else result.text)
        return 0 if result.ok else 1

    return anyio.run(_with_host, args, body)


def _cmd_call(args: argparse.Namespace) -> int:
    try:
        tool_args = json.loads(args.args)
    except json.JSONDecodeError as exc:
        raise CodemodeError(f"ARGS must be a JSON object: {exc.msg} at column {exc.colno}") from exc
    if not isinstance(tool_args, dict):
        raise CodemodeError('ARGS must be a JSON object, like \'{"path": "README.md"}\'')

    async def body(host: Host) -> int:
        result = await host.call_tool(args.tool, tool_args, max_output_tokens=args.max_output_tokens)
        _emit(dumps_result(result) if args.json else result.text)
        return 1 if result.is_error else 0

    return anyio.run(_with_host, args, body)


def _cmd_tools(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        found = host.search_tools(" ".join(args.query), limit=50)
        if args.json:
            _emit(json.dumps(found, indent=2, ensure_ascii=False))
        else:
            for item in found:
                first = item["description"].split(". ")[0]
                _emit(f"{item['name']:<16} {first}")
        return 0 if found else 1

    return anyio.run(_with_host, args, body)


def _cmd_describe(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        described = host.describe_tool(args.name)
        if args.json:
            _emit(json.dumps(described, indent=2, ensure_ascii=False))
        else:
            _emit(f"{described['signature']}\n\n{described['description']}\n\ninput schema:")
            _emit(json.dumps(described["input_schema"], indent=2, ensure_ascii=False))
        return 0

    return anyio.run(_with_host, args, body)


def _cmd_archive_read(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        offset = args.offset
        remaining = args.limit
        out = sys.stdout.buffer
        while True:
            chunk = 1 << 20 if remaining is None else min(1 << 20, remaining)
            if chunk <= 0:
                break
            page = host.archive.read(args.ref, offset, chunk)
            out.write(page.data)
            offset = page.next_offset
            if remaining is not None:
                remaining -= len(page.data)
            if page.eof or not page.data:
                break
        out.flush()
        return 0

    return anyio.run(_with_host, args, body)


def _cmd_doctor(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        facts = host.doctor()
        if args.json:
            _emit(json.dumps(facts, indent=2))
            return 0
        tok = facts["tokenizer"]
        box = facts["sandbox"]
        state = facts["state_dir"]
        lines = [
            f"engine        quickjs-ng {facts['engine']['quickjs-ng']}, codemode {facts['engine']['codemode']}",
            f"tokenizer     {tok['encoding']}: "
            + (
                "loaded (exact counts)"
                if tok["exact"]
                else f"NOT loaded, conservative byte count ({tok['fallback']})"
            ),
            f"state dir     {state['path']} (mode {state['mode']})",
            f"sandbox       {box['mode']}, network {'on' if box['network'] else 'off'}, "
            f"writable: {', '.join(box['writable_roots'])}",
            *box["summary"],
            "layers (checked by starting one confined command):",
            *(f"  {layer['name']:<20}{layer['state']:<13}{layer['detail']}" for layer in box["layers"]),
        ]
        _emit("\n".join(lines))
        return 0

    return anyio.run(_with_host, args, body)


def _cmd_mcp(args: argparse.Namespace) -> int:
    from codemode.mcp import serve_stdio

    anyio.run(serve_stdio, _host(args))
    return 0


def _owner(host: Host, process_id: str) -> str:
    owner = host.processes.owner_of(process_id)
    if owner is None:
        raise ToolError(f"no such process {process_id!r}; `codemode ps --all` lists them")
    return owner


def _cmd_ps(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        rows = host.processes.list_processes(None if args.all else host.config.session_id)
        redactor = host.archive.redactor
        if args.json:  # JSON escapes every control character; commands are redacted whole
            _emit(json.dumps([{**r, "command": redactor.redact(r["command"])} for r in rows], indent=2))
            return 0
        if not rows:
            session = redactor.one_line(host.config.session_id)
            _emit("no processes" + ("" if args.all else f" in session {session!r} (try --all)"))
            return 0
        _emit(f"{'ID':<24} {'SESSION':<12} {'STATE':<9} {'EXIT':>5} {'LOG':>10}  COMMAND")
        for r in rows:
            exit_code = "" if r["exit_code"] is None else str(r["exit_code"])
            size = "" if r["log_bytes"] is None else str(r["log_bytes"])
            session = redactor.one_line(r["session_id"], 40)
            command = redactor.one_line(r["command"], _PS_COMMAND_CHARS)
            _emit(f"{r['process_id']:<24} {session:<12} {r['state']:<9} {exit_code:>5} {size:>10}  {command}")
        return 0

    return anyio.run(_with_host, args, body)


def _cmd_logs(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        owner = _owner(host, args.process_id)
        offset = 0
        while True:
            page = await host.processes.read(
                owner, args.process_id, offset, 1 << 20, 1000 if args.follow else None
            )
            sys.stdout.write(page["output"])
            sys.stdout.flush()
            offset = page["next_offset"]
            if page["eof"] and (page["exited"] or not args.follow):
                break
        return 0

    return anyio.run(_with_host, args, body)


def _cmd_stop(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        result = await host.processes.stop(_owner(host, args.process_id), args.process_id)
        _emit(json.dumps(result, indent=2) if args.json else str(result.get("message", result)))
        return 0

    return anyio.run(_with_host, args, body)


def _cmd_session_close(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        await host.close_session(args.session_id)
        _emit(f"session {args.session_id} closed")
        return 0

    return anyio.run(_with_host, args, body)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _cmd_run,
    "call": _cmd_call,
    "tools": _cmd_tools,
    "describe": _cmd_describe,
    "doctor": _cmd_doctor,
    "mcp": _cmd_mcp,
    "ps": _cmd_ps,
    "logs": _cmd_logs,
    "stop": _cmd_stop,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``codemode`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "archive":
        handler: Callable[[argparse.Namespace], int] = _cmd_archive_read
    elif args.command == "session":
        handler = _cmd_session_close
    else:
        handler = _COMMANDS[args.command]
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
