"""Test tools and checks shared by the engine and host tests (imported by conftest and tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import psutil

from codemode import ErrorCode, Host, ToolContext, ToolError


class Probe:
    """Side effects of the test tools, for assertions (created inside the test's event loop)."""

    def __init__(self) -> None:
        self.bumps = 0
        self.handler_threads: list[int] = []
        self.contexts: list[ToolContext] = []
        self.slow_calls = 0
        self.slow_started = anyio.Event()
        self.slow_cancelled = anyio.Event()
        self.release = anyio.Event()


def add_test_tools(host: Host, probe: Probe) -> None:
    """Register the tools the engine and host tests call."""

    @host.tool()
    async def echo(value: Any) -> dict[str, Any]:
        """Return the value it was given, as structured data."""
        return {"value": value}

    @host.tool()
    async def shout(text: str) -> str:
        """Return the text in upper case (a text result, no structured data)."""
        return text.upper()

    @host.tool()
    def bump(ctx: ToolContext) -> int:
        """Count one call (a side effect tests can see); runs in a worker thread."""
        probe.bumps += 1
        probe.handler_threads.append(threading.get_ident())
        probe.contexts.append(ctx)
        return probe.bumps

    @host.tool()
    async def slow() -> str:
        """Wait until the test releases it; records when it starts and when it is cancelled."""
        probe.slow_calls += 1
        probe.slow_started.set()
        try:
            await probe.release.wait()
        except anyio.get_cancelled_exc_class():
            probe.slow_cancelled.set()
            raise
        return "released"

    @host.tool()
    async def nap(ms: int) -> int:
        """Sleep ms milliseconds, then return ms."""
        await anyio.sleep(ms / 1000)
        return ms

    @host.tool()
    def fail_sync(message: str) -> str:
        """Raise ToolError(message, data) from a sync handler."""
        raise ToolError(message, {"code": 7, "where": "sync"}, code=ErrorCode.TOOL_FAILED)

    @host.tool()
    async def fail_async(message: str) -> str:
        """Raise ToolError(message, data) from an async handler."""
        raise ToolError(message, {"code": 8, "where": "async"}, code=ErrorCode.TOOL_FAILED)

    @host.tool()
    async def crash(message: str) -> str:
        """Raise a plain exception (a handler bug)."""
        raise RuntimeError(message)

    @host.tool()
    def big(mb: int) -> str:
        """Return a string of mb MiB."""
        return "x" * (mb * 1024 * 1024)


HEALTHY_PROGRAM = 'const r = await tools.echo({value: "still ok"}); print(r.value, 6 * 7)'


async def assert_healthy(host: Host) -> None:
    """The host still runs a normal program correctly."""
    with anyio.fail_after(30):
        result = await host.run_code(HEALTHY_PROGRAM)
    assert result.ok, result.text
    assert result.text == "still ok 42\n"


MakeHost = Callable[..., AbstractAsyncContextManager[tuple[Host, Probe]]]
"""The ``make_host`` fixture: ``async with make_host(**HostConfig fields) as (host, probe):``."""


async def read_until_exit(host: Host, process_id: str) -> dict[str, Any]:
    """Read a background process's output until it has exited (polling with wait_ms)."""
    output, offset = "", 0
    with anyio.fail_after(60):
        while True:
            result = await host.call_tool(
                "bash", {"action": "read", "process_id": process_id, "offset_bytes": offset, "wait_ms": 2000}
            )
            data = result.structured_content
            assert data is not None, result.text
            output += data["output"]
            offset = data["next_offset"]
            if data["exited"]:
                return {**data, "output": output}


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (exists and is not a zombie)."""
    try:
        status: str = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return False
    zombie: str = psutil.STATUS_ZOMBIE  # psutil has no type information
    return status != zombie


def survivors(token: str) -> list[int]:
    """Live processes whose command line carries ``token``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and token in " ".join(proc.info["cmdline"] or []):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
