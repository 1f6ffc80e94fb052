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
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import anyio
import anyio.to_thread

from codemode._results import default_state_dir, dumps_result
from codemode._version import __version__
from codemode.errors import CodemodeError, ToolError, UserError
from codemode.host import Host
from codemode.policy import ApprovalRequest, ApproveCallback, CommandPolicy, Decision, Trash
from codemode.sandbox import SandboxMode
from codemode.tools.upstream import load_mcp_config

T = TypeVar("T")
# Commands in `codemode ps` are cut to this many characters (`ps --json` shows them whole).
_PS_COMMAND_CHARS = 200
_LIVE_STATES = ("starting", "running")
_EPILOG = """\
standard output carries the result only; background completions, hints and errors go to
standard error.

exit status: 0 done; 1 the program, tool or command failed (also: an unknown tool, process,
session or archived text, a search with no match, a problem doctor found); 2 usage error;
3 internal error; 130 interrupted."""


def _common(
    parser: argparse.ArgumentParser, json_help: str | None = "print the whole result as JSON"
) -> None:
    """The options every subcommand takes; ``--json`` only where ``json_help`` says what it prints."""
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
    parser.add_argument(
        "--deny-command",
        action="append",
        default=[],
        metavar="NAME",
        help="refuse this executable wherever a bash run would start it (repeatable)",
    )
    parser.add_argument(
        "--strict-commands",
        action="store_true",
        help="refuse bash commands the policy cannot check (default: they run unchecked)",
    )
    parser.add_argument(
        "--approve-commands",
        action="store_true",
        help="bash commands off the read-only allowlist need approval (over MCP: the client's user)",
    )
    parser.add_argument(
        "--mcp-config",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help='MCP servers to mount as tools.<server>.<tool>: a {"mcpServers": ...} JSON file (repeatable)',
    )
    if json_help is not None:
        parser.add_argument("--json", action="store_true", help=json_help)


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
    for name, add in _SUBCOMMANDS.items():
        if only is None or only == name:
            add(sub)
    return parser


_Subparsers = Any  # argparse's subparsers action (its class is private)


def _add_run(sub: _Subparsers) -> None:
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
    _common(run)


def _add_call(sub: _Subparsers) -> None:
    call = sub.add_parser("call", help="call one tool directly with JSON arguments")
    call.add_argument("tool")
    call.add_argument("args", nargs="?", default="{}", help="JSON object of arguments (default {})")
    call.add_argument("--max-output-tokens", type=int, default=None)
    _common(call)


def _add_tools(sub: _Subparsers) -> None:
    tools = sub.add_parser("tools", help="search tools (searchTools from the shell)")
    tools.add_argument("query", nargs="*", help="words to search for (none: list all)")
    _common(tools, "print the matches as a JSON array of {name, description}")


def _add_describe(sub: _Subparsers) -> None:
    describe = sub.add_parser("describe", help="a tool's schema and TypeScript signature")
    describe.add_argument("name")
    _common(describe, "print name, description, schemas and signature as JSON")


def _add_archive(sub: _Subparsers) -> None:
    archive = sub.add_parser("archive", help="read archived text")
    archive_sub = archive.add_subparsers(dest="archive_command", required=True)
    read = archive_sub.add_parser("read", help="print bytes of an archived text")
    read.add_argument("ref")
    read.add_argument("--offset", type=_count(0), default=0, help="first byte (default 0)")
    read.add_argument("--limit", type=_count(1), default=None, help="bytes to print (default: to the end)")
    _common(read, "print {ref, offset, next_offset, total_bytes, eof, text, dropped} as JSON")


def _add_doctor(sub: _Subparsers) -> None:
    doctor = sub.add_parser(
        "doctor", help="engine, tokenizer, state directory and sandbox facts, and what to fix"
    )
    _common(doctor, "print the facts and findings as JSON")


def _add_mcp(sub: _Subparsers) -> None:
    mcp = sub.add_parser("mcp", help="serve run_code and the tools over MCP (stdio, or streamable HTTP)")
    mcp.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        default=None,
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST defaults to "
        "127.0.0.1; one codemode session per MCP session)",
    )
    mcp.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="read the bearer token HTTP clients must send from PATH (default: $CODEMODE_MCP_TOKEN, else a "
        "fresh one printed on stderr at start); keep the file in the state directory, which commands "
        "cannot read",
    )
    # Refused with a pointer to the above: a command line is readable by every process here.
    mcp.add_argument("--token", default=None, help=argparse.SUPPRESS)
    mcp.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let browsers from this Origin in (repeatable; e.g. https://app.example.com; :* for any port); "
        "loopback origins are always let in",
    )
    mcp.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="accept this Host header (repeatable; the name a load balancer or clients use; :* for any "
        "port); loopback names and the bound address are always accepted",
    )
    mcp.add_argument(
        "--idle-timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="end an HTTP MCP session idle this long, stopping its lifecycle=session processes (default 1800)",
    )
    mcp.add_argument(
        "--tools",
        choices=("code", "default", "all"),
        default="default",
        help="which tools are listed: code (run_code alone), default (run_code, bash, read_file, edit_file, "
        "write_file, read_archive), all (every tool, mounted servers' too); programs reach every tool",
    )
    mcp.add_argument(
        "--output-schemas",
        choices=("on", "off"),
        default="off",
        help="list each tool's output schema (its top level) too (default off: model APIs never read them)",
    )
    _common(mcp, None)  # speaks JSON-RPC on stdout: there is no other output to format


def _add_ps(sub: _Subparsers) -> None:
    ps = sub.add_parser("ps", help="list background processes")
    ps.add_argument("--all", action="store_true", help="every session's processes")
    _common(ps, "print the processes as a JSON array")


def _add_logs(sub: _Subparsers) -> None:
    logs = sub.add_parser("logs", help="print a background process's output")
    logs.add_argument("process_id", help="a process id, or mcp:SERVER for an MCP server's log")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until it exits")
    _common(logs, "print one JSON object with the output, state and exit code (with -f: once it exits)")


def _add_stop(sub: _Subparsers) -> None:
    stop = sub.add_parser("stop", help="stop a background process and its whole tree")
    stop.add_argument("process_id")
    _common(stop)


def _add_session(sub: _Subparsers) -> None:
    session = sub.add_parser("session", help="session control")
    session_sub = session.add_subparsers(dest="session_command", required=True)
    close = session_sub.add_parser("close", help="stop a session's lifecycle=session processes")
    close.add_argument("session_id")
    _common(close, "print {session_id, stopped, still_running} as JSON")


def _add_trash(sub: _Subparsers) -> None:
    trash = sub.add_parser("trash", help="what protected deletes (rm in the workspace) moved aside")
    trash_sub = trash.add_subparsers(dest="trash_command", required=True)
    _common(trash_sub.add_parser("list", help="list the workspace's trash"), "print the entries as JSON")
    restore = trash_sub.add_parser("restore", help="put an entry back where it was")
    restore.add_argument("entry_id")
    _common(restore, "print the restored entry as JSON")
    _common(
        trash_sub.add_parser("empty", help="delete the workspace's trash for good"), "print {removed} as JSON"
    )


_SUBCOMMANDS: dict[str, Callable[[_Subparsers], None]] = {
    "run": _add_run,
    "call": _add_call,
    "tools": _add_tools,
    "describe": _add_describe,
    "archive": _add_archive,
    "doctor": _add_doctor,
    "mcp": _add_mcp,
    "ps": _add_ps,
    "logs": _add_logs,
    "stop": _add_stop,
    "session": _add_session,
    "trash": _add_trash,
}


def _count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum`` (a usage error otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum} (got {value})")
        return value

    return parse


_APPROVAL_ANSWERS = {
    "y": Decision.allow(),
    "yes": Decision.allow(),
    "a": Decision.allow_session(),
    "always": Decision.allow_session(),
}


def _terminal_approval(args: argparse.Namespace) -> ApproveCallback | None:
    """``call``/``run`` with --approve-commands: ask the person at the terminal, one request at a
    time (y: once, a: for the rest of the session, anything else or end of input: refuse).

    Raises:
        CodemodeError: There is no terminal to ask (stdin or stderr is not one): a flag that
            asks with no one to ask refuses loudly, before anything runs.
    """
    if not args.approve_commands or args.command not in ("call", "run"):
        return None
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise CodemodeError(
            "--approve-commands asks at the terminal before each bash command that is not read-only, "
            "and there is no terminal here (stdin or stderr is not one), so nothing was run; run it at a "
            "terminal, or leave out --approve-commands and limit commands with --deny-command and "
            "--strict-commands"
        )

    def ask(request: ApprovalRequest) -> Decision:
        sys.stdout.flush()
        sys.stderr.write(f"codemode: approve {request.summary}? [y]es, [a]lways this session, [N]o: ")
        sys.stderr.flush()
        answer = _APPROVAL_ANSWERS.get(sys.stdin.readline().strip().lower())
        return answer or Decision.deny("refused at the terminal")

    async def approve(requests: list[ApprovalRequest]) -> list[Decision]:
        return [await anyio.to_thread.run_sync(ask, request) for request in requests]

    return approve


def _host(args: argparse.Namespace, workspace: Path | None = None) -> Host:
    mcp = args.command == "mcp"
    servers = [server for path in args.mcp_config for server in load_mcp_config(path)]
    return Host(
        approve=_terminal_approval(args),
        mcp_servers=servers,
        connect_mcp_at_open=mcp,  # an MCP client lists the tools first: have them by then
        workspace=workspace or args.workspace,
        state_dir=args.state_dir or default_state_dir(),
        session_id=args.session or ("mcp-" + uuid.uuid4().hex[:12] if mcp else "cli"),
        sandbox=SandboxMode(args.sandbox),
        network=args.network == "on",
        command_policy=CommandPolicy(
            deny=frozenset(args.deny_command),
            strict=args.strict_commands,
            approve_commands=args.approve_commands,
        ),
        # An MCP client gets completions at the end of its next result; the CLI prints them on
        # stderr itself, so stdout stays the result (`PID=$(codemode run ...)`).
        notify_in_results=mcp,
        # A one-shot command counts tokens exactly only when its output is long; loading the
        # tokenizer ahead on a thread of its own competes with the run (~100 ms of a print(1)).
        preload_tokenizer=mcp,
    )


async def _with_host(args: argparse.Namespace, body: Callable[[Host], Awaitable[T]]) -> T:
    async with _host(args) as host:
        if args.mcp_config and args.command in ("call", "tools", "describe"):
            await host.connect_mcp_servers()  # their tools are known once connected
        return await body(host)


def _emit(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def _note(text: str) -> None:
    """One line for the person at the terminal, on stderr (after what stdout has so far)."""
    sys.stdout.flush()
    sys.stderr.write(f"codemode: {text}\n")
    sys.stderr.flush()


def _print_completions(host: Host) -> None:
    """Completions of the session's background processes, on stderr, each delivered once."""
    pending = host.pending_notifications()
    claimed = set(host.ack_notifications([n.id for n in pending])) if pending else set()
    notes = [n for n in pending if n.id in claimed]  # another channel may have delivered one
    redactor = host.archive.redactor
    for note in notes:
        text = note.text
        model_hint = f'. Read its output with bash({{action: "read", process_id: "{note.process_id}"}}).'
        if text.endswith(model_hint):
            text = text[: -len(model_hint)] + f"; `codemode logs {note.process_id}` prints its output"
        _note(redactor.one_line(text))


def _print_cut_hint(refs: list[str]) -> None:
    for ref in refs:
        _note(f"the output was cut; `codemode archive read {ref}` prints all of it")


def _unknown_tool(host: Host, name: str) -> str:
    close = host.registry.suggestions(name)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return (
        f"no tool named {name!r}.{hint} `codemode tools WORDS` searches the tools, "
        "`codemode tools` lists them all"
    )


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
        _emit(dumps_result(result) if args.json else result.text)
        if not args.json:
            _print_cut_hint(result.refs)
        _print_completions(host)
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
        if host.registry.get(args.tool) is None:
            raise ToolError(_unknown_tool(host, args.tool))
        result = await host.call_tool(args.tool, tool_args, max_output_tokens=args.max_output_tokens)
        _emit(dumps_result(result) if args.json else result.text)
        if not args.json:
            _print_cut_hint(result.refs)
        _print_completions(host)
        return 1 if result.is_error else 0

    return anyio.run(_with_host, args, body)


def _cmd_tools(args: argparse.Namespace) -> int:
    from codemode._surface import listed_names

    async def body(host: Host) -> int:
        query = " ".join(args.query)
        found = host.search_tools(query, limit=50)
        listed = listed_names(host.registry.names())  # what MCP clients and adapters list
        for item in found:
            if listed.get(item["name"], item["name"]) != item["name"]:
                item["listed_as"] = listed[item["name"]]
        if args.json:
            _emit(json.dumps(found, indent=2, ensure_ascii=False))
        else:
            width = max((len(item["name"]) for item in found), default=0)
            for item in found:
                first = item["description"].split(". ")[0]
                shown = f" (listed as {item['listed_as']})" if "listed_as" in item else ""
                _emit(f"{item['name']:<{width}}  {first}{shown}")
        if not found:
            _note(f"no tools match {query!r}; `codemode tools` with no words lists them all")
            return 1
        return 0

    return anyio.run(_with_host, args, body)


def _cmd_describe(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        if host.registry.get(args.name) is None:
            raise ToolError(_unknown_tool(host, args.name))
        described = host.describe_tool(args.name)
        if args.json:
            _emit(json.dumps(described, indent=2, ensure_ascii=False))
        else:
            _emit(f"{described['signature']}\n\n{described['description']}\n\ninput schema:")
            _emit(json.dumps(described["input_schema"], indent=2, ensure_ascii=False))
        return 0

    return anyio.run(_with_host, args, body)


def _dropped_note(ref: str, start: int, end: int, retained_from: int) -> str:
    why = (
        "older output was compacted away"
        if end <= retained_from
        else "dropped when the log outgrew its cap, which keeps its head and its tail"
    )
    return f"[bytes {start}-{end} of {ref} are not kept ({why}); skipped to byte {end}]"


def _cmd_archive_read(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        offset = args.offset
        remaining = args.limit
        out = sys.stdout.buffer
        data: list[bytes] = []
        dropped: list[list[int]] = []
        while remaining is None or remaining > 0:
            chunk = 1 << 20 if remaining is None else min(1 << 20, remaining)
            page = host.archive.read(args.ref, offset, chunk)
            if page.dropped is not None:
                start, end = page.dropped
                dropped.append([start, end])
                if not args.json:  # in the byte stream's place, so head and tail are never spliced
                    out.flush()
                    _note(_dropped_note(args.ref, start, end, page.retained_from))
            if args.json:
                data.append(page.data)
            else:
                out.write(page.data)
            offset = page.next_offset
            if remaining is not None:
                remaining -= len(page.data)
            if page.eof or not page.data:
                break
        if args.json:
            whole = {
                "ref": args.ref,
                "offset": args.offset,
                "next_offset": page.next_offset,
                "total_bytes": page.total_bytes,
                "eof": page.eof,
                "text": b"".join(data).decode("utf-8", errors="replace"),
                "dropped": dropped,
            }
            _emit(json.dumps(whole, indent=2, ensure_ascii=False))
        out.flush()
        return 0

    return anyio.run(_with_host, args, body)


def _state_dir_finding(args: argparse.Namespace) -> dict[str, str] | None:
    """The finding when the state directory lies inside the workspace (a confined mode refuses
    that: its commands could write codemode's own records), else None."""
    if args.sandbox == SandboxMode.FULL_ACCESS.value:
        return None
    state = Path(os.path.realpath((args.state_dir or default_state_dir()).expanduser()))
    workspace = Path(os.path.realpath(args.workspace.expanduser()))
    if not state.is_relative_to(workspace):
        return None
    return {
        "problem": f"the state directory {state} lies inside the workspace {workspace}, so sandboxed "
        "commands could change codemode's archive, logs and database: every codemode command but "
        "doctor refuses to run here",
        "fix": f"set CODEMODE_HOME (or pass --state-dir) to a directory outside {workspace}, e.g. "
        "`export CODEMODE_HOME=/var/tmp/codemode-$USER`; or run codemode in a project directory "
        "(cd there, or pass --workspace DIR)",
    }


def _settings_finding(exc: UserError) -> dict[str, str]:
    return {
        "problem": str(exc),
        "fix": "change the option or setting the problem names; every codemode command but doctor "
        "refuses these settings",
    }


def _layer_findings(facts: dict[str, Any]) -> list[dict[str, str]]:
    """A confined mode refuses every command when one of these layers cannot be applied."""
    box = facts["sandbox"]
    if box["mode"] == SandboxMode.FULL_ACCESS.value:
        return []
    return [
        {
            "problem": f"sandbox layer {layer['name']} is unavailable ({layer['detail']}): "
            f"in sandbox mode {box['mode']} every command is refused",
            "fix": "run codemode where the layer is available (see its detail), or choose "
            "`--sandbox full-access` (no confinement) if you accept that",
        }
        for layer in box["layers"]
        if layer["state"] == "unavailable" and layer["name"] != "cgroup per command"
    ]


def _cmd_doctor(args: argparse.Namespace) -> int:
    """Facts and findings. Runs whatever it finds: a problem that stops the other commands is
    reported with its fix (exit status 1), and the rest is still checked."""
    findings: list[dict[str, str]] = []
    scratch: str | None = None
    try:
        host = _host(args)
    except UserError as exc:
        finding = _state_dir_finding(args) or _settings_finding(exc)
        findings.append(finding)
        scratch = tempfile.mkdtemp(prefix="codemode-doctor-")
        try:
            host = _host(args, workspace=Path(scratch))
        except UserError as again:  # not the workspace: nothing more can be checked
            shutil.rmtree(scratch, ignore_errors=True)
            if str(again) != str(exc):
                findings.append(_settings_finding(again))
            _print_findings(findings, None, args.json)
            return 1
        finding["problem"] += (
            f" (the sandbox was checked with an empty temporary workspace, {scratch}, instead)"
        )

    async def body() -> dict[str, Any]:
        try:
            await host.open()
        except CodemodeError as exc:
            findings.append(
                {
                    "problem": f"the state directory cannot be used: {exc}",
                    "fix": "set CODEMODE_HOME (or pass --state-dir) to a directory you own that "
                    "codemode can create, outside the workspace",
                }
            )
        try:
            facts = host.doctor()
            facts["mcp_servers"] = await host.mcp_servers_report()
            return facts
        finally:
            await host.aclose()

    try:
        facts = anyio.run(body)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    findings.extend(_layer_findings(facts))
    for server in facts.get("mcp_servers", []):
        if not server["reachable"]:
            findings.append(
                {
                    "problem": f"MCP server {server['name']!r} is not reachable: {server['reason']}",
                    "fix": f"check its entry in --mcp-config; `codemode logs mcp:{server['name']}` prints its log",
                }
            )
    _print_findings(findings, facts, args.json)
    return 1 if findings else 0


def _print_findings(findings: list[dict[str, str]], facts: dict[str, Any] | None, as_json: bool) -> None:
    if as_json:
        _emit(json.dumps({**(facts or {}), "findings": findings}, indent=2))
        return
    lines: list[str] = []
    if facts is not None:
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
            f"state dir     {state['path']} "
            + (f"(mode {state['mode']})" if state["exists"] else "(not created yet)"),
            f"temp dirs     {facts['temp_dirs']['quota_mb']} MiB each, {facts['temp_dirs']['form']}: "
            f"{facts['temp_dirs']['detail']}",
            f"sandbox       {box['mode']}, network {'on' if box['network'] else 'off'}, "
            f"writable: {', '.join(box['writable_roots'])}",
            *box["summary"],
            "layers (checked by starting one confined command):",
            *(f"  {layer['name']:<20}{layer['state']:<13}{layer['detail']}" for layer in box["layers"]),
            *(_server_line(server) for server in facts.get("mcp_servers", [])),
        ]
    if findings:
        lines.append(f"problems found: {len(findings)}")
        for finding in findings:
            lines += [f"  - {finding['problem']}", f"    fix: {finding['fix']}"]
    else:
        lines.append("no problems found")
    _emit("\n".join(lines))


def _server_line(server: dict[str, Any]) -> str:
    """One doctor line for an MCP server (no env or header values: their names at most)."""
    where = server.get("url") or " ".join([server["command"], *server["args"]])
    if server["reachable"]:
        info = server["server"]
        state = f"reachable, {server['tools']} tools, {info['name']} {info['version']}"
    else:
        state = f"NOT reachable: {server['reason']}"
    confined = f", {server['sandbox']}" if server["transport"] == "stdio" else ""
    return f"mcp server    {server['name']} ({server['transport']}{confined}: {where}): {state}"


_TOKEN_FILE_LIMIT = 4096


def _mcp_token(args: argparse.Namespace) -> str:
    """The HTTP front's token: ``--token-file``, else ``$CODEMODE_MCP_TOKEN``, else "" (make one).

    The variable is removed from this process's environment either way, so no process started
    later (a command, a supervisor, an upstream server) inherits it; never on a command line.

    Raises:
        UserError: ``--token`` was given, or the file cannot be read or holds no token.
    """
    from codemode._host_secrets import take_host_secret

    from_env = take_host_secret("CODEMODE_MCP_TOKEN") or ""
    if args.token is not None:
        raise UserError(
            "--token is not accepted: a command line is readable by every process on this machine "
            "(ps, /proc/PID/cmdline); put the token in a file and pass --token-file PATH, or set "
            "CODEMODE_MCP_TOKEN"
        )
    if args.token_file is None:
        return from_env
    try:
        with open(args.token_file, "rb") as f:
            data = f.read(_TOKEN_FILE_LIMIT + 1)
    except OSError as exc:
        raise UserError(f"--token-file {args.token_file!r}: cannot read it ({exc.strerror or exc})") from exc
    token = data.decode("utf-8", "replace").strip()
    if not token or len(data) > _TOKEN_FILE_LIMIT or any(c.isspace() for c in token):
        raise UserError(
            f"--token-file {args.token_file!r}: expected one token (a single word of at most "
            f"{_TOKEN_FILE_LIMIT} bytes, e.g. from `openssl rand -hex 32`)"
        )
    state = os.path.realpath((args.state_dir or default_state_dir()).expanduser())
    if os.path.commonpath([state, os.path.realpath(args.token_file)]) != state:
        # Commands run as this user and read everything but the state directory.
        _note(
            f"--token-file {args.token_file!r} is outside the state directory {state}: confined commands "
            "can read it (and with it, use this server); move it into the state directory"
        )
    return token


def _cmd_mcp(args: argparse.Namespace) -> int:
    from codemode import mcp

    token = _mcp_token(args)  # first: also over stdio, the variable leaves the environment

    def make_host() -> Host:  # made inside the front, which serves its errors to the client
        return _host(args)

    if args.http is None:
        listing = {"surface": args.tools, "output_schemas": args.output_schemas == "on"}
        anyio.run(lambda: mcp.serve_stdio(make_host, **listing))
        return 0
    bind, port = mcp.parse_bind(args.http)
    if not args.idle_timeout > 0:
        raise UserError(f"--idle-timeout must be a positive number of seconds, got {args.idle_timeout:g}")
    generated = not token
    if generated:
        import secrets

        token = secrets.token_urlsafe(32)

    def announce(url: str) -> None:  # once listening (nothing is printed for a bind that fails)
        if generated:
            _note(
                f"bearer token (generated; set CODEMODE_MCP_TOKEN or pass --token-file to choose one): {token}"
            )
        _note(f"serving MCP over streamable HTTP at {url}")  # last: the line that says it is ready

    options = mcp.HttpOptions(
        token=token,
        host=bind,
        port=port,
        allowed_origins=args.allow_origin,
        allowed_hosts=args.allow_host,
        idle_timeout_seconds=args.idle_timeout,
        surface=args.tools,
        output_schemas=args.output_schemas == "on",
    )
    anyio.run(lambda: mcp.serve_http(make_host, options, announce=announce))
    return 0


def _owner(host: Host, process_id: str) -> str:
    owner = host.processes.owner_of(process_id)
    if owner is None:
        raise ToolError(f"no such process {process_id!r}; `codemode ps --all` lists them")
    return owner


def _cmd_ps(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        rows = host.processes.list_processes(None if args.all else host.config.session_id, watchers=True)
        redactor = host.archive.redactor
        if args.json:  # JSON escapes every control character; commands are redacted whole
            _emit(json.dumps([{**r, "command": redactor.redact(r["command"])} for r in rows], indent=2))
            return 0
        if not rows:
            session = redactor.one_line(host.config.session_id)
            _emit("no processes" + ("" if args.all else f" in session {session!r} (try --all)"))
            return 0
        header = ("ID", "SESSION", "STATE", "EXIT", "LOG")
        table = [
            (
                r["process_id"],
                redactor.one_line(r["session_id"], 40),
                r["state"],
                "" if r["exit_code"] is None else str(r["exit_code"]),
                "" if r["log_bytes"] is None else str(r["log_bytes"]),
                redactor.one_line(r["command"], _PS_COMMAND_CHARS),
            )
            for r in rows
        ]
        # Every column as wide as its widest value; EXIT and LOG are numbers, aligned right.
        widths = [max(len(header[i]), *(len(row[i]) for row in table)) for i in range(len(header))]

        def line(cells: Sequence[str]) -> str:
            ident, session, state, exit_code, size, command = cells
            return (
                f"{ident:<{widths[0]}}  {session:<{widths[1]}}  {state:<{widths[2]}}  "
                f"{exit_code:>{widths[3]}}  {size:>{widths[4]}}  {command}"
            )

        _emit(line((*header, "COMMAND")))
        for row in table:
            _emit(line(row))
        return 0

    return anyio.run(_with_host, args, body)


def _cmd_logs(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        if args.process_id.startswith("mcp:"):  # an MCP server's log (its stderr), redacted
            _emit(host.mcp_server_log(args.process_id[len("mcp:") :]))
            return 0
        owner = _owner(host, args.process_id)
        offset = 0
        output: list[str] = []
        notes: list[str] = []
        while True:
            page = await host.processes.read(
                owner, args.process_id, offset, 1 << 20, 1000 if args.follow else None
            )
            note = page.get("note")
            if note:  # bytes the capped log no longer keeps: said where they were, never spliced
                notes.append(note)
                if not args.json:
                    _note(f"[{note}]")
            if args.json:
                output.append(page["output"])
            else:
                sys.stdout.write(page["output"])
                sys.stdout.flush()
            offset = page["next_offset"]
            if page["eof"] and (page["exited"] or not args.follow):
                break
        if args.json:
            keys = ("process_id", "state", "exited", "exit_code", "total_bytes", "next_offset")
            whole = {
                "session_id": owner,
                **{k: page[k] for k in keys},
                "output": "".join(output),
                "notes": notes,
            }
            _emit(json.dumps(whole, indent=2, ensure_ascii=False))
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
        session = args.session_id
        if not host.session_exists(session):
            raise ToolError(
                f"no session {session!r} in {host.archive.state_dir}: nothing is recorded under that id "
                "(no program run, store value, archived text or background process); "
                "`codemode ps --all` shows the sessions of background processes"
            )

        def live() -> list[str]:
            return [
                r["process_id"]
                for r in host.processes.list_processes(session)
                if r["lifecycle"] == "session" and r["state"] in _LIVE_STATES
            ]

        before = live()
        await host.close_session(session)
        still_running = live()
        stopped = [p for p in before if p not in still_running]
        if args.json:
            _emit(
                json.dumps(
                    {"session_id": session, "stopped": stopped, "still_running": still_running}, indent=2
                )
            )
        elif stopped:
            _emit(f"session {session} closed: stopped {len(stopped)} process(es): {', '.join(stopped)}")
        else:
            _emit(f"session {session} closed: it had no running lifecycle=session processes")
        if still_running:
            _note(
                f"could not stop {', '.join(still_running)}; `codemode stop ID` says why, "
                "`codemode ps --all` shows them"
            )
            return 1
        return 0

    return anyio.run(_with_host, args, body)


def _cmd_trash(args: argparse.Namespace) -> int:
    trash = Trash((args.state_dir or default_state_dir()).expanduser(), args.workspace.expanduser().resolve())
    trash.file_all()
    if args.trash_command == "restore":
        entry = trash.restore(args.entry_id)
        _emit(entry.model_dump_json(indent=2) if args.json else f"restored {entry.path} ({entry.kind})")
        return 0
    if args.trash_command == "empty":
        removed = trash.empty()
        _emit(json.dumps({"removed": removed}) if args.json else f"deleted {removed} trash entries for good")
        return 0
    entries = trash.entries()
    if args.json:
        _emit(json.dumps([e.model_dump() for e in entries], indent=2))
    elif not entries:
        _emit(f"the trash of {trash.workspace} is empty")
    else:
        for e in entries:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.deleted_at))
            shown = e.path.removeprefix(str(trash.workspace) + "/") + ("/" if e.kind == "directory" else "")
            _emit(f"{e.id}  {when}  {e.kind:9}  {shown}")
    return 0


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
    "trash": _cmd_trash,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``codemode`` console script; returns the exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    # The first word names the subcommand (the top level takes only --help and --version).
    only = words[0] if words and words[0] in _SUBCOMMANDS else None
    args = build_parser(only).parse_args(words)
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


if __name__ == "__main__":  # pragma: no cover
    entry_point()
