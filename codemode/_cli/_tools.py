"""``run``, ``call``, ``tools`` and ``describe``: programs and tools from the shell."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

from codemode._cli._common import (
    Subparsers,
    common,
    emit,
    print_completions,
    print_cut_hint,
    stderr_note,
    unknown_tool,
    with_host,
)
from codemode._results import dumps_result
from codemode.errors import CodemodeError, ErrorCode, ToolError
from codemode.host import Host


def add_run(sub: Subparsers) -> None:
    run = sub.add_parser("run", help="run a program (a file, or - for standard input)")
    run.add_argument("file", help="program file, or - to read standard input")
    run.add_argument("--max-output-tokens", type=int, default=None, help="budget of the printed output")
    run.add_argument("--timeout", type=float, default=None, help="wall-clock limit in seconds")
    run.add_argument("--call-id", default=None, help="record under this id; a recorded id replays")
    run.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show printed lines on stderr as they come, redacted (default: when stderr is a terminal)",
    )
    common(run)


def add_call(sub: Subparsers) -> None:
    call = sub.add_parser("call", help="call one tool directly with JSON arguments")
    call.add_argument("tool")
    call.add_argument("args", nargs="?", default="{}", help="JSON object of arguments (default {})")
    call.add_argument("--max-output-tokens", type=int, default=None)
    common(call)


def add_tools(sub: Subparsers) -> None:
    tools = sub.add_parser("tools", help="search tools (searchTools from the shell)")
    tools.add_argument("query", nargs="*", help="words to search for (none: list all)")
    common(tools, "print the matches as a JSON array of {name, description}")


def add_describe(sub: Subparsers) -> None:
    describe = sub.add_parser("describe", help="a tool's schema and TypeScript signature")
    describe.add_argument("name")
    common(describe, "print name, description, schemas and signature as JSON")


def _read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CodemodeError(f"cannot read program {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CodemodeError(f"program {path} is not UTF-8 text") from exc


def cmd_run(args: argparse.Namespace) -> int:
    source = _read_source(args.file)

    async def body(host: Host) -> int:
        from codemode._stream import PrintStream

        streaming = args.stream if args.stream is not None else sys.stderr.isatty()
        stream = PrintStream(host.archive.redactor, sys.stderr) if streaming else None
        result = await host.run_code(
            source,
            call_id=args.call_id,
            max_output_tokens=args.max_output_tokens,
            timeout_seconds=args.timeout,
            on_output=stream.feed if stream is not None else None,
        )
        if stream is not None:
            stream.close()
        emit(dumps_result(result) if args.json else result.text)
        if not args.json:
            print_cut_hint(result.refs)
        print_completions(host)
        return 0 if result.ok else 1

    return anyio.run(with_host, args, body)


def cmd_call(args: argparse.Namespace) -> int:
    try:
        tool_args = json.loads(args.args)
    except json.JSONDecodeError as exc:
        raise CodemodeError(f"ARGS must be a JSON object: {exc.msg} at column {exc.colno}") from exc
    if not isinstance(tool_args, dict):
        raise CodemodeError('ARGS must be a JSON object, like \'{"path": "README.md"}\'')

    async def body(host: Host) -> int:
        if host.registry.get(args.tool) is None:
            raise ToolError(unknown_tool(host, args.tool), code=ErrorCode.UNKNOWN_TOOL)
        result = await host.call_tool(args.tool, tool_args, max_output_tokens=args.max_output_tokens)
        emit(dumps_result(result) if args.json else result.text)
        if not args.json:
            print_cut_hint(result.refs)
        print_completions(host)
        return 1 if result.is_error else 0

    return anyio.run(with_host, args, body)


def cmd_tools(args: argparse.Namespace) -> int:
    from codemode._surface import listed_names

    async def body(host: Host) -> int:
        query = " ".join(args.query)
        found = host.search_tools(query, limit=50)
        listed = listed_names(host.registry.names())  # what MCP clients and adapters list
        for item in found:
            if listed.get(item["name"], item["name"]) != item["name"]:
                item["listed_as"] = listed[item["name"]]
        if args.json:
            emit(json.dumps(found, indent=2, ensure_ascii=False))
        else:
            width = max((len(item["name"]) for item in found), default=0)
            for item in found:
                first = item["description"].split(". ")[0]
                shown = f" (listed as {item['listed_as']})" if "listed_as" in item else ""
                emit(f"{item['name']:<{width}}  {first}{shown}")
        if not found:
            stderr_note(f"no tools match {query!r}; `codemode tools` with no words lists them all")
            return 1
        return 0

    return anyio.run(with_host, args, body)


def cmd_describe(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        if host.registry.get(args.name) is None:
            raise ToolError(unknown_tool(host, args.name), code=ErrorCode.UNKNOWN_TOOL)
        described = host.describe_tool(args.name)
        if args.json:
            emit(json.dumps(described, indent=2, ensure_ascii=False))
        else:
            emit(f"{described['signature']}\n\n{described['description']}\n\ninput schema:")
            emit(json.dumps(described["input_schema"], indent=2, ensure_ascii=False))
        return 0

    return anyio.run(with_host, args, body)
