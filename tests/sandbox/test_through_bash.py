"""Confinement as the model meets it: the bash tool of a real Host, foreground, background, promoted."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from codemode import CallResult, Host, SandboxMode
from tests.host_support import read_until_exit
from tests.sandbox.sandbox_support import needs_landlock

pytestmark = [pytest.mark.anyio, needs_landlock]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    made = {name: tmp_path / name for name in ("ws", "out", "state")}
    for path in made.values():
        path.mkdir()
    (made["out"] / "existing").write_text("outside\n")
    return made


async def _host(places: dict[str, Path], **options: Any) -> Host:
    host = Host(workspace=places["ws"], state_dir=places["state"], **options)
    await host.open()
    return host


@pytest.fixture
async def host(places: dict[str, Path]) -> AsyncIterator[Host]:
    h = await _host(places, handoff_seconds=None)
    yield h
    await h.aclose()


def _script(places: dict[str, Path]) -> str:
    out, ws = places["out"], places["ws"]
    return (
        f"touch {ws}/inside && echo inside-ok; "
        f"touch {out}/escaped; echo x >> {out}/existing; "
        f"bash -c 'bash -c \"touch {out}/grandchild\"'; "
        f"touch {places['state']}/tamper; "
        "exit 3"
    )


def _assert_confined(places: dict[str, Path], output: str) -> None:
    assert "inside-ok" in output
    assert output.count("Permission denied") == 4, output
    assert (places["ws"] / "inside").exists()
    assert sorted(p.name for p in places["out"].iterdir()) == ["existing"]
    assert (places["out"] / "existing").read_text() == "outside\n"
    assert not (places["state"] / "tamper").exists()


async def test_foreground_command_is_confined_and_the_denial_explained(
    host: Host, places: dict[str, Path]
) -> None:
    result = await host.call_tool("bash", {"command": _script(places)})
    assert result.is_error
    _assert_confined(places, result.text)
    assert "Sandbox (workspace-write) denied writing" in result.text, result.text
    assert "writable root" in result.text


async def test_background_process_is_confined(host: Host, places: dict[str, Path]) -> None:
    started = await host.call_tool("bash", {"command": _script(places), "run_in_background": True})
    assert not started.is_error, started.text
    assert started.structured_content is not None
    data = await read_until_exit(host, started.structured_content["process_id"])
    assert data["exit_code"] == 3
    _assert_confined(places, data["output"])


async def test_promoted_process_is_confined(places: dict[str, Path]) -> None:
    host = await _host(places, handoff_seconds=0.5)
    try:
        # Still running at the hand-off; the writes happen after it has been promoted.
        flag = places["ws"] / "go"
        script = f"while [ ! -e {flag} ]; do sleep 0.05; done; " + _script(places)
        result: CallResult = await host.call_tool("bash", {"command": script})
        assert result.structured_content is not None, result.text
        promoted = result.structured_content.get("promoted_process_id")
        assert promoted, result.text
        flag.write_text("")
        data = await read_until_exit(host, promoted)
        assert data["exit_code"] == 3
        _assert_confined(places, data["output"])
    finally:
        await host.aclose()


async def test_read_only_host_refuses_writes_everywhere(places: dict[str, Path]) -> None:
    host = await _host(places, handoff_seconds=None, sandbox=SandboxMode.READ_ONLY)
    try:
        # /dev/null stays writable and reading works; the touch fails the command, so the
        # result says the sandbox denied it (a command that succeeds gets no such line).
        result = await host.call_tool(
            "bash", {"command": f"echo hi > /dev/null && cat /etc/hostname && touch {places['ws']}/x"}
        )
        assert result.is_error and "Permission denied" in result.text
        assert "Sandbox (read-only) denied writing" in result.text
        assert not (places["ws"] / "x").exists()
    finally:
        await host.aclose()


async def test_network_off_host_refuses_tcp_connect(places: dict[str, Path]) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    host = await _host(places, handoff_seconds=None, network=False)
    try:
        result = await host.call_tool("bash", {"command": f"exec 3<>/dev/tcp/127.0.0.1/{port}"})
        assert result.is_error
        assert "socket: Operation not permitted" in result.text
        assert f"Sandbox denied a TCP connection to 127.0.0.1 port {port}" in result.text, result.text
    finally:
        await host.aclose()
        server.close()


async def test_simulated_missing_landlock_refuses_and_full_access_runs(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from codemode.sandbox import landlock_status

    monkeypatch.setenv("CODEMODE_SIMULATE_NO_LANDLOCK", "1")
    landlock_status.cache_clear()  # type: ignore[attr-defined]
    host = await _host(places, handoff_seconds=None)
    try:
        refused = await host.call_tool("bash", {"command": f"touch {places['ws']}/ran"})
        assert refused.is_error and "full-access" in refused.text
        background = await host.call_tool(
            "bash", {"command": f"touch {places['ws']}/ran", "run_in_background": True}
        )
        assert background.is_error and "full-access" in background.text
        assert not (places["ws"] / "ran").exists()
    finally:
        await host.aclose()
    host = await _host(places, handoff_seconds=None, sandbox=SandboxMode.FULL_ACCESS)
    try:
        result = await host.call_tool("bash", {"command": f"touch {places['out']}/free"})
        assert not result.is_error, result.text
        assert (places["out"] / "free").exists()
    finally:
        await host.aclose()
