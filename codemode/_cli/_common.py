"""What every subcommand shares: the common options, the Host a command line names (and its
approval prompt at the terminal), and the output helpers (the result on stdout, notes on stderr)."""

from __future__ import annotations

import argparse
import os
import stat
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from codemode._results import default_state_dir
from codemode.errors import CodemodeError, UserError
from codemode.host import Host
from codemode.policy import ApprovalKind, ApprovalRequest, ApproveCallback, CommandPolicy, Decision
from codemode.sandbox import SandboxMode
from codemode.tools.upstream import load_mcp_config

T = TypeVar("T")


Subparsers = Any  # argparse's subparsers action (its class is private)


def common(parser: argparse.ArgumentParser, json_help: str | None = "print the whole result as JSON") -> None:
    """The options every subcommand takes; ``--json`` only where ``json_help`` says what it prints."""
    parser.add_argument("--workspace", type=Path, default=Path.cwd(), help="workspace root (default: .)")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="state directory (default: $CODEMODE_HOME or XDG state)"
    )
    parser.add_argument(
        "--database-url-file",
        default=None,
        metavar="PATH",
        help="a shared PostgreSQL database's URL, read from PATH (default: $CODEMODE_DATABASE_URL; "
        "none: the state directory holds everything); keep the file in the state directory",
    )
    parser.add_argument(
        "--archive-url-file",
        default=None,
        metavar="PATH",
        help="an S3-compatible store for the shared copies of archived text, its URL "
        "(s3://[KEY:SECRET@]BUCKET[/PREFIX][?endpoint=URL&region=NAME]) read from PATH (default: "
        "$CODEMODE_ARCHIVE_URL; none: the shared database holds them); needs a database URL",
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
        "--network-allow",
        action="append",
        default=None,
        metavar="DOMAIN",
        help="sandboxed commands reach only these domains, through the host's proxy (repeatable; "
        "*.example.org for its subdomains)",
    )
    parser.add_argument(
        "--engine",
        choices=["process", "thread"],
        default=None,
        help="where programs run: process (a confined worker process each; default, or $CODEMODE_ENGINE) "
        "or thread (in this process: lowest latency, for trusted programs)",
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
        help="bash commands off the read-only allowlist need approval (over MCP: the client's user, or the "
        "console's with --approvals console)",
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


def count(minimum: int) -> Callable[[str], int]:
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


def terminal_approval(args: argparse.Namespace) -> ApproveCallback | None:
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
        always = "" if request.kind is ApprovalKind.ESCALATION else "[a]lways this session, "
        sys.stderr.write(f"codemode: approve {request.summary}? [y]es, {always}[N]o: ")
        sys.stderr.flush()
        answer = _APPROVAL_ANSWERS.get(sys.stdin.readline().strip().lower())
        return answer or Decision.deny("refused at the terminal")

    async def approve(requests: list[ApprovalRequest]) -> list[Decision]:
        return [await anyio.to_thread.run_sync(ask, request) for request in requests]

    return approve


def read_secret_file(path: str, flag: str, limit: int, state_dir: Path | None, too_large: str) -> str:
    """The text of a token or tenants file (at most ``limit`` bytes); a note on stderr when it
    lies outside the state directory, where confined commands can read it. A link is followed
    (a mounted secret is one), but only a regular file is read: a FIFO or a device where the
    file should be would hang or flood the start.

    Raises:
        UserError: It cannot be read, is not a regular file, or is larger than ``limit``
            (``too_large``).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise UserError(f"{flag} {path!r}: cannot read it ({exc.strerror or exc})") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(
                f"{flag} {path!r}: not a regular file (a FIFO, device or directory); point it at a file"
            )
        data = os.read(fd, limit + 1)
    except OSError as exc:
        raise UserError(f"{flag} {path!r}: cannot read it ({exc.strerror or exc})") from exc
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UserError(too_large)
    state = os.path.realpath((state_dir or default_state_dir()).expanduser())
    if os.path.commonpath([state, os.path.realpath(path)]) != state:
        # Commands run as this user and read everything but the state directory.
        stderr_note(
            f"{flag} {path!r} is outside the state directory {state}: confined commands "
            "can read it (and with it, use this server); move it into the state directory"
        )
    return data.decode("utf-8", "replace")


_URL_FILE_LIMIT = 8192


def database_url(args: argparse.Namespace) -> str | None:
    """The shared database's URL: ``--database-url-file``, else ``$CODEMODE_DATABASE_URL``, else
    None. The variable leaves this process's environment either way (no command or supervisor
    started later inherits it); a URL is never taken from the command line.

    Raises:
        UserError: The file cannot be read or holds no URL.
    """
    return _secret_url(
        args, "--database-url-file", args.database_url_file, "CODEMODE_DATABASE_URL", "database"
    )


def archive_url(args: argparse.Namespace) -> str | None:
    """The archive store's URL: ``--archive-url-file``, else ``$CODEMODE_ARCHIVE_URL``, else None
    (read as `database_url` reads its own).

    Raises:
        UserError: The file cannot be read or holds no URL.
    """
    return _secret_url(
        args, "--archive-url-file", args.archive_url_file, "CODEMODE_ARCHIVE_URL", "archive store"
    )


def _secret_url(
    args: argparse.Namespace, flag: str, path: str | None, variable: str, what: str
) -> str | None:
    from codemode._host_secrets import take_host_secret

    from_env = take_host_secret(variable) or None
    if path is None:
        return from_env
    expected = f"{flag} {path!r}: expected one {what} URL of at most {_URL_FILE_LIMIT} bytes"
    url = read_secret_file(path, flag, _URL_FILE_LIMIT, args.state_dir, expected).strip()
    if not url or "\n" in url:
        raise UserError(expected)
    return url


def cli_host(args: argparse.Namespace, workspace: Path | None = None) -> Host:
    mcp = args.command == "mcp"
    url = database_url(args)
    store = archive_url(args)
    servers = [server for path in args.mcp_config for server in load_mcp_config(path)]
    return Host(
        approve=terminal_approval(args),
        mcp_servers=servers,
        connect_mcp_at_open=mcp,  # an MCP client lists the tools first: have them by then
        workspace=workspace or args.workspace,
        state_dir=args.state_dir or default_state_dir(),
        database_url=url,
        archive_url=store,
        session_id=args.session or ("mcp-" + uuid.uuid4().hex[:12] if mcp else "cli"),
        sandbox=SandboxMode(args.sandbox),
        network=args.network == "on",
        network_allow=None if args.network_allow is None else tuple(args.network_allow),
        **({"engine": args.engine} if args.engine else {}),
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


async def with_host(args: argparse.Namespace, body: Callable[[Host], Awaitable[T]]) -> T:
    async with cli_host(args) as host:
        if args.mcp_config and args.command in ("call", "tools", "describe"):
            await host.connect_mcp_servers()  # their tools are known once connected
        return await body(host)


def emit(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def stderr_note(text: str) -> None:
    """One line for the person at the terminal, on stderr (after what stdout has so far)."""
    sys.stdout.flush()
    sys.stderr.write(f"codemode: {text}\n")
    sys.stderr.flush()


def print_completions(host: Host) -> None:
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
        stderr_note(redactor.one_line(text))


def print_cut_hint(refs: list[str]) -> None:
    for ref in refs:
        stderr_note(f"the output was cut; `codemode archive read {ref}` prints all of it")


def unknown_tool(host: Host, name: str) -> str:
    close = host.registry.suggestions(name)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return (
        f"no tool named {name!r}.{hint} `codemode tools WORDS` searches the tools, "
        "`codemode tools` lists them all"
    )
