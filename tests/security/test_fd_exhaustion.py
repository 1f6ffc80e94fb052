"""A host holding more than 1,023 fds (a busy HTTP front gets there with a few hundred sessions):
``select()`` fails past FD_SETSIZE, so nothing on the host may use it. With 1,200 fds open, a
background start (the supervisor's handshake) and the git probe (``git status`` confined) work."""

from __future__ import annotations

import ast
import os
import resource
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import codemode
from codemode import Host
from codemode.sandbox._landlock import landlock_status
from tests.host_support import read_until_exit

FDS = 1200


@pytest.fixture
def many_fds() -> Iterator[list[int]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FDS + 256:
        pytest.skip(f"the fd limit here ({hard}) is below {FDS + 256}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FDS + 256), hard))
    fds = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(FDS)]
    try:
        assert max(fds) > 1023
        yield fds
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.anyio
@pytest.mark.skipif(landlock_status().abi < 4, reason="confined commands need Landlock ABI >= 4")
async def test_background_start_and_git_probe_past_1023_fds(tmp_path: Path, many_fds: list[int]) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    for args in (
        ["init", "-q"],
        ["add", "a.txt"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"],
    ):
        subprocess.run(["git", "-C", str(workspace), *args], check=True)
    async with Host(workspace=workspace, state_dir=tmp_path / "state", handoff_seconds=None) as host:
        started = await host.call_tool("bash", {"command": "echo bg-done", "run_in_background": True})
        assert started.structured_content is not None, started.text
        done = await read_until_exit(host, started.structured_content["process_id"])
        assert "bg-done" in done["output"]
        # A command of over 100 ms gets the dirty check after it (git status, confined).
        probed = await host.call_tool("bash", {"command": "sleep 0.2 && echo probed"})
        assert probed.structured_content is not None
        revision = probed.structured_content["workspace_revision"]
        assert revision is not None and revision["dirty_reason"] is None, revision
        assert revision["dirty"] is False


def test_no_select_call_in_codemode() -> None:
    """``select.select`` (and ``select()`` imported from it) appears nowhere in the package."""
    root = Path(codemode.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "select"
                and isinstance(node.value, ast.Name)
                and node.value.id == "select"
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "select":
                if any(alias.name == "select" for alias in node.names):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == [], f"select() fails past 1,023 fds; use poll or selectors: {found}"
