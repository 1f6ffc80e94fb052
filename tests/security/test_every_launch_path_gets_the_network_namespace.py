"""Attack class: a launch path that skips a layer.

A host with a network allowlist starts commands three ways: a foreground bash call, a background
one (under a supervisor process) and a Monitor watcher (under a supervisor too). Each must run in
a network namespace of its own whose only way out is the host's proxy. The background and
watcher paths once got every layer but that one: the proxy was unreachable, and the command sat
in the host's network namespace with only Landlock's port rule between it and the host's
loopback. Here each path tries a direct connection past the proxy to a loopback server (never
reached) and a listed name through the proxy (reached), and says so on stdout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import Host
from tests.network.proxy_support import CountingServer, counting_server
from tests.sandbox.sandbox_support import needs_landlock

pytestmark = [pytest.mark.anyio, needs_landlock]


@pytest.fixture
def server() -> Iterator[CountingServer]:
    with counting_server() as made:
        yield made


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    (tmp_path / "ws").mkdir()
    async with Host(
        workspace=tmp_path / "ws",
        state_dir=tmp_path / "state",
        handoff_seconds=None,
        network_allow=("localhost",),
    ) as made:
        yield made


def _script(port: int) -> str:
    return (
        f"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{port}/direct >/dev/null 2>&1; echo direct=$?; "
        f"curl -sS -m 20 http://localhost:{port}/proxied"
    )


async def _call(host: Host, tool: str, **args: Any) -> dict[str, Any]:
    result = await host.call_tool(tool, args)
    assert not result.is_error, result.text
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def _foreground(host: Host, command: str) -> str:
    return (await host.call_tool("bash", {"command": command})).text


async def _background(host: Host, command: str) -> str:
    process_id = (await _call(host, "bash", command=command, run_in_background=True))["process_id"]
    with anyio.fail_after(60):
        while True:
            data = await _call(
                host, "bash", action="read", process_id=process_id, wait_ms=1000, offset_bytes=0
            )
            if data["exited"]:
                return str(data["output"])


async def _watcher(host: Host, command: str) -> str:
    watcher_id = (await _call(host, "monitor_start", command=command))["watcher_id"]
    with anyio.fail_after(60):
        await _call(host, "monitor_wait", watcher_id=watcher_id, until="exit", timeout_ms=60_000)
    events = (await _call(host, "monitor_events", watcher_id=watcher_id))["events"]
    return "\n".join(str(event["text"]) for event in events)


@pytest.mark.parametrize(
    "path", [_foreground, _background, _watcher], ids=["foreground", "background", "watcher"]
)
async def test_no_path_reaches_loopback_past_the_proxy(host: Host, server: CountingServer, path: Any) -> None:
    said = await path(host, _script(server.port))
    assert "direct=0" not in said and "direct=" in said, said
    assert "hello /proxied" in said, said
    assert server.connections == 1  # the proxied one only
