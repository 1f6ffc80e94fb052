"""A command cannot fill the disk through its session's ``$TMPDIR`` (or ``/dev/shm``, which lies
in it), and a command stopped by its pids limit is told so. Real Hosts, real confined commands,
real tmpfs mounts (checked gone in ``/proc/self/mountinfo`` after each test)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codemode.errors import ErrorCode
from codemode.sandbox import cgroup_root
from codemode.sandbox._cgroup import PIDS_MAX_ENV
from codemode.sandbox._landlock import landlock_status
from codemode.sandbox._tmpfs import (
    DISABLE_ENV,
    MOUNT_SOURCE_PREFIX,
    counted_use,
    is_mounted,
    make_session_tmp,
    remove_session_tmp,
    sweep_stale_tmp,
    tmp_form,
    tmp_mounts,
)
from codemode.state import Redactor, State
from codemode.state._capped import enforce_quota, session_tmpfs_usage, state_usage
from tests.host_support import MakeHost

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(landlock_status().abi < 4, reason="confined commands need Landlock ABI >= 4"),
]


def _can_mount(where: Path) -> bool:
    probe = make_session_tmp(where / "probe-tmp", 1024 * 1024)
    try:
        return tmp_form(probe) == "tmpfs"
    finally:
        remove_session_tmp(probe)


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or under ``root`` in this process's mount table."""
    base = os.path.realpath(root)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p == base or p.startswith(base + "/")]


@pytest.fixture
def no_mount_left(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path``, checked to hold no mount once the test (and its Hosts) ended."""
    yield tmp_path
    assert _mounts_under(tmp_path) == []


@pytest.fixture
def mounting(no_mount_left: Path) -> Path:
    if not _can_mount(no_mount_left):
        pytest.skip("this host cannot mount a tmpfs (not root, no CAP_SYS_ADMIN)")
    return no_mount_left


async def _bash(host: Any, command: str) -> tuple[str, dict[str, Any], bool]:
    result = await host.call_tool("bash", {"command": command, "timeout_seconds": 120})
    return result.text, result.structured_content or {}, result.is_error


async def test_a_write_past_the_temp_dir_quota_fails_and_the_host_stays_fine(
    mounting: Path, make_host: MakeHost
) -> None:
    async with make_host(tmp_quota_mb=8, handoff_seconds=None) as (host, _probe):
        text, data, failed = await _bash(host, 'head -c 20000000 /dev/zero > "$TMPDIR/big"')
        assert failed and "No space left on device" in text, text
        assert "$TMPDIR is full (its quota is 8 MiB" in text, text
        assert any("$TMPDIR is full" in note for note in data["limits_hit"]), data
        # The state dir's disk is untouched: the bytes went to the session's tmpfs.
        temp = Path(host._sessions.temp_dirs[host.config.session_id])
        assert tmp_form(temp) == "tmpfs"
        assert os.statvfs(temp).f_blocks * os.statvfs(temp).f_frsize == 8 * 1024 * 1024
        # The next command runs; once the model cleans up, the note goes away.
        text, data, failed = await _bash(host, 'rm -f "$TMPDIR/big"; echo still here')
        assert not failed and "still here" in text and "$TMPDIR is full" not in text, text
        assert "limits_hit" not in data
    assert not temp.exists()


async def test_dev_shm_is_inside_the_same_quota(mounting: Path, make_host: MakeHost) -> None:
    async with make_host(tmp_quota_mb=4, handoff_seconds=None) as (host, _probe):
        text, _data, failed = await _bash(host, "head -c 10000000 /dev/zero > /dev/shm/big")
        assert failed and "No space left on device" in text and "$TMPDIR is full" in text, text


async def test_each_session_has_its_own_quota_and_closing_it_unmounts(
    mounting: Path, make_host: MakeHost
) -> None:
    async with make_host(tmp_quota_mb=4, handoff_seconds=None) as (host, _probe):
        await host.call_tool("bash", {"command": 'head -c 3000000 /dev/zero > "$TMPDIR/a"'}, session_id="one")
        result = await host.call_tool(
            "bash", {"command": 'head -c 3000000 /dev/zero > "$TMPDIR/b" && echo fits'}, session_id="two"
        )
        assert not result.is_error and "fits" in result.text, result.text
        one = host._sessions.temp_dirs["one"]
        assert str(one) in tmp_mounts(one.parent)
        await host.close_session("one")
        assert str(one) not in tmp_mounts(one.parent) and not one.exists()


def test_a_session_tmpfs_a_leaving_process_still_holds_is_unmounted_once_it_has_left(mounting: Path) -> None:
    # A command's process that is still leaving (here: its cwd in the temp dir until it reads
    # a line) keeps the mount busy when its session ends; the host tries again for a while
    # instead of leaving the mount behind for good.
    temp = make_session_tmp(mounting / "tmp", 1 << 20)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline()"],
        cwd=temp,
        stdin=subprocess.PIPE,
    )
    try:
        assert holder.stdin is not None
        remove_session_tmp(temp)  # no patience: in use, left in place
        assert str(temp) in tmp_mounts(temp.parent)
        holder.stdin.write(b"go\n")  # it leaves while the host tries again
        holder.stdin.flush()
        remove_session_tmp(temp, busy_seconds=60.0)
        assert str(temp) not in tmp_mounts(temp.parent) and not temp.exists()
    finally:
        holder.kill()
        holder.communicate()  # (and closes its stdin)
        remove_session_tmp(temp)


_LEAVE_A_MOUNT = """
import sys
from pathlib import Path
from codemode.sandbox._tmpfs import make_session_tmp
print(make_session_tmp(Path(sys.argv[1]), 1 << 20))
"""


async def test_stale_mounts_of_a_killed_host_go_at_start_up_and_live_ones_stay(
    mounting: Path, make_host: MakeHost
) -> None:
    state = mounting / "state"
    parent = state / "tmp"
    state.mkdir(mode=0o700)
    parent.mkdir(mode=0o700)
    # A host process that mounted its session's tmpfs and ended without unmounting it.
    out = subprocess.run([sys.executable, "-c", _LEAVE_A_MOUNT, str(parent)], capture_output=True, timeout=60)
    stale = Path(out.stdout.decode().strip())
    assert str(stale) in tmp_mounts(parent), out.stderr
    # One of a host still running (this process) on the same state dir.
    live = make_session_tmp(parent, 1 << 20)
    try:
        assert tmp_mounts(parent)[str(live)].startswith(f"{MOUNT_SOURCE_PREFIX}:{os.getpid()}:")
        async with make_host(state_dir=state) as (host, _probe):
            mounts = tmp_mounts(parent)
            assert str(stale) not in mounts and not stale.exists()
            assert str(live) in mounts
            del host
        # A mount elsewhere is never touched: only STATE/tmp/ of this state dir is swept.
        assert sweep_stale_tmp(mounting / "elsewhere") == []
    finally:
        remove_session_tmp(live)


def test_counting_walks_without_following_links_and_stops_at_its_cap(tmp_path: Path) -> None:
    temp = tmp_path / "s-x"
    (temp / "d").mkdir(parents=True)
    (temp / "d" / "f").write_bytes(b"x" * 100_000)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "huge").write_bytes(b"y" * 1_000_000)
    (temp / "link").symlink_to(outside)  # a link to a big tree counts as the link itself
    os.mkfifo(temp / "fifo")  # never opened
    use = counted_use(temp)
    assert use.complete and 100_000 <= use.used < 1_000_000, use
    capped = counted_use(temp, max_entries=2)
    assert not capped.complete


_FORK_BOMB = """
import os, signal, time
children = []
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        print("stopped after", len(children), "forks", flush=True)
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"""


@pytest.mark.skipif(cgroup_root().path is None, reason=f"no cgroups: {cgroup_root().reason}")
async def test_a_command_stopped_by_its_pids_limit_is_told_so(
    no_mount_left: Path, make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PIDS_MAX_ENV, "48")
    script = no_mount_left / "bomb.py"
    script.write_text(_FORK_BOMB)
    async with make_host(handoff_seconds=None, state_dir=no_mount_left / "state") as (host, _probe):
        text, data, failed = await _bash(host, f"{sys.executable} {script}")
        assert "stopped after" in text, text
        if "fork failed" not in text:
            pytest.skip("no pids controller here: the limit is the run's wall time")
        line = next(line for line in text.splitlines() if line.startswith("fork failed"))
        # 48, or the limit of a cgroup this test process made before and the host reuses
        assert re.search(r"hit its limit of \d+ processes \(and threads\) at once; run fewer", line), line
        assert int(line.split()[2]) >= 1
        assert data["limits_hit"] == [line]
        # The next command in the same (reused) cgroup is not blamed for the earlier refusals.
        text, data, failed = await _bash(host, "echo fine")
        assert not failed and "fork failed" not in text and "limits_hit" not in data, text


def test_a_session_tmpfs_counts_in_the_state_dirs_quota(mounting: Path) -> None:
    mib = 1024 * 1024
    state = State(mounting / "state", Redactor(environ={}), log_cap_bytes=4 * mib, quota_bytes=12 * mib)
    temp = make_session_tmp(state.archive.state_dir / "tmp", 16 * mib)
    try:
        arch = state.archive
        refs = []
        for _ in range(3):  # 6 MiB of finished logs: under the quota on their own
            log = arch.open_log(kind="log", session_id="s", redact=False)
            log.write(os.urandom(2 * mib))
            refs.append(log.close().ref)
        before = _usage(arch.db_path, arch.state_dir)
        (temp / "fill").write_bytes(os.urandom(8 * mib))  # what a command wrote in $TMPDIR
        assert session_tmpfs_usage(str(arch.state_dir)) >= 8 * mib
        assert _usage(arch.db_path, arch.state_dir) >= before + 8 * mib
        # Now over: the oldest finished logs make room, as for any other use of the state dir.
        assert enforce_quota(str(arch.db_path), 12 * mib) >= 1
        assert _usage(arch.db_path, arch.state_dir) <= 12 * mib
        assert not (arch.state_dir / "blobs" / refs[0]).exists()
    finally:
        remove_session_tmp(temp)
        state.close()


def _usage(db_path: Path, state_dir: Path) -> int:
    conn = sqlite3.connect(db_path)
    try:
        return state_usage(conn, str(state_dir))
    finally:
        conn.close()


async def test_where_the_host_cannot_mount_a_session_over_its_share_gets_no_new_command(
    no_mount_left: Path, make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DISABLE_ENV, "1")
    async with make_host(tmp_quota_mb=2, handoff_seconds=None) as (host, _probe):
        text, _data, failed = await _bash(host, 'head -c 3000000 /dev/urandom > "$TMPDIR/big"; echo wrote')
        assert not failed and "wrote" in text, text  # counted, not bounded, while it runs
        temp = host._sessions.temp_dirs[host.config.session_id]
        assert tmp_form(temp) == "counted" and not is_mounted(temp)
        result = await host.call_tool("bash", {"command": "echo never"})
        assert result.is_error and "never" not in result.text, result.text
        assert "over its share of 2 MiB" in result.text and "remove what you no longer need" in result.text
        assert result.code is ErrorCode.TEMP_DIR_FULL, result.structured_content
        assert (result.structured_content or {})["code"] == ErrorCode.TEMP_DIR_FULL.value
        # Only a clean-up runs: what fills $TMPDIR is seen and removed.
        result = await host.call_tool("bash", {"command": 'du -sh "$TMPDIR"/big; echo x > "$TMPDIR/y"'})
        assert result.is_error and not (temp / "y").exists(), result.text
        text, _data, failed = await _bash(host, 'du -k "$TMPDIR"/big')
        assert not failed and "big" in text, text
        text, _data, failed = await _bash(host, 'rm -f "$TMPDIR"/big')
        assert not failed and not (temp / "big").exists(), text
        text, _data, failed = await _bash(host, "echo again")
        assert not failed and "again" in text, text
