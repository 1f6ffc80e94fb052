"""A delete bigger than the session's ``$TMPDIR`` quota: the ``rm`` shim's inbox is on the state
dir's disk, beside the session's tmpfs (not in it), so ``rm -rf`` of a big build dir is a rename
into the inbox and another into the trash (same inodes), never a copy into the tmpfs that fails
with "No space left on device"; and it is restorable."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from codemode.sandbox._landlock import landlock_status
from codemode.sandbox._tmpfs import make_session_tmp, remove_session_tmp, session_inbox, tmp_form
from tests.host_support import MakeHost

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(landlock_status().abi < 4, reason="confined commands need Landlock ABI >= 4"),
]

_PART = 4 * 1024 * 1024


@pytest.fixture
def mounting(tmp_path: Path) -> Path:
    probe = make_session_tmp(tmp_path / "probe-tmp", 1024 * 1024)
    try:
        form = tmp_form(probe)
    finally:
        remove_session_tmp(probe)
    if form != "tmpfs":
        pytest.skip("this host cannot mount a tmpfs (not root, no CAP_SYS_ADMIN)")
    return tmp_path


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    """Each file under ``root``: its inode and a digest of its bytes."""
    return {
        str(path.relative_to(root)): (path.stat().st_ino, hashlib.sha256(path.read_bytes()).hexdigest())
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


async def test_rm_rf_of_a_tree_bigger_than_the_temp_quota_goes_to_the_trash_and_back(
    mounting: Path, make_host: MakeHost
) -> None:
    async with make_host(tmp_quota_mb=8, handoff_seconds=None) as (host, _probe):
        build = host.workspace / "build"
        (build / "obj").mkdir(parents=True)
        for i in range(5):  # 20 MiB, over the 8 MiB tmpfs
            (build / "obj" / f"part{i}.o").write_bytes(os.urandom(_PART))
        (build / "notes.txt").write_text("kept\n")
        before = _tree(build)
        result = await host.call_tool(
            "bash", {"command": "rm -rf build && echo removed", "timeout_seconds": 120}
        )
        data = result.structured_content or {}
        assert not result.is_error and "removed" in result.text, result.text
        assert "No space left" not in result.text, result.text
        assert [item["path"] for item in data["trashed"]] == [str(build)], data
        assert not build.exists()
        temp = Path(host._sessions.temp_dirs[host.config.session_id])
        assert tmp_form(temp) == "tmpfs"
        assert sorted(os.listdir(session_inbox(temp))) == []  # filed whole
        host.trash.restore(data["trashed"][0]["id"])
        # Back byte for byte, and the very same files: renamed each step, never copied.
        assert _tree(build) == before
    assert not temp.exists() and not session_inbox(temp).exists()
