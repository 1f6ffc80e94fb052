"""Network by domain as the model meets it: a Host with an allowlist, bash calls that narrow or
widen it, the refusal named in the result with how to allow it (a local HTTP server only)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import Host, UserError
from codemode.policy import ApprovalRequest, Decision
from tests.network.proxy_support import CountingServer, counting_server
from tests.sandbox.sandbox_support import needs_landlock

pytestmark = [pytest.mark.anyio, needs_landlock]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[CountingServer]:
    with counting_server() as made:
        yield made


class Asked:
    def __init__(self, answer: Decision | None = None) -> None:
        self.summaries: list[str] = []
        self.answer = answer or Decision.allow()

    async def __call__(self, requests: list[ApprovalRequest]) -> list[Decision]:
        self.summaries += [f"{r.kind.value}: {r.summary}" for r in requests]
        return [self.answer for _ in requests]


@pytest.fixture
def asked() -> Asked:
    return Asked()


@pytest.fixture
async def host(tmp_path: Path, asked: Asked) -> AsyncIterator[Host]:
    (tmp_path / "ws").mkdir()
    made = Host(
        workspace=tmp_path / "ws",
        state_dir=tmp_path / "state",
        handoff_seconds=None,
        network_allow=("localhost", "*.example.org"),
        approve=asked,
    )
    await made.open()
    yield made
    await made.aclose()


async def _bash(host: Host, command: str, **extra: Any) -> str:
    result = await host.call_tool("bash", {"command": command, **extra})
    return result.text


async def test_a_listed_domain_is_reached_and_an_address_is_refused_with_how_to_allow_it(
    host: Host, server: CountingServer, asked: Asked
) -> None:
    assert "hello /ok" in await _bash(host, f"curl -sS -m 20 http://localhost:{server.port}/ok")
    text = await _bash(host, f"curl -sS -m 20 http://127.0.0.1:{server.port}/no")
    assert f"Network: the proxy refused 127.0.0.1:{server.port} (not on the allowlist)" in text
    assert 'network: {"allow": ["localhost", "*.example.org", "127.0.0.1"]}' in text
    assert server.connections == 1 and asked.summaries == []


async def test_a_call_list_within_the_host_list_narrows_it_without_asking(
    host: Host, server: CountingServer, asked: Asked
) -> None:
    text = await _bash(
        host, f"curl -sS -m 20 http://localhost:{server.port}/", network={"allow": ["a.example.org"]}
    )
    assert f"refused localhost:{server.port}" in text
    assert asked.summaries == [] and server.connections == 0


async def test_widening_the_host_list_asks_a_capability_naming_the_domains(
    host: Host, server: CountingServer, asked: Asked
) -> None:
    text = await _bash(
        host, f"curl -sS -m 20 http://localhost:{server.port}/w", network={"allow": ["localhost", "pypi.org"]}
    )
    assert "hello /w" in text
    assert asked.summaries == ['capability: bash: reach ["pypi.org"]']
    asked.summaries.clear()
    await _bash(host, "true", network=True)
    assert asked.summaries == ["capability: bash: reach the network"]


async def test_without_anyone_to_ask_a_wider_list_is_refused(tmp_path: Path, server: CountingServer) -> None:
    (tmp_path / "ws").mkdir()
    async with Host(
        workspace=tmp_path / "ws", state_dir=tmp_path / "state", network_allow=("localhost",)
    ) as host:
        result = await host.call_tool(
            "bash", {"command": "true", "network": {"allow": ["localhost", "pypi.org"]}}
        )
        assert result.is_error and "capability 'network pypi.org' was denied" in result.text, result.text
    assert server.connections == 0


async def test_a_client_that_ignores_the_proxy_is_told_so(host: Host) -> None:
    text = await _bash(
        host, "python3 -c 'import socket; socket.create_connection((\"a.example.org\", 22), timeout=10)'"
    )
    assert "clients that ignore proxies (git over SSH, raw sockets" in text, text


async def test_a_bad_entry_and_an_allowlist_with_the_network_off_are_refused(
    tmp_path: Path, host: Host
) -> None:
    result = await host.call_tool("bash", {"command": "true", "network": {"allow": ["https://pypi.org"]}})
    assert result.is_error and "is not a domain" in result.text
    with pytest.raises(UserError, match="network is off"):
        Host(workspace=tmp_path, state_dir=tmp_path / "s2", network=False, network_allow=("pypi.org",))


async def _read_to_exit(host: Host, process_id: str) -> dict[str, Any]:
    while True:
        result = await host.call_tool("bash", {"action": "read", "process_id": process_id, "wait_ms": 1000})
        data: dict[str, Any] = result.structured_content or {}
        if data.get("exited"):
            return data


async def test_a_background_command_reaches_the_list_too_and_its_refusals_are_named(
    host: Host, server: CountingServer
) -> None:
    command = (
        f"curl -sS -m 20 http://localhost:{server.port}/bg; curl -sS -m 20 http://127.0.0.1:{server.port}/no"
    )
    started = await host.call_tool("bash", {"command": command, "run_in_background": True})
    assert not started.is_error, started.text
    process_id = (started.structured_content or {})["process_id"]
    with anyio.fail_after(30):  # its completion, not read yet
        while not (pending := host.pending_notifications()):
            await anyio.sleep(0.02)
    note = f"Network: the proxy refused 127.0.0.1:{server.port} (not on the allowlist)"
    assert [n.process_id for n in pending] == [process_id] and note in pending[0].text
    data = await _read_to_exit(host, process_id)
    assert "hello /bg" in data["output"] and server.connections == 1
    assert note in data["note"] and '"allow": ["localhost", "*.example.org", "127.0.0.1"]' in data["note"]


async def test_doctor_says_whether_the_network_namespace_is_in_force(host: Host, tmp_path: Path) -> None:
    layers = {layer["name"]: layer for layer in host.doctor()["sandbox"]["layers"]}
    assert layers["network namespace"]["state"] == "on"
    assert (
        "reach only localhost, *.example.org, through the host's proxy"
        in layers["network namespace"]["detail"]
    )
    assert "TCP to the proxy's port only" in layers["landlock"]["detail"]
    (tmp_path / "ws2").mkdir()
    async with Host(workspace=tmp_path / "ws2", state_dir=tmp_path / "state2") as plain:
        layer = {layer["name"]: layer for layer in plain.doctor()["sandbox"]["layers"]}["network namespace"]
    assert layer["state"] == "off" and "one (--network-allow) would run each command" in layer["detail"]
