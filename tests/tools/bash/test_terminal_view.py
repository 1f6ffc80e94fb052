"""What the bash tool shows is rendered for the terminal the command wrote to: the PTY of a
background run (its window size), or COLUMNS x LINES (80 x 24 by default) for pipes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.sandbox import SandboxPolicy
from codemode.state import Archive
from codemode.tools._model import ToolContext
from codemode.tools.bash import ProcessManager
from codemode.tools.bash._background import PTY_VIEW

from .conftest import Caller

pytestmark = pytest.mark.anyio

# A docker-pull style display: two layers redrawn in place with cursor-up and erase-line.
REDRAW = (
    "printf 'l1: waiting\\nl2: waiting\\n'; "
    "for p in 10 60 100; do printf '\\033[2A\\033[2K\\rl1: %s%%\\n\\033[2K\\rl2: %s%%\\n' $p $p; done; "
    "echo done"
)


async def _read_all(bash: Caller, process_id: str) -> str:
    """Read from offset 0 until the process has exited and everything was read."""
    with anyio.fail_after(20):
        while True:
            result = await bash(action="read", process_id=process_id, wait_ms=1000, offset_bytes=0)
            data: dict[str, Any] = result.structured_content
            if data["exited"] and data["eof"]:
                return str(data["output"])


async def test_background_read_renders_for_the_pty_window(bash: Caller) -> None:
    started = await bash(command=f"stty size; {REDRAW}; printf '%0250d\\n' 7", run_in_background=True)
    output = await _read_all(bash, started.structured_content["process_id"])
    lines = output.splitlines()
    assert lines[0] == f"{PTY_VIEW.lines} {PTY_VIEW.columns}"  # what the command was told
    assert lines[1:4] == ["l1: 100%", "l2: 100%", "done"]  # earlier frames were overwritten
    assert lines[4] == "0" * 249 + "7"  # wider than the PTY: wrapped there, joined here


async def test_foreground_renders_for_80_columns_by_default(bash: Caller) -> None:
    result = await bash(command=f"{REDRAW}; printf '%0100d\\rXY\\n' 0")
    assert (
        result.structured_content["stdout"]["excerpt"]
        == "l1: 100%\nl2: 100%\ndone\n" + "0" * 80 + "XY" + "0" * 18 + "\n"
    )


async def test_foreground_width_from_columns(
    archive: Archive, workspace: Path, policy: SandboxPolicy
) -> None:
    manager = ProcessManager(archive, handoff_seconds=None, environ={**os.environ, "COLUMNS": "30"})
    caller = Caller(manager, ToolContext("s1", workspace, policy, archive))
    try:
        result = await caller(command="printf '%040d\\rXY\\n' 0; printf 'a\\033[99Cz\\n'")
    finally:
        await manager.aclose()
    # The carriage return goes back to the start of the second 30-column row.
    assert (
        result.structured_content["stdout"]["excerpt"]
        == "0" * 30 + "XY" + "0" * 8 + "\n" + "a" + " " * 28 + "z\n"
    )
