"""Per-call capabilities of a bash run (network, write_paths): asked for, granted for that call
only, refused without anyone to ask (real Host, real confined processes, a real TCP listener)."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import ApprovalRequest, Decision, Host

pytestmark = pytest.mark.anyio


@pytest.fixture
def listener() -> Iterator[int]:
    """A local TCP listener that accepts (and closes) connections; yields its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def connect(port: int) -> str:
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5).close(); print('connected')"
    return f'{sys.executable} -c "{code}"'


async def call(host: Host, **args: Any) -> Any:
    with anyio.fail_after(60):
        return await host.call_tool("bash", args)


async def test_network_for_one_call_needs_an_approval_where_the_host_keeps_it_off(
    tmp_path: Path, listener: int
) -> None:
    asked: list[ApprovalRequest] = []

    async def approve(requests: list[ApprovalRequest]) -> list[Decision]:
        asked.extend(requests)
        return [Decision.allow() for _ in requests]

    (tmp_path / "ws").mkdir()
    async with Host(
        workspace=tmp_path / "ws", state_dir=tmp_path / "state", network=False, approve=approve
    ) as host:
        offline = await call(host, command=connect(listener))
        online = await call(host, command=connect(listener), network=True)
        after = await call(host, command=connect(listener))  # for that call only
    assert offline.structured_content["exit_code"] != 0 and "connected" not in offline.text
    assert online.structured_content["exit_code"] == 0 and "connected" in online.text, online.text
    assert after.structured_content["exit_code"] != 0
    assert [(r.kind.value, r.rule) for r in asked] == [("capability", "network")]


async def test_without_an_approval_callback_no_call_gets_more_than_the_host_allows(
    tmp_path: Path, listener: int
) -> None:
    (tmp_path / "ws").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", network=False) as host:
        network = await call(host, command=connect(listener), network=True)
        paths = await call(host, command=f"touch {outside}/f", write_paths=[str(outside)])
        program = await host.run_code(
            "try { await tools.bash({command: 'true', network: true}); } catch (e) { print(e.code, e.message); }"
        )
    assert network.is_error and "no one to ask for approval" in network.text
    assert paths.is_error and not (outside / "f").exists()
    assert program.text.startswith("denied bash: the capability 'network' was denied"), program.text


async def test_write_paths_grant_one_call_an_existing_directory_and_never_the_state_dir(
    tmp_path: Path,
) -> None:
    async def approve(requests: list[ApprovalRequest]) -> list[Decision]:
        return [Decision.allow() for _ in requests]

    (tmp_path / "ws").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    state = tmp_path / "state"
    async with Host(workspace=tmp_path / "ws", state_dir=state, approve=approve) as host:
        refused = await call(host, command=f"touch {outside}/a")
        granted = await call(host, command=f"touch {outside}/b", write_paths=[str(outside)])
        again = await call(host, command=f"touch {outside}/c")
        into_state = await call(host, command=f"touch {state}/blobs/x", write_paths=[str(state / "blobs")])
        over_state = await call(host, command="true", write_paths=[str(tmp_path)])
        missing = await call(host, command="true", write_paths=[str(tmp_path / "nope")])
    assert refused.structured_content["exit_code"] != 0 and not (outside / "a").exists()
    assert granted.structured_content["exit_code"] == 0 and (outside / "b").exists(), granted.text
    assert again.structured_content["exit_code"] != 0 and not (outside / "c").exists()
    assert into_state.is_error and "inside the protected directory" in into_state.text
    assert not (state / "blobs" / "x").exists()
    assert over_state.is_error and "lies inside the writable root" in over_state.text
    assert missing.is_error and "not an existing directory" in missing.text
