"""The adapters' tests drive a real Host over a workspace holding notes.txt (three lines)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from codemode import Host
from codemode.adapters import HostTools


@pytest.fixture
async def host_tools(tmp_path: Path) -> AsyncIterator[HostTools]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", handoff_seconds=None) as host:
        yield HostTools(host)
