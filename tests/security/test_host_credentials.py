"""No host credential reaches a command, and a command that reaches the host's front gets nothing.

The attack (issue 27, item 1): a confined command read ``CODEMODE_MCP_TOKEN`` from its
environment (or ``--token`` from the host's command line), connected to the host's streamable
HTTP front on 127.0.0.1, opened its own MCP session and answered its own approvals. Here a real
`codemode mcp --http` server runs commands that look for the token everywhere they can read and
knock on the front without it.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from codemode import Host
from codemode._host_secrets import is_host_secret, without_host_secrets
from codemode.errors import UserError
from codemode.mcp import HttpOptions

pytestmark = pytest.mark.anyio

_ENV_SERVER = Path(__file__).resolve().parent / "_env_server.py"
_URL_LINE = re.compile(r"serving MCP over streamable HTTP at (\S+)")


@dataclass
class _Server:
    url: str
    pid: int
    stderr: Path
    workspace: Path


@contextmanager
def _http_server(tmp_path: Path, *args: str, env: dict[str, str]) -> Iterator[_Server]:
    """A real `codemode mcp --http 127.0.0.1:0` (network on for commands), stopped after."""
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir(exist_ok=True)
    stderr = tmp_path / "server.stderr"
    command = [sys.executable, "-m", "codemode", "mcp", "--http", "127.0.0.1:0", "--network", "on"]
    command += ["--workspace", str(workspace), "--state-dir", str(state), *args]
    with stderr.open("wb") as sink:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink, env=env
        )
    try:
        deadline = time.monotonic() + 30
        while not (found := _URL_LINE.search(stderr.read_text())):
            assert process.poll() is None, f"the server exited: {stderr.read_text()}"
            assert time.monotonic() < deadline, f"the server printed no URL: {stderr.read_text()}"
            time.sleep(0.05)
        yield _Server(found.group(1), process.pid, stderr, workspace)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@asynccontextmanager
async def _session(url: str, token: str, **options: Any) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, **options) as client,
    ):
        await client.initialize()
        yield client


def _text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def test_the_table_names_the_hosts_secrets_and_nothing_else() -> None:
    env = {
        "CODEMODE_MCP_TOKEN": "t",
        "CODEMODE_DATABASE_URL": "postgres://u:p@h/db",
        "CODEMODE_UPSTREAM_TOKEN": "t",
        "CODEMODE_HOME": "/s",
        "CODEMODE_TIKTOKEN_DOWNLOAD": "1",
        "GITHUB_TOKEN": "the user's own, for their commands",
        "PATH": "/bin",
    }
    assert without_host_secrets(env) == {
        "CODEMODE_HOME": "/s",
        "CODEMODE_TIKTOKEN_DOWNLOAD": "1",
        "GITHUB_TOKEN": "the user's own, for their commands",
        "PATH": "/bin",
    }
    assert is_host_secret("CODEMODE_MCP_TOKEN") and not is_host_secret("CODEMODE_PROCESS_ID")


def test_the_front_refuses_an_empty_or_short_token() -> None:
    for weak in ("", "short"):
        with pytest.raises(UserError, match="at least 16 characters"):
            HttpOptions(token=weak)


@pytest.mark.blackbox  # starts codemode as a separate process
async def test_a_confined_command_finds_no_token_and_the_front_refuses_it(
    tmp_path: Path, database_url: str
) -> None:
    token = secrets.token_hex(32)  # the one the server uses, from its file
    env_token = secrets.token_hex(32)  # also set in its environment: it must vanish too
    token_file = tmp_path / "state" / "mcp-token"
    token_file.parent.mkdir()
    token_file.write_text(token + "\n")
    env = {
        **os.environ,
        "CODEMODE_MCP_TOKEN": env_token,
        # A real shared database the server uses (the test cluster ignores the password).
        "CODEMODE_DATABASE_URL": f"{database_url} password=hunter2hunter2",
        "CODEMODE_PROBE_VISIBLE": "yes",  # an ordinary variable: commands see it
    }
    with _http_server(tmp_path, "--token-file", str(token_file), env=env) as server, anyio.fail_after(90):
        # What a command can find, written to a file (files are not redacted; the output is).
        probe = (
            "env > env.txt; "
            f"tr '\\0' '\\n' < /proc/{server.pid}/cmdline > cmdline.txt; "
            f"cat /proc/{server.pid}/environ > environ.txt 2> environ.err; "
            f"for pid in /proc/[0-9]*; do cat $pid/cmdline; echo; done > all-cmdlines.txt 2>/dev/null; "
            # Knock on the front: no token, then a guessed one.
            f"curl -s -o /dev/null -w '%{{http_code}} ' -X POST {server.url} > knock.txt; "
            f"curl -s -o /dev/null -w '%{{http_code}}' -X POST -H 'Authorization: Bearer guess' {server.url} >> knock.txt"
        )
        async with _session(server.url, token) as client:
            result = await client.call_tool("bash", {"command": probe})
            assert not result.is_error, _text(result)
            # Background processes (and their supervisors) start from the same scrubbed environment.
            started = await client.call_tool(
                "bash", {"command": "env > bg-env.txt", "run_in_background": True}
            )
            pid = (started.structured_content or {})["process_id"]
            waited = await client.call_tool("bash", {"action": "wait", "process_id": pid})
            assert not waited.is_error, _text(waited)
        ws = server.workspace
        seen = {
            name: (ws / name).read_text()
            for name in ("env.txt", "bg-env.txt", "cmdline.txt", "all-cmdlines.txt")
        }
        assert (
            "CODEMODE_PROBE_VISIBLE=yes" in seen["env.txt"]
            and "CODEMODE_PROBE_VISIBLE=yes" in seen["bg-env.txt"]
        )
        assert "--token-file" in seen["cmdline.txt"]  # the command line was readable: it holds no token
        for name, text in seen.items():
            for secret in (token, env_token, "hunter2hunter2"):
                assert secret not in text, f"{name} shows a host secret"
        # The host's kernel copy of its environment (which still holds the variable it removed
        # from its own) is out of a confined command's reach.
        assert (ws / "environ.txt").read_text() == "" and "Permission denied" in (
            ws / "environ.err"
        ).read_text()

        assert (ws / "knock.txt").read_text() == "401 401"
        deadline = time.monotonic() + 30
        while "refused an HTTP request from 127.0.0.1" not in server.stderr.read_text():
            assert time.monotonic() < deadline, server.stderr.read_text()
            await anyio.sleep(0.05)
        assert "no bearer token" in server.stderr.read_text()
        assert token not in server.stderr.read_text()  # a token from the file is never printed


@pytest.mark.blackbox  # starts codemode as a separate process
def test_the_token_is_refused_on_the_command_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "codemode", "mcp", "--http", "127.0.0.1:0", "--token", secrets.token_hex(16)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CODEMODE_HOME": str(tmp_path / "state")},
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert "--token-file" in done.stderr and "CODEMODE_MCP_TOKEN" in done.stderr, done.stderr
    assert "serving MCP" not in done.stderr


@pytest.mark.blackbox  # starts codemode as a separate process
def test_an_empty_token_file_is_refused_with_what_to_put_there(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    done = subprocess.run(
        [sys.executable, "-m", "codemode", "mcp", "--http", "127.0.0.1:0", "--token-file", str(empty)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CODEMODE_HOME": str(tmp_path / "state")},
        cwd=tmp_path,
    )
    assert done.returncode != 0 and "expected one token" in done.stderr, done.stderr


@pytest.mark.blackbox  # starts codemode as a separate process
async def test_a_session_never_answers_another_sessions_approval(tmp_path: Path) -> None:
    """Approvals go to the client of the session whose program asked: a second session (say,
    one a command opened with a stolen token) is never asked, so it cannot answer for it."""
    token = secrets.token_hex(32)
    asked: dict[str, int] = {"owner": 0, "other": 0}

    def answering(who: str, choice: str) -> Any:
        async def answer(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked[who] += 1
            assert isinstance(params, types.ElicitRequestFormParams)  # codemode asks with a form
            return types.ElicitResult(
                action="accept", content={key: choice for key in params.requested_schema["properties"]}
            )

        return answer

    program = "await tools.write_file({path: 'a.txt', content: 'a'}); print('written')"
    env = {**os.environ, "CODEMODE_MCP_TOKEN": token}
    with _http_server(tmp_path, env=env) as server, anyio.fail_after(90):
        async with (
            _session(server.url, token, elicitation_callback=answering("owner", "deny")) as owner,
            _session(server.url, token, elicitation_callback=answering("other", "allow")) as other,
        ):
            await other.list_tools()  # the other session is open and listening
            result = await owner.call_tool("run_code", {"code": program})
    assert asked == {"owner": 1, "other": 0}
    assert "written" not in _text(result) and not (server.workspace / "a.txt").exists()


async def test_an_upstream_server_gets_only_the_environment_its_configuration_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEMODE_MCP_TOKEN", secrets.token_hex(32))
    monkeypatch.setenv("CODEMODE_DATABASE_URL", "postgres://codemode:hunter2hunter2@db/codemode")
    monkeypatch.setenv("SOME_HOST_VARIABLE", "the host's, not the server's")
    entry = {"command": sys.executable, "args": [str(_ENV_SERVER)], "env": {"CONFIGURED": "1"}}
    servers = {"plain": entry, "boxed": {**entry, "sandbox": "read-only"}}
    workspace = tmp_path / "ws"
    workspace.mkdir()
    program = "print(await tools.plain.names({})); print(await tools.boxed.names({}))"
    host = Host(workspace=workspace, state_dir=tmp_path / "state", mcp_servers={"mcpServers": servers})
    async with host:
        with anyio.fail_after(60):
            result = await host.run_code(program)
    assert result.ok, result.text
    plain, boxed = (set(line.split()) for line in result.text.strip().splitlines())
    for seen in (plain, boxed):
        assert {"CONFIGURED", "PATH", "HOME"} <= seen  # what it was given, and the SDK's safe few
        assert not seen & {"CODEMODE_MCP_TOKEN", "CODEMODE_DATABASE_URL", "SOME_HOST_VARIABLE"}, seen


@pytest.mark.blackbox  # starts codemode as a separate process
def test_a_token_file_commands_can_read_is_pointed_out(tmp_path: Path) -> None:
    outside = tmp_path / "token"
    outside.write_text(secrets.token_hex(32))
    env = {**os.environ, "CODEMODE_HOME": str(tmp_path / "state")}
    with _http_server(tmp_path, "--token-file", str(outside), env=env) as server:
        assert "is outside the state directory" in server.stderr.read_text()


async def test_a_command_gets_neither_the_database_url_nor_a_connection_to_it(
    tmp_path: Path, database_url: str
) -> None:
    """With a shared database, the host holds its URL (a password) and pooled connections to
    it: a command finds the URL in no variable and no connection among its open files."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with Host(workspace=workspace, state_dir=tmp_path / "state", database_url=database_url) as host:
        await host.run_code('await store.set("k", 1)')  # the pool holds a connection now
        found = await host.run_code(
            'const r = await tools.bash({command: "env; ls -l /proc/self/fd/; cat /proc/$PPID/environ | tr \\"\\\\0\\" \\"\\\\n\\""});'
            "print(r.stdout.excerpt)"
        )
        assert found.ok, found
        assert "search_path" not in found.text and "CODEMODE_DATABASE_URL" not in found.text
        fds = [line for line in found.text.splitlines() if " -> " in line]
        assert fds and not [line for line in fds if "socket:" in line], fds
