"""The console of a real `codemode mcp --http`: a logged-in HTTP client, its event stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2

from tests.mcp.http_support import TOKEN, HttpServer

KEY_HEADER = "X-Codemode-Console"


def base_of(server: HttpServer) -> str:
    return server.url.removesuffix("/mcp")


def same_origin(server: HttpServer) -> dict[str, str]:
    """The headers the console's own page sends with a POST."""
    return {"Origin": base_of(server), "Content-Type": "application/json"}


@asynccontextmanager
async def console(server: HttpServer, token: str = TOKEN) -> AsyncIterator[httpx2.AsyncClient]:
    """An HTTP client logged in to the server's console (its cookie kept)."""
    async with httpx2.AsyncClient(base_url=base_of(server), timeout=httpx2.Timeout(30)) as web:
        answer = await web.post("/console/login", json={"token": token}, headers=same_origin(server))
        assert answer.status_code == 200, answer.text
        web.headers[KEY_HEADER] = answer.json()["key"]  # what the page sends from its tab's storage
        yield web


async def post(web: httpx2.AsyncClient, server: HttpServer, path: str, body: object) -> httpx2.Response:
    return await web.post(path, json=body, headers=same_origin(server))


@dataclass
class EventLog:
    """The events a console stream received, in order, and a way to wait for one."""

    events: list[tuple[str, Any]] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def add(self, name: str, data: Any) -> None:
        self.events.append((name, data))
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, found: Callable[[list[tuple[str, Any]]], bool], seconds: float = 30) -> None:
        with anyio.fail_after(seconds):
            while not found(self.events):
                await self._changed.wait()


async def read_events(web: httpx2.AsyncClient, path: str, log: EventLog, ready: anyio.Event) -> None:
    """Read a server-sent event stream into ``log`` until cancelled (``ready`` once it answers)."""
    async with web.stream("GET", path) as stream:
        assert stream.status_code == 200, await stream.aread()
        ready.set()
        name = "message"
        async for line in stream.aiter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                log.add(name, json.loads(line.split(":", 1)[1]))
                name = "message"


@asynccontextmanager
async def watching(web: httpx2.AsyncClient, path: str = "/console/api/events") -> AsyncIterator[EventLog]:
    """The console's event stream (or a terminal's), read in the background while the block runs."""
    log = EventLog()
    ready = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(read_events, web, path, log, ready)
        with anyio.fail_after(30):
            await ready.wait()
        yield log
        group.cancel_scope.cancel()


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 30) -> None:
    """Ask ``check`` again (a read of the console's lists) until it holds."""
    with anyio.fail_after(seconds):
        while not await check():
            await anyio.sleep(0.05)
