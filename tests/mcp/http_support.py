"""A real `codemode mcp --http` subprocess for the tests, and SDK clients connected to it."""

from __future__ import annotations

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

import anyio
import httpx2
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
    url: str, *, token: str = TOKEN, terminate_on_close: bool = True
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session over streamable HTTP (the handshake era)."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        streamable_http_client(url, http_client=http, terminate_on_close=terminate_on_close) as (read, write),
        ClientSession(read, write) as client,
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
