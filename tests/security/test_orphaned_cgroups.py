"""Cgroups a host leaves behind when it is killed: the next host on the same state directory
finds them by their owner (``h_<state tag>_<host>``) and ends what runs in them. The git probe
(`git status`, run after a command in a work tree) runs a repository's clean filter, which can
start anything: its cgroup must be owned like the host's commands, or a probe running when its
host is killed (a filter that never ends) outlives it for good."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.sandbox import SandboxPolicy, cgroup_root
from codemode.sandbox._cgroup import cgroup_members
from codemode.sandbox._landlock import landlock_status
from codemode.state import State
from codemode.tools._model import ToolContext
from codemode.tools.bash import ProcessManager
from codemode.tools.bash._env import git_dirty
from codemode.tools.bash._foreground import host_cgroup_owner, state_tag

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        landlock_status().abi < 4 or cgroup_root().path is None,
        reason="needs Landlock ABI >= 4 and a cgroup v2 tree codemode can use",
    ),
]


def _git(workspace: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(workspace), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def _repo_whose_filter_waits(workspace: Path) -> Path:
    """A repository whose clean filter blocks until someone opens the FIFO it returns."""
    workspace.mkdir()
    _git(workspace, "init", "-q")
    (workspace / "tracked.txt").write_text("one\n")
    (workspace / ".gitattributes").write_text("* filter=wait\n")
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-q", "-m", "init")
    gate = workspace / "gate"
    os.mkfifo(gate)
    (workspace / ".git" / "info" / "exclude").write_text("gate\n")
    _git(workspace, "config", "filter.wait.clean", f"sh -c 'cat {gate} >/dev/null; cat'")
    return gate


def _probes(owner: str) -> list[str]:
    """The git probe cgroups of ``owner`` with git in them (it waits in the filter)."""
    return [
        p for p in cgroup_root().children(owner) if os.path.basename(p).startswith("g") and cgroup_members(p)
    ]


def _wait_for_probe(owner: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = _probes(owner)
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no running git probe cgroup appeared under {owner}")


def _release(gate: Path) -> None:
    """Let the filter go on (it opens the FIFO for reading; this end waits for it)."""
    fd = os.open(gate, os.O_WRONLY)
    os.close(fd)


def _dead_host() -> str:
    """A host identity (``PIDxSTART``) whose process has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"{proc.pid}x1"


async def test_the_git_probe_runs_under_the_host_s_own_cgroup_owner(tmp_path: Path) -> None:
    workspace, state = tmp_path / "ws", State(tmp_path / "state")
    gate = _repo_whose_filter_waits(workspace)
    archive = state.archive
    manager = ProcessManager(archive, handoff_seconds=None)
    tool = manager.extension().tools[0]
    ctx = ToolContext("s1", workspace, SandboxPolicy(writable_roots=(workspace,)), archive)
    owner = host_cgroup_owner(state_tag(archive))
    results: list[Any] = []

    async def call() -> None:
        # Changes a tracked file and runs past 100 ms: the probe runs git status after it.
        args = tool.input_model.model_validate({"command": "echo two >> tracked.txt && sleep 0.2"})
        results.append(await tool.handler(**tool.bind(args, ctx)))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(30):
                while not (found := _probes(owner)):
                    # A call that ended without its probe waiting in the filter says why.
                    assert not results, results[0].structured_content.get("workspace_revision")
                    await anyio.sleep(0.02)
            probe = found[0]
            await anyio.to_thread.run_sync(_release, gate)
        revision = results[0].structured_content["workspace_revision"]
        assert revision["dirty"] is True, revision
        assert not os.path.exists(probe)  # removed when the probe ended
    finally:
        await manager.aclose()
        state.close()


def test_a_probe_a_killed_host_left_is_swept_by_the_next_host_of_its_state_dir(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    gate = _repo_whose_filter_waits(workspace)
    (workspace / "tracked.txt").write_text("changed\n")
    state, other = State(tmp_path / "state"), State(tmp_path / "other")
    owner = f"h_{state_tag(state.archive)}_{_dead_host()}"
    answer: list[tuple[bool | None, str | None]] = []
    policy = SandboxPolicy(writable_roots=(workspace,))
    # The probe of a host that is gone (its pid has ended), blocked in the filter.
    probing = threading.Thread(
        target=lambda: answer.append(git_dirty(str(workspace), policy, cgroup_owner=owner))
    )
    probing.start()
    try:
        probe = _wait_for_probe(owner)
        # A host on another state directory cannot tell it from that directory's runs: it stays.
        ProcessManager(other.archive)  # a manager's start-up upkeep sweeps its orphans
        assert os.path.exists(probe) and probing.is_alive()
        # The next host on its own state directory ends it: git dies with its cgroup.
        ProcessManager(state.archive)
        probing.join(timeout=30)
        assert not probing.is_alive()
        assert answer[0][0] is None, answer  # killed: no answer
        assert not os.path.exists(probe)
    finally:
        if probing.is_alive():
            _release(gate)
            probing.join(timeout=30)
        state.close()
        other.close()
