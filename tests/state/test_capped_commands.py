"""Capped logs and the quota under real commands: the bash tool on a Host with small limits."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from codemode import Host
from codemode.state import _capped
from tests.host_support import MakeHost

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
CAP = 4 * MIB


def blob_disk(host: Host) -> dict[str, int]:
    return {p.name: p.stat().st_blocks * 512 for p in (host.archive.state_dir / "blobs").iterdir()}


def usage(host: Host) -> int:
    conn = host.state.db.connect()
    try:
        return _capped.state_usage(conn, str(host.archive.state_dir))
    finally:
        conn.close()


async def test_a_foreground_flood_keeps_head_and_tail_within_the_cap(make_host: MakeHost) -> None:
    async with make_host(log_cap_bytes=CAP, handoff_seconds=None) as (host, _):
        result = await host.call_tool(
            "bash", {"command": "head -c 300M /dev/zero; echo; echo THE END", "timeout_seconds": 600}
        )
        log = result.structured_content["log"]
        total = 300 * MIB + len("\nTHE END\n")
        assert result.structured_content["stdout"]["bytes"] == total
        assert log["bytes"] == total  # every byte counted
        assert log["kept_bytes"] <= CAP and log["dropped"]["from"] == MIB
        assert log["kept_bytes"] == total - (log["dropped"]["to"] - log["dropped"]["from"])
        assert f"kept {log['kept_bytes']:,} of {total:,} bytes" in result.text
        assert max(blob_disk(host).values()) <= CAP + 64 * 1024
        # The tail is there, at its own offset; a read in the gap says what was skipped.
        tail = await host.call_tool("read_archive", {"ref": log["ref"], "offset": total - 9})
        assert tail.structured_content["text"] == "\nTHE END\n"
        gap = await host.call_tool("read_archive", {"ref": log["ref"], "offset": 2 * MIB, "limit": 10})
        assert gap.structured_content["dropped"] == {"from": 2 * MIB, "to": log["dropped"]["to"]}
        assert "were not kept (it outgrew its cap" in gap.text


async def test_a_background_flood_is_capped_by_its_supervisor(make_host: MakeHost) -> None:
    async with make_host(log_cap_bytes=CAP) as (host, _):
        started = await host.call_tool(
            "bash", {"command": "head -c 100M /dev/zero; echo; echo BG END", "run_in_background": True}
        )
        pid = started.structured_content["process_id"]
        ref = started.structured_content["log"]["ref"]
        offset = 0
        tail = ""  # the last pages' output: the end may come a page before the exit is seen
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            read = await host.call_tool(
                "bash",
                {
                    "action": "read",
                    "process_id": pid,
                    "offset_bytes": offset,
                    "wait_ms": 5000,
                    "max_bytes": 1 << 20,
                },
            )
            data = read.structured_content
            assert max(blob_disk(host).values()) <= CAP + 64 * 1024  # also while it runs
            tail = (tail + data["output"])[-4096:]
            offset = data["next_offset"]
            if data["exited"] and data["eof"]:
                break
        assert data["exited"] and data["exit_code"] == 0
        assert "BG END" in tail
        total = data["total_bytes"]
        assert total >= 100 * MIB  # every byte counted (the terminal may turn \n into \r\n)
        host.processes.maintain()  # finishes the logs of ended background processes
        info = host.archive.entry_info(ref)
        assert info["finished"] is not None and info["total_bytes"] == total
        disk_bytes = info["disk_bytes"]
        assert isinstance(disk_bytes, int) and disk_bytes <= CAP + 64 * 1024


async def test_commands_never_take_the_state_dir_past_its_quota(make_host: MakeHost) -> None:
    quota = 16 * MIB
    async with make_host(log_cap_bytes=CAP, state_quota_bytes=quota, handoff_seconds=None) as (host, _):
        refs = []
        for _ in range(10):  # 30 MiB of logs through a 16 MiB quota
            result = await host.call_tool(
                "bash", {"command": "head -c 3M /dev/urandom | base64 -w 0 | head -c 3M"}
            )
            assert result.structured_content["log"]["bytes"] == 3 * MIB
            refs.append(result.structured_content["log"]["ref"])
        # The check runs in a thread of its own, so the commands never waited for it.
        step = _capped.quota_step(quota)
        deadline = time.monotonic() + 30
        while usage(host) > quota + step and time.monotonic() < deadline:
            time.sleep(0.01)
        assert usage(host) <= quota + step
        host.archive.maintain()
        assert usage(host) <= quota
        alive = []
        for ref in refs:
            page = await host.call_tool("read_archive", {"ref": ref, "limit": 1})
            alive.append(not page.is_error)
        assert alive[-1] and not alive[0]
        assert alive == sorted(alive)  # the oldest went first
        evicted = await host.call_tool("read_archive", {"ref": refs[0], "limit": 1})
        assert "no archived text" in evicted.text


def test_host_options_check_their_limits(tmp_path: Path) -> None:
    from codemode.errors import UserError

    with pytest.raises(UserError, match="log_cap_bytes"):
        Host(workspace=tmp_path, state_dir=tmp_path.parent / "s", log_cap_bytes=1000)
    with pytest.raises(UserError, match="state_quota_bytes"):
        Host(workspace=tmp_path, state_dir=tmp_path.parent / "s", state_quota_bytes=1000)
