"""A workspace repository whose ``.git/config`` names programs: a clean filter (any name), an
fsmonitor hook. The host's dirty-tree probe (``git status``) must not run them on the host:
git runs confined (read-only, network off) in a cgroup of its own that is killed when the
probe ends, so the marker they would write outside the workspace never appears and what they
start does not outlive the probe."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from codemode.sandbox import cgroup_root
from codemode.sandbox._landlock import landlock_status
from tests.security._host_driver import run_host

pytestmark = pytest.mark.skipif(
    landlock_status().abi < 4 or cgroup_root().path is None,
    reason="needs Landlock ABI >= 4 and a cgroup v2 tree codemode can use",
)


def _git(workspace: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(workspace), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def _daemons(tag: str) -> list[int]:
    """Processes whose command line holds ``tag``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if tag.encode() in f.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def _hostile_repo(workspace: Path, outside: Path, tag: str) -> None:
    _git(workspace, "init", "-q")
    (workspace / "tracked.txt").write_text("one\n")
    (workspace / ".gitattributes").write_text("* filter=evil\n")
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-q", "-m", "init")
    # Set after the commit, as a repository unpacked from an archive carries it.
    filter_command = (
        f"sh -c 'touch {outside}/filter-ran; setsid sleep {tag} </dev/null >/dev/null 2>&1 & cat'"
    )
    _git(workspace, "config", "filter.evil.clean", filter_command)
    _git(workspace, "config", "core.fsmonitor", f"touch {outside}/fsmonitor-ran; false")


def test_clean_filter_and_fsmonitor_never_run_on_the_host(tmp_path: Path) -> None:
    workspace, state, outside = tmp_path / "ws", tmp_path / "state", tmp_path / "outside"
    for path in (workspace, outside):
        path.mkdir()
    tag = f"31{secrets.randbelow(10**6):06d}"  # a sleep length no other process has
    _hostile_repo(workspace, outside, tag)
    # The command changes a tracked file and runs past 100 ms, so the host's probe runs git
    # status after it, which would run the clean filter on the changed file.
    answers = run_host(workspace, state, [{"command": "echo two >> tracked.txt && sleep 0.2 && echo ok"}])
    assert "ok" in answers[0]["text"]
    revision = answers[0]["data"]["workspace_revision"]
    assert revision is not None and len(revision["head"]) == 40
    assert revision["dirty"] is True, revision  # git status ran, with the filter, confined
    assert sorted(p.name for p in outside.iterdir()) == []  # neither ran with the host's rights
    # Whatever the confined filter started went with the probe's cgroup (the host has closed).
    deadline = time.monotonic() + 30
    while _daemons(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _daemons(tag) == []


def test_the_probe_leaves_nothing_the_filter_started(tmp_path: Path) -> None:
    """The probe alone (no session temp dir): what a clean filter detaches (setsid) goes with
    the probe's cgroup, not only with git's process group."""
    from codemode.sandbox import SandboxMode, SandboxPolicy
    from codemode.tools.bash._env import git_dirty

    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    for path in (workspace, outside):
        path.mkdir()
    tag = f"32{secrets.randbelow(10**6):06d}"
    _hostile_repo(workspace, outside, tag)
    (workspace / "tracked.txt").write_text("changed\n")
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, writable_roots=(workspace,))
    assert git_dirty(str(workspace), policy, cgroup_owner=f"h_hostilegit_{os.getpid()}x0") == (True, None)
    assert _daemons(tag) == []  # the cgroup was killed before git_dirty returned
    assert sorted(p.name for p in outside.iterdir()) == []
