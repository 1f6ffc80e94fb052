"""Hostile ``.git`` files: a command can write a ``.git`` FILE (``gitdir: <dir>``) in the workspace,
and a linked git dir's ``commondir``. The host's git probe reads HEAD, refs and packed-refs beneath
the git dir it names: it takes one only inside the work tree or the workspace (its writable
roots), and a common dir only above the git dir (where git keeps it), never any directory of
the host."""

from __future__ import annotations

from pathlib import Path

from codemode.tools.bash._env import _read_ref, find_work_tree

_COMMIT = "1234567890abcdef1234567890abcdef12345678"


def _git_dir(path: Path) -> Path:
    (path / "refs" / "heads").mkdir(parents=True)
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "refs" / "heads" / "main").write_text(_COMMIT + "\n")
    return path


def test_a_gitdir_outside_the_workspace_is_ignored(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = _git_dir(tmp_path / "host-secret-repo")
    (workspace / ".git").write_text(f"gitdir: {outside}\n")
    assert find_work_tree(workspace, (workspace,)) is None
    (workspace / ".git").write_text("gitdir: ../host-secret-repo\n")  # relative, the same place
    assert find_work_tree(workspace, (workspace,)) is None


def test_a_linked_work_tree_whose_gitdir_is_in_the_workspace_is_found(tmp_path: Path) -> None:
    """The rule is not "no .git files": git's own linked work tree layout still works."""
    workspace = tmp_path / "ws"
    common = _git_dir(workspace / "main" / ".git")
    linked = workspace / "main" / ".git" / "worktrees" / "wt"
    linked.mkdir(parents=True)
    (linked / "HEAD").write_text("ref: refs/heads/main\n")
    (linked / "commondir").write_text("../..\n")
    tree = workspace / "wt"
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {linked}\n")
    found = find_work_tree(tree, (workspace,))
    assert found == (str(tree), str(linked), True)
    assert _read_ref(str(linked), "refs/heads/main", True) == _COMMIT  # from the common dir
    assert common.is_dir()


def test_a_commondir_that_is_not_above_the_gitdir_is_not_read(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    linked = workspace / "repo" / ".git" / "worktrees" / "wt"
    linked.mkdir(parents=True)
    outside = _git_dir(tmp_path / "host-secret-repo")
    (linked / "commondir").write_text(f"{outside}\n")
    assert _read_ref(str(linked), "refs/heads/main", True) is None
