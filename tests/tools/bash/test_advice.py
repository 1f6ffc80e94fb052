"""A confined command that fails on a permission gets one line of advice chosen by its cause:
the network (``network: true``), a write outside the roots (``write_paths``), a system target
(``sandbox: false`` or sudo, as the last resort), anything else (report it and stop). Real
commands, really refused by the sandbox, through a Host."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import Host
from codemode.sandbox import landlock_status

pytestmark = pytest.mark.anyio


async def run(tmp_path: Path, command: str, **host: Any) -> Any:
    (tmp_path / "ws").mkdir(exist_ok=True)
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", **host) as h:
        with anyio.fail_after(60):
            return await h.call_tool("bash", {"command": command})


async def test_network_off_advises_network_true(tmp_path: Path) -> None:
    if not landlock_status().network_rules:
        pytest.skip("network: false needs Landlock network rules")
    code = "import socket; socket.getaddrinfo('example.com', 443)"
    result = await run(tmp_path, f'{sys.executable} -c "{code}"', network=False)
    assert result.structured_content["exit_code"] != 0
    assert "pass network: true" in result.text, result.text


async def test_a_write_outside_the_roots_advises_write_paths(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    result = await run(tmp_path, f"touch {outside}/x")
    assert f'write_paths: ["{outside}"]' in result.text, result.text


async def test_a_system_target_advises_escalation_as_the_last_resort(tmp_path: Path) -> None:
    result = await run(tmp_path, "touch /etc/codemode-advice-test")
    assert "belongs to the system" in result.text and "last resort" in result.text, result.text
    assert not Path("/etc/codemode-advice-test").exists()


async def test_anything_else_is_reported_and_stopped_at(tmp_path: Path) -> None:
    # Every capability is dropped: changing the user id fails with EPERM and names no path.
    code = "import os; os.setgid(12345)"
    result = await run(tmp_path, f'{sys.executable} -c "{code}"')
    assert result.structured_content["exit_code"] != 0
    assert "report what was blocked to the user and stop" in result.text, result.text
