"""Under the strict command policy a program named by a path may be any program (a copy of a
denied one, a build output): in argv mode and inside ``sh -c`` strings every program is a bare
name found on PATH, and a path is refused naming it. Real runs through a Host: nothing runs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import CommandPolicy, Host

pytestmark = pytest.mark.anyio


async def run(tmp_path: Path, args: dict[str, Any]) -> Any:
    policy = CommandPolicy(deny=frozenset({"touch"}), strict=True)
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", command_policy=policy) as host:
        with anyio.fail_after(60):
            return await host.call_tool("bash", args)


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"argv": ["./x/mk", "made"]}, "./x/mk"),  # a copy of touch under another name
        ({"argv": ["x/mk", "made"]}, "x/mk"),
        ({"argv": ["env", "./x/mk", "made"]}, "./x/mk"),  # behind a wrapper
        ({"argv": ["sh", "-c", "./x/mk made"]}, "./x/mk"),  # inside sh -c
        ({"command": "bash -c 'x/mk made'"}, "x/mk"),
        ({"argv": ["./x/run.sh"]}, "./x/run.sh"),  # a script: `bash ./x/run.sh` is checked instead
        ({"argv": [shutil.which("cp") or "/bin/cp", "/dev/null", "made"]}, "/cp"),  # even an installed one
    ],
)
async def test_a_program_named_by_a_path_is_refused(tmp_path: Path, args: dict[str, Any], path: str) -> None:
    ws = tmp_path / "ws"
    (ws / "x").mkdir(parents=True)
    shutil.copy(shutil.which("touch") or "/usr/bin/touch", ws / "x" / "mk")
    (ws / "x" / "run.sh").write_text("#!/bin/sh\necho ran > made\n")
    (ws / "x" / "run.sh").chmod(0o755)
    result = await run(tmp_path, args)
    assert result.is_error and "is a path" in result.text and path in result.text, result.text
    assert not (ws / "made").exists()


async def test_bare_names_and_scripts_run_by_their_shell_still_run(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "run.sh").write_text("echo ran\n")
    result = await run(tmp_path, {"argv": ["bash", "run.sh"]})
    assert result.structured_content["exit_code"] == 0 and "ran" in result.text
