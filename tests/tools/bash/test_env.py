"""Working directory checks and the workspace revision read from .git files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from codemode.errors import ToolError
from codemode.sandbox import SandboxMode, SandboxPolicy
from codemode.tools.bash._env import (
    command_env,
    find_work_tree,
    git_changed_since,
    resolve_cwd,
    workspace_revision,
)

# The probe's cgroup owner: a host's is h_<state tag>_<host>; these tests run without a host.
_OWNER = f"h_testenv_{os.getpid()}x0"

_GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=_GIT_ENV, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def test_revision_of_a_linked_worktree_with_packed_refs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    _git(repo, "worktree", "add", "-q", "-b", "feature", str(tmp_path / "wt"))
    _git(repo, "pack-refs", "--all")
    (tmp_path / "wt" / "sub").mkdir()
    rev = workspace_revision(
        find_work_tree(tmp_path / "wt" / "sub", (tmp_path,)),
        policy=SandboxPolicy(writable_roots=(tmp_path,)),
        cgroup_owner=_OWNER,
    )
    assert rev is not None
    assert rev["head"] == _git(tmp_path / "wt", "rev-parse", "HEAD")
    assert (rev["ref"], rev["dirty"], rev["root"]) == ("refs/heads/feature", False, str(tmp_path / "wt"))


def test_revision_of_a_detached_head(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    _git(tmp_path, "checkout", "-q", "--detach")
    rev = workspace_revision(
        find_work_tree(tmp_path), policy=SandboxPolicy(), cgroup_owner=_OWNER, skip_dirty="not asked"
    )
    assert rev is not None and (rev["head"], rev["ref"], rev["dirty"]) == (head, None, None)
    assert rev["dirty_reason"] == "not asked"


def test_cwd_checks(tmp_path: Path) -> None:
    policy = SandboxPolicy(protected=(tmp_path / "state",))
    (tmp_path / "state").mkdir()
    (tmp_path / "file").write_text("x")
    assert resolve_cwd(None, tmp_path, policy) == tmp_path.resolve()
    with pytest.raises(ToolError, match="not a directory"):
        resolve_cwd("file", tmp_path, policy)
    with pytest.raises(ToolError, match="state directory"):
        resolve_cwd("state", tmp_path, policy)
    with pytest.raises(ToolError, match="does not exist"):
        resolve_cwd("missing", tmp_path, policy)


def test_command_env_is_non_interactive() -> None:
    env = command_env({"GOROOT": "/go", "HOME": "/h"}, "f_1", term="dumb")
    assert "GOROOT" not in env
    assert env["HOME"] == "/h" and env["CODEMODE_PROCESS_ID"] == "f_1"
    assert (env["PAGER"], env["GIT_PAGER"], env["GIT_TERMINAL_PROMPT"], env["TERM"]) == (
        "cat",
        "cat",
        "0",
        "dumb",
    )


def _hostile_repo(repo: Path, marker: Path) -> None:
    """A repository whose configuration runs programs: fsmonitor, a clean filter, hooks."""
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitattributes").write_text("*.txt filter=evil\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    hooks = repo / ".git" / "hooks"
    for hook in ("pre-commit", "post-checkout", "post-index-change", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\nid > {marker}.{hook}\n")
        (hooks / hook).chmod(0o755)
    _git(repo, "config", "core.fsmonitor", f"sh -c 'id > {marker}.fsmonitor' #")
    _git(repo, "config", "filter.evil.clean", f"sh -c 'id > {marker}.clean; cat'")
    _git(repo, "config", "filter.evil.process", f"sh -c 'id > {marker}.process'")
    # Touch the file so git has to look at its content (and would run the filter).
    (repo / "a.txt").write_text("two\n")


@pytest.mark.parametrize(
    "mode", [SandboxMode.READ_ONLY, SandboxMode.WORKSPACE_WRITE, SandboxMode.FULL_ACCESS]
)
def test_a_hostile_repository_makes_the_host_run_nothing(tmp_path: Path, mode: SandboxMode) -> None:
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    marker = outside / "ran"
    _hostile_repo(repo, marker)
    policy = SandboxPolicy(mode=mode, writable_roots=(repo,), network=False)
    rev = workspace_revision(find_work_tree(repo), policy=policy, cgroup_owner=_OWNER)
    assert rev is not None and rev["root"] == str(repo)
    # The long-running filter process dies confined, so git fails and the answer is "unknown"
    # rather than a wrong "clean"; nothing of the repository's ran outside the sandbox.
    reason = rev["dirty_reason"]
    assert rev["dirty"] is None and reason is not None and reason.startswith("git status failed")
    assert sorted(p.name for p in outside.iterdir()) == []


def test_the_filter_git_still_runs_is_confined(tmp_path: Path) -> None:
    # A repository's clean filter is not configuration git can be told to skip; it runs, but
    # inside the read-only, network-off sandbox: it cannot write even into the repository.
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitattributes").write_text("*.txt filter=evil\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    _git(repo, "config", "filter.evil.clean", f"sh -c 'touch {repo}/wrote; cat'")
    (repo / "a.txt").write_text("two\n")
    rev = workspace_revision(
        find_work_tree(repo), policy=SandboxPolicy(writable_roots=(repo,)), cgroup_owner=_OWNER
    )
    assert rev is not None and rev["dirty"] is True
    assert not (repo / "wrote").exists()


def test_git_changed_since_sees_head_and_index_writes_not_edits(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "f").write_text("1")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-q", "-m", "one")
    tree = find_work_tree(tmp_path)
    assert tree is not None
    since = os.stat(tmp_path / ".git" / "index").st_mtime + 3600  # as if the command started later
    assert not git_changed_since(tree, since)
    (tmp_path / "f").write_text("2")  # an edit of a tracked file: not a sign (git status sees it)
    assert not git_changed_since(tree, since)
    for name in ("index", "HEAD", "logs/HEAD"):  # what add, commit, checkout, reset ... write
        path = tmp_path / ".git" / name
        stamp = os.stat(path).st_mtime
        os.utime(path, (since, since))
        assert git_changed_since(tree, since), name
        os.utime(path, (stamp, stamp))
