"""A real `codemode mcp --http` subprocess for the tests, and SDK clients connected to it."""

from __future__ import annotations

import json
import os
import re
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
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.host_support import alive

TOKEN = "test-token-0123456789"
_URL_LINE = re.compile(r"serving MCP over streamable HTTP at (\S+)")


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen[bytes]
    stderr: Path
    state_dir: Path
    workspace: Path


@contextmanager
def http_server(
    tmp_path: Path,
    *extra: str,
    name: str = "srv",
    env: dict[str, str] | None = None,
    bind: str = "127.0.0.1:0",
) -> Iterator[HttpServer]:
    """Start `codemode mcp --http 127.0.0.1:0` (a free port; or ``bind``) and stop it (SIGTERM)
    after."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    state_dir = tmp_path / "state"
    stderr = tmp_path / f"{name}.stderr"
    environ = {**os.environ, "CODEMODE_MCP_TOKEN": TOKEN, **(env or {})}
    args = ["--workspace", str(workspace), "--state-dir", str(state_dir), *extra]
    with stderr.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "codemode", "mcp", "--http", bind, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env=environ,
        )
    try:
        url = _wait_for_url(process, stderr)
        yield HttpServer(url, process, stderr, state_dir, workspace)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for_url(process: subprocess.Popen[bytes], stderr: Path) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = _URL_LINE.search(stderr.read_text())
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise AssertionError(f"codemode mcp --http exited {process.returncode}: {stderr.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"codemode mcp --http printed no URL: {stderr.read_text()}")


@asynccontextmanager
async def session(
    url: str, *, token: str = TOKEN, terminate_on_close: bool = True, client_name: str | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session over streamable HTTP (the handshake era); ``client_name``:
    the ``clientInfo`` it gives (default: the SDK's)."""
    info = None if client_name is None else types.Implementation(name=client_name, version="1.0")
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        streamable_http_client(url, http_client=http, terminate_on_close=terminate_on_close) as (read, write),
        ClientSession(read, write, client_info=info) as client,
    ):
        await client.initialize()
        yield client


async def wait_until_gone(pid: int, seconds: float = 30) -> bool:
    """Whether process ``pid`` ends (or is a zombie) within ``seconds`` (polled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await anyio.sleep(0.05)
    return False


# ---- raw HTTP (requests the SDK client would not send, headers it would not show) -----------

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
RAW_PROTOCOL = "2025-06-18"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": RAW_PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def auth(token: str = TOKEN) -> dict[str, str]:
    """The headers of a request with this bearer token."""
    return {**ACCEPT, "Authorization": f"Bearer {token}"}


@dataclass
class RawSession:
    """A session opened by hand: the headers of its requests, and the resume secret the server
    sent when it opened."""

    headers: dict[str, str]
    resume_secret: str


async def open_raw(
    http: httpx2.AsyncClient, url: str, *, token: str = TOKEN, resume: str | None = None
) -> RawSession:
    """Open a session by hand (initialize, then initialized), resuming one given its secret."""
    opened = await http.post(
        url, headers={**auth(token), **({"Codemode-Resume": resume} if resume else {})}, json=INITIALIZE
    )
    assert opened.status_code == 200, opened.text
    headers = {
        **auth(token),
        "Mcp-Session-Id": opened.headers["mcp-session-id"],
        "MCP-Protocol-Version": RAW_PROTOCOL,
    }
    await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return RawSession(headers, opened.headers["codemode-resume-secret"])


def run_code_call(code: str) -> dict[str, Any]:
    """A JSON-RPC ``tools/call`` of run_code."""
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "run_code", "arguments": {"code": code}},
    }


def rpc_answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a response (a JSON body, or the last ``data:`` of an SSE stream)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        parsed: dict[str, Any] = json.loads(data[-1])
        return parsed
    answer: dict[str, Any] = response.json()
    return answer
