"""``mcp``: serve run_code and the tools over MCP (stdio or streamable HTTP), and the HTTP
front's bearer token."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import anyio

from codemode._cli._common import (
    Subparsers,
    cli_host,
    common,
    read_secret_file,
    stderr_note,
)
from codemode.errors import UserError
from codemode.host import Host

if TYPE_CHECKING:
    from collections.abc import Callable

    from codemode import mcp as mcp_types
    from codemode.mcp import Tenants


def add_mcp(sub: Subparsers) -> None:
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
    mcp.add_argument(
        "--tenants-file",
        default=None,
        metavar="PATH",
        help="instead of one token, a line `NAME TOKEN` per tenant: each MCP session belongs to the "
        "tenant that opened it, and no other tenant's request reaches it; keep the file in the state directory",
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
        "--max-requests",
        type=int,
        default=1024,
        metavar="N",
        help="HTTP requests in flight at once (default 1024); one more is answered 503 with Retry-After at once",
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
    mcp.add_argument(
        "--console",
        choices=("on", "read-only", "off"),
        default="on",
        help="with --http, a console in the browser at /console (log in with the token): watch programs, "
        "calls and terminals live, take a terminal over, answer approvals; read-only: it only shows (default on)",
    )
    mcp.add_argument(
        "--approvals",
        choices=("elicit", "console"),
        default="elicit",
        help="who answers approvals: elicit (the MCP client's user, through elicitation; the default) or "
        "console (a person at /console; needs --http and --console on)",
    )
    mcp.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="with --http, serve the port with N front processes on this state directory (one core each), "
        "each session kept on the process that opened it (default 1)",
    )
    # A front process behind --processes: the address its clients reach (the router's).
    mcp.add_argument("--behind", default=None, help=argparse.SUPPRESS)
    # With a shared database, seconds between a front's beats (HttpOptions.beat_seconds): for
    # drills and tests of the fence, which otherwise take a minute; every front must agree.
    mcp.add_argument("--beat-seconds", type=float, default=None, help=argparse.SUPPRESS)
    common(mcp, None)  # speaks JSON-RPC on stdout: there is no other output to format


_TOKEN_FILE_LIMIT = 4096


_TENANTS_FILE_LIMIT = 1024 * 1024


def _mcp_tenants(args: argparse.Namespace, token: str) -> Tenants | None:
    """``--tenants-file``'s tenants, or None without one.

    Raises:
        UserError: The file cannot be read or is not valid, or a token was given too.
    """
    if args.tenants_file is None:
        return None
    if token:
        raise UserError(
            "--tenants-file names every token: drop --token-file and CODEMODE_MCP_TOKEN (or the tenants file)"
        )
    from codemode.mcp import parse_tenants

    too_large = f"--tenants-file {args.tenants_file!r}: larger than {_TENANTS_FILE_LIMIT} bytes"
    text = read_secret_file(
        args.tenants_file, "--tenants-file", _TENANTS_FILE_LIMIT, args.state_dir, too_large
    )
    return parse_tenants(text, f"--tenants-file {args.tenants_file!r}")


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
    expected = (
        f"--token-file {args.token_file!r}: expected one token (a single word of at most "
        f"{_TOKEN_FILE_LIMIT} bytes, e.g. from `openssl rand -hex 32`)"
    )
    text = read_secret_file(args.token_file, "--token-file", _TOKEN_FILE_LIMIT, args.state_dir, expected)
    token = text.strip()
    if not token or any(c.isspace() for c in token):
        raise UserError(expected)
    return token


def cmd_mcp(args: argparse.Namespace) -> int:
    from codemode import mcp
    from codemode.console import ConsoleMode

    token = _mcp_token(args)  # first: also over stdio, the variable leaves the environment
    tenants = _mcp_tenants(args, token)

    def make_host() -> Host:  # made inside the front, which serves its errors to the client
        return cli_host(args)

    if args.http is None:
        if args.approvals == "console":
            raise UserError("--approvals console answers approvals at the console, which --http serves")
        listing = {"surface": args.tools, "output_schemas": args.output_schemas == "on"}
        anyio.run(lambda: mcp.serve_stdio(make_host, **listing))
        return 0
    bind, port = mcp.parse_bind(args.http)
    if not args.idle_timeout > 0:
        raise UserError(f"--idle-timeout must be a positive number of seconds, got {args.idle_timeout:g}")
    generated = not token and tenants is None
    if generated:
        import secrets

        token = secrets.token_urlsafe(32)

    def announce(url: str) -> None:  # once listening (nothing is printed for a bind that fails)
        if args.behind is not None:  # a front process behind --processes: its router announces
            stderr_note(f"front process listening at {url}")
            return
        if generated:
            stderr_note(
                f"bearer token (generated; set CODEMODE_MCP_TOKEN or pass --token-file to choose one): {token}"
            )
        if args.console != "off":
            stderr_note(f"console at {url.removesuffix('/mcp')}/console (log in with the token)")
        stderr_note(f"serving MCP over streamable HTTP at {url}")  # last: the line that says it is ready

    behind = None if args.behind is None else mcp.parse_bind(args.behind)
    router_pid = None if behind is None else mcp.stop_with_router()
    options = mcp.HttpOptions(
        token=token,
        tenants=tenants,
        host=bind,
        port=port,
        allowed_origins=args.allow_origin,
        allowed_hosts=args.allow_host,
        idle_timeout_seconds=args.idle_timeout,
        max_requests=args.max_requests,
        surface=args.tools,
        output_schemas=args.output_schemas == "on",
        console=ConsoleMode(args.console),
        approvals=args.approvals,
        front_address=behind,
        router_pid=router_pid,
        **({} if args.beat_seconds is None else {"beat_seconds": args.beat_seconds}),
    )
    if args.processes != 1:
        return _serve_routed(args, options, token, announce)
    anyio.run(lambda: mcp.serve_http(make_host, options, announce=announce))
    return 0


_ROUTER_OWN = ("--http", "--processes", "--behind")


def _serve_routed(
    args: argparse.Namespace, options: mcp_types.HttpOptions, token: str, announce: Callable[[str], None]
) -> int:
    """``--processes N``: this process routes the port to N front processes (`serve_routed`),
    each this command with ``--http unix:PATH``; only the first serves the console."""
    import os
    import sys

    from codemode.mcp import serve_routed

    if not 2 <= args.processes <= 64:
        raise UserError(f"--processes must be 1 to 64, got {args.processes}")
    if args.approvals == "console":
        raise UserError(
            "--approvals console waits in the process that asked, and the console is one process's: "
            "use --processes 1, or --approvals elicit"
        )
    if options.host.startswith("unix:"):
        raise UserError("--processes serves a TCP port: give --http [HOST:]PORT")
    words = _without(list(args.words), (*_ROUTER_OWN, "--console"))

    def front_argv(index: int, socket_path: str, behind: str) -> list[str]:
        console = args.console if index == 0 else "off"
        return [
            sys.executable,
            "-m",
            "codemode",
            *words,
            "--http",
            f"unix:{socket_path}",
            "--behind",
            behind,
            "--console",
            console,
        ]

    env = dict(os.environ)
    if token and args.token_file is None:  # taken from the environment or made here: passed on so
        env["CODEMODE_MCP_TOKEN"] = token  # (each front process takes it out of its own at start)
    anyio.run(lambda: serve_routed(options, args.processes, front_argv, env, announce))
    return 0


def _without(words: list[str], names: tuple[str, ...]) -> list[str]:
    """``words`` without the options ``names`` and their values (``--name V``, ``--name=V``, or
    an abbreviation argparse took for one of them)."""
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        name, eq, _value = word.partition("=")
        if name.startswith("--") and len(name) > 2 and any(full.startswith(name) for full in names):
            skip = not eq
            continue
        kept.append(word)
    return kept
