"""Path policy: real-path resolution and the write/read checks, on real files and symlinks.

Every test runs twice: resolving with openat2 and with the O_NOFOLLOW openat walk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codemode.errors import SandboxDenied, ToolError
from codemode.sandbox._paths import check_readable, check_writable, locate_writable, resolve_path
from codemode.sandbox._policy import SandboxMode, SandboxPolicy

# Every test runs with openat2 (where the kernel has it) and with the O_NOFOLLOW openat walk.
pytestmark = pytest.mark.usefixtures("resolver")


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A workspace, a directory outside it, and a state directory."""
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    state = tmp_path / "state"
    for directory in (workspace, outside, state):
        directory.mkdir()
    return workspace, outside, state


def policy(workspace: Path, state: Path, mode: SandboxMode = SandboxMode.WORKSPACE_WRITE) -> SandboxPolicy:
    return SandboxPolicy(mode=mode, writable_roots=(workspace,), protected=(state,))


def test_relative_path_resolves_against_workspace(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, _ = layout
    (workspace / "sub").mkdir()
    assert resolve_path(workspace, "sub/file.txt") == workspace / "sub" / "file.txt"


def test_missing_path_resolves_deepest_existing_parent(layout: tuple[Path, Path, Path]) -> None:
    workspace, outside, _ = layout
    (workspace / "link").symlink_to(outside)
    assert resolve_path(workspace, "link/new/deeper.txt") == outside / "new" / "deeper.txt"


def test_tilde_expands_to_home(layout: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    workspace, outside, _ = layout
    monkeypatch.setenv("HOME", str(outside))
    assert resolve_path(workspace, "~/notes.md") == outside / "notes.md"


def test_symlink_in_the_middle_then_dotdot_uses_the_target(layout: tuple[Path, Path, Path]) -> None:
    workspace, outside, _ = layout
    (outside / "inner").mkdir()
    (workspace / "link").symlink_to(outside / "inner")
    # link/.. is the parent of the *target*, not the workspace.
    assert resolve_path(workspace, "link/../x") == outside / "x"


@pytest.mark.parametrize("bad", ["", "a\x00b", "bad\ud83d.txt"])
def test_empty_and_nul_paths_are_refused(layout: tuple[Path, Path, Path], bad: str) -> None:
    workspace, _, _ = layout
    with pytest.raises(ToolError, match=r"empty|NUL|surrogate"):
        resolve_path(workspace, bad)


def test_symlink_loop_is_refused(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, _ = layout
    (workspace / "a").symlink_to(workspace / "b")
    (workspace / "b").symlink_to(workspace / "a")
    with pytest.raises(ToolError, match="symlink loop"):
        resolve_path(workspace, "a/file")


def test_write_inside_workspace_allowed(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, state = layout
    assert check_writable(policy(workspace, state), workspace, "new/dir/f.txt") == workspace / "new/dir/f.txt"


def test_write_outside_refused_with_clear_message(layout: tuple[Path, Path, Path]) -> None:
    workspace, outside, state = layout
    target = str(outside / "f.txt")
    with pytest.raises(SandboxDenied) as info:
        check_writable(policy(workspace, state), workspace, target)
    message = info.value.message
    assert target in message
    assert "workspace-write" in message
    assert str(workspace) in message
    assert "user" in message.lower() and "writable root" in message
    assert info.value.data["reason"] == "outside-roots"
    assert info.value.data["writable_roots"] == [str(workspace)]


def test_dotdot_escape_refused(layout: tuple[Path, Path, Path]) -> None:
    workspace, outside, state = layout
    with pytest.raises(SandboxDenied) as info:
        check_writable(policy(workspace, state), workspace, "../outside/f.txt")
    assert info.value.data["resolved"] == str(outside / "f.txt")
    assert str(outside / "f.txt") in info.value.message


def test_symlinked_dir_pointing_out_refused(layout: tuple[Path, Path, Path]) -> None:
    workspace, outside, state = layout
    (workspace / "escape").symlink_to(outside)
    with pytest.raises(SandboxDenied, match="outside the writable roots"):
        check_writable(policy(workspace, state), workspace, "escape/f.txt")


@pytest.mark.parametrize("dangling", [False, True])
def test_final_component_symlink_pointing_out_refused(
    layout: tuple[Path, Path, Path], dangling: bool
) -> None:
    workspace, outside, state = layout
    target = outside / "victim.txt"
    if not dangling:
        target.write_text("keep")
    (workspace / "innocent.txt").symlink_to(target)
    with pytest.raises(SandboxDenied) as info:
        check_writable(policy(workspace, state), workspace, "innocent.txt")
    assert info.value.data["resolved"] == str(target)


def test_symlink_pointing_inside_resolves_to_target(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, state = layout
    (workspace / "real.txt").write_text("x")
    (workspace / "alias.txt").symlink_to("real.txt")
    assert check_writable(policy(workspace, state), workspace, "alias.txt") == workspace / "real.txt"


def test_protected_dir_refused_even_inside_a_root_and_in_full_access(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, _ = layout
    nested_state = workspace / ".state"
    nested_state.mkdir()
    for mode in SandboxMode:
        pol = SandboxPolicy(mode=mode, writable_roots=(workspace,), protected=(nested_state,))
        with pytest.raises(SandboxDenied) as info:
            check_writable(pol, workspace, ".state/db.sqlite")
        assert info.value.data["reason"] == "protected"
        assert "state directory" in info.value.message


def test_protected_dir_refused_through_symlink(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, state = layout
    (workspace / "st").symlink_to(state)
    with pytest.raises(SandboxDenied):
        check_writable(policy(workspace, state), workspace, "st/log")
    with pytest.raises(SandboxDenied):
        check_readable(policy(workspace, state), workspace, "st/log")


def test_read_only_refuses_every_write(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, state = layout
    with pytest.raises(SandboxDenied) as info:
        check_writable(policy(workspace, state, SandboxMode.READ_ONLY), workspace, "f.txt")
    assert "read-only" in info.value.message
    assert info.value.data["reason"] == "read-only"


def test_full_access_allows_outside(layout: tuple[Path, Path, Path]) -> None:
    workspace, outside, state = layout
    pol = policy(workspace, state, SandboxMode.FULL_ACCESS)
    assert check_writable(pol, workspace, str(outside / "f")) == outside / "f"


def test_temp_dir_is_writable(layout: tuple[Path, Path, Path]) -> None:
    workspace, outside, state = layout
    pol = SandboxPolicy(writable_roots=(workspace,), temp_dir=outside, protected=(state,))
    assert check_writable(pol, workspace, str(outside / "t")) == outside / "t"


def test_root_given_through_a_symlink_still_matches(layout: tuple[Path, Path, Path], tmp_path: Path) -> None:
    workspace, _, state = layout
    alias = tmp_path / "alias"
    alias.symlink_to(workspace)
    pol = SandboxPolicy(writable_roots=(alias,), protected=(state,))
    assert check_writable(pol, alias, "f.txt") == workspace / "f.txt"


def test_prefix_sibling_is_not_inside(layout: tuple[Path, Path, Path], tmp_path: Path) -> None:
    workspace, _, state = layout
    sibling = tmp_path / "ws-other"
    sibling.mkdir()
    with pytest.raises(SandboxDenied):
        check_writable(policy(workspace, state), workspace, str(sibling / "f"))


def test_reading_outside_allowed_in_every_mode(layout: tuple[Path, Path, Path]) -> None:
    workspace, outside, state = layout
    for mode in SandboxMode:
        assert check_readable(policy(workspace, state, mode), workspace, str(outside / "f")) == outside / "f"


def test_reading_state_dir_refused(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, state = layout
    with pytest.raises(SandboxDenied) as info:
        check_readable(policy(workspace, state, SandboxMode.FULL_ACCESS), workspace, str(state / "secrets"))
    assert "read_archive" in info.value.message


def test_denied_is_a_tool_error(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, state = layout
    with pytest.raises(ToolError):
        check_writable(policy(workspace, state), workspace, os.path.join("..", "..", "etc", "passwd"))


@pytest.mark.parametrize("link", ["absolute", "relative", "chained", "dangling"])
def test_symlinks_into_the_state_dir_are_refused_for_read_and_write(
    layout: tuple[Path, Path, Path], link: str
) -> None:
    workspace, _, state = layout
    (state / "secret").write_text("token")
    alias = workspace / "alias"
    if link == "absolute":
        alias.symlink_to(state / "secret")
    elif link == "relative":
        alias.symlink_to("../state/secret")
    elif link == "chained":
        (workspace / "hop").symlink_to("../state")
        alias.symlink_to("hop/secret")
    else:
        alias.symlink_to("../state/not-yet")
    pol = policy(workspace, state)
    for check, verb in ((check_readable, "reading"), (check_writable, "writing")):
        with pytest.raises(SandboxDenied) as info:
            check(pol, workspace, "alias")
        assert info.value.message.startswith(f"sandbox denied {verb} 'alias'")
        assert info.value.data["reason"] == "protected" and info.value.data["protected"] == str(state)
        assert "state directory" in info.value.message


def test_a_path_through_the_state_dir_is_refused(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, state = layout
    with pytest.raises(SandboxDenied) as info:
        check_readable(policy(workspace, state), workspace, str(state / ".." / "ws" / "f"))
    assert f"goes through {state}" in info.value.message


def test_a_file_used_as_a_directory_is_named(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, state = layout
    (workspace / "f.txt").write_text("x")
    with pytest.raises(ToolError) as info:
        check_writable(policy(workspace, state), workspace, "f.txt/new.txt")
    assert str(workspace / "f.txt") in info.value.message and "not a directory" in info.value.message


def test_checks_leave_no_descriptor_open(layout: tuple[Path, Path, Path]) -> None:
    workspace, outside, state = layout
    (workspace / "escape").symlink_to(outside)
    pol = policy(workspace, state)
    before = len(os.listdir("/proc/self/fd"))
    check_writable(pol, workspace, "a/b/c")
    check_readable(pol, workspace, str(outside))
    for bad in ("escape/x", str(state / "x")):
        with pytest.raises(SandboxDenied):
            check_writable(pol, workspace, bad)
    assert len(os.listdir("/proc/self/fd")) == before


def test_locate_writable_pins_the_deepest_existing_directory(layout: tuple[Path, Path, Path]) -> None:
    workspace, _, state = layout
    (workspace / "a").mkdir()
    with locate_writable(policy(workspace, state), workspace, "a/b/c/f.txt") as found:
        assert (found.parent_path, found.missing_dirs, found.name) == (
            str(workspace / "a"),
            ("b", "c"),
            "f.txt",
        )
        assert found.fd is None
        # The directory held is the one that was checked, whatever the name points to later.
        (workspace / "a").rename(workspace / "moved")
        assert os.path.samestat(os.fstat(found.parent_fd), os.stat(workspace / "moved"))
