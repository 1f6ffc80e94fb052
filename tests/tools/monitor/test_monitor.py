"""The Monitor extension through a real Host: watchers are real processes under real supervisors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import Host
from codemode.sandbox import remove_session_tmp, tmp_mounts

pytestmark = pytest.mark.anyio


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with Host(workspace=workspace, state_dir=tmp_path / "state") as opened:
        yield opened


async def _call(host: Host, tool: str, **args: Any) -> dict[str, Any]:
    result = await host.call_tool(tool, args)
    assert not result.is_error, result.text
    assert isinstance(result.structured_content, dict), result.structured_content
    return result.structured_content


async def _start(host: Host, command: str, **options: Any) -> str:
    data = await _call(host, "monitor_start", command=command, **options)
    wid: str = data["watcher_id"]
    return wid


async def _until_exit(host: Host, wid: str) -> dict[str, Any]:
    with anyio.fail_after(60):
        data = await _call(host, "monitor_wait", watcher_id=wid, until="exit", timeout_ms=60_000)
    assert data["reason"] == "exit", data
    return data


async def _all_events(host: Host, wid: str) -> list[dict[str, Any]]:
    data = await _call(host, "monitor_events", watcher_id=wid)
    events: list[dict[str, Any]] = data["events"]
    return events


async def test_stdout_lines_are_events_and_stderr_goes_to_the_log_only(host: Host) -> None:
    wid = await _start(
        host,
        "echo first; echo 'noise on stderr' >&2; echo second; sleep 0.5; echo third; exit 3",
        description="a test watcher",
    )
    ended = await _until_exit(host, wid)
    assert ended["exit_code"] == 3 and ended["state"] == "exited"
    events = await _all_events(host, wid)
    lines = [line for e in events for line in e["lines"]]
    assert lines == ["first", "second", "third"]
    assert all("noise" not in e["text"] for e in events)
    final = events[-1]
    assert final["final"] and "exited with code 3" in final["text"] and "a test watcher" in final["text"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    (info,) = (await _call(host, "monitor_list"))["watchers"]
    assert info["watcher_id"] == wid and info["events"] == len(events)
    log = await _call(host, "read_archive", ref=info["log_ref"])
    assert "noise on stderr" in log["text"] and "third" in log["text"]


async def test_lines_within_the_window_are_one_event(host: Host) -> None:
    # The first line after a quiet spell goes out at once, with the rest of its read; lines
    # arriving within the window after it go together, however many reads they take.
    wid = await _start(host, "echo first; sleep 0.05; printf 'a\\n'; printf 'b\\n'; printf 'c\\n'; exit 0")
    await _until_exit(host, wid)
    events = await _all_events(host, wid)
    assert events[0]["lines"] == ["first"]
    assert events[1]["lines"] == ["a", "b", "c"]
    assert "3 lines: a | b | c" in events[1]["text"]


async def test_events_are_delivered_once_through_results_and_notifications(host: Host) -> None:
    wid = await _start(host, "echo hello-event; exit 0")
    with anyio.fail_after(60):
        while not any(n.data and n.data.get("final") for n in host.pending_notifications()):
            await anyio.sleep(0.01)
    first = await host.run_code('print("x")')
    assert "hello-event" in first.text and f"Monitor watcher {wid} exited with code 0" in first.text
    again = await host.run_code('print("x")')
    assert "hello-event" not in again.text and "exited" not in again.text
    assert host.pending_notifications() == []


async def test_notifications_yields_each_event_once(host: Host) -> None:
    wid = await _start(host, "echo one; exit 0")
    got: list[str] = []
    with anyio.fail_after(60):
        async for note in host.notifications():
            got.append(note.text)
            if note.data and note.data.get("final"):
                break
    assert any("one" in text for text in got) and wid in got[-1]
    assert host.pending_notifications() == []
    assert (await host.run_code('print("x")')).text == "x\n"  # nothing left for the trailer


async def test_an_event_survives_a_host_restart_and_is_delivered_once(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    go = workspace / "go"
    state = tmp_path / "state"
    async with Host(workspace=workspace, state_dir=state) as first:
        wid = await _start(
            first, f"echo before; while [ ! -e {go} ]; do sleep 0.02; done; echo after; exit 0"
        )
        await _call(first, "monitor_wait", watcher_id=wid, until={"pattern": "before"}, timeout_ms=60_000)
    # No host runs: the watcher's supervisor records the event and its end by itself.
    go.touch()
    async with Host(workspace=workspace, state_dir=state) as second:
        with anyio.fail_after(60):
            while not any(n.data and n.data.get("final") for n in second.pending_notifications()):
                await anyio.sleep(0.01)
        result = await second.run_code('print("x")')
    assert "after" in result.text and f"{wid} exited with code 0" in result.text
    assert "before" not in result.text  # the wait showed it: delivered then
    async with Host(workspace=workspace, state_dir=state) as third:
        assert third.pending_notifications() == []
        assert "after" not in (await third.run_code('print("x")')).text
    # The first host kept its session tmpfs for the watcher that outlived it; the watcher has
    # ended, but its host's process (this test's) lives on, so no later host sweeps it: release it.
    for point in tmp_mounts(state / "tmp"):
        remove_session_tmp(Path(point))
    assert tmp_mounts(state / "tmp") == {}


async def test_the_rate_limit_suppresses_and_counts(host: Host, tmp_path: Path) -> None:
    ws = host.workspace
    script = (
        "echo 1; while [ ! -e f1 ]; do sleep 0.01; done; echo 2; while [ ! -e f2 ]; do sleep 0.01; done; "
        "echo 3; touch d3; while [ ! -e f3 ]; do sleep 0.01; done; echo 4; exit 0"
    )
    wid = await _start(host, script, max_events_per_minute=2, coalesce_ms=0)
    await _call(host, "monitor_wait", watcher_id=wid, until={"pattern": "^1$"}, timeout_ms=60_000)
    (ws / "f1").touch()
    await _call(host, "monitor_wait", watcher_id=wid, until={"pattern": "^2$"}, after=1, timeout_ms=60_000)
    (ws / "f2").touch()
    with anyio.fail_after(60):
        while not (ws / "d3").exists():
            await anyio.sleep(0.01)
    (ws / "f3").touch()
    await _until_exit(host, wid)
    events = await _all_events(host, wid)
    assert [e["lines"] for e in events[:-1]] == [["1"], ["2"]]
    assert "the rate limit suppressed 2 lines in all" in events[-1]["text"]


async def test_max_events_stops_the_watcher(host: Host) -> None:
    ws = host.workspace
    wid = await _start(
        host,
        "echo a; while [ ! -e go ]; do sleep 0.01; done; echo b; echo c; sleep 1000",
        max_events=2,
        coalesce_ms=0,
    )
    await _call(host, "monitor_wait", watcher_id=wid, until={"pattern": "a"}, timeout_ms=60_000)
    (ws / "go").touch()
    ended = await _until_exit(host, wid)
    assert ended["state"] == "stopped"
    events = await _all_events(host, wid)
    assert len([e for e in events if not e["final"]]) == 2
    assert "max_events (2)" in events[-1]["text"]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"idle_timeout_seconds": 1}, "idle_timeout_seconds (1 s)"),
        ({"timeout_seconds": 1}, "timeout_seconds (1 s)"),
    ],
)
async def test_limits_stop_the_watcher(host: Host, options: dict[str, int], words: str) -> None:
    wid = await _start(host, "echo started; exec sleep 1000", **options)
    ended = await _until_exit(host, wid)
    assert ended["state"] == "stopped"
    assert words in (await _all_events(host, wid))[-1]["text"]


async def test_stop_and_unknown_watchers(host: Host) -> None:
    wid = await _start(host, "exec sleep 1000")
    stopped = await _call(host, "monitor_stop", watcher_id=wid)
    assert stopped["state"] == "stopped"
    assert host.pending_notifications() == []  # the stop's answer said so: nothing to deliver
    unknown = await host.call_tool("monitor_events", {"watcher_id": "w_nope"})
    assert unknown.is_error and "no such watcher 'w_nope'" in unknown.text
    other = await host.call_tool("monitor_events", {"watcher_id": wid}, session_id="someone-else")
    assert other.is_error and "no such watcher" in other.text


async def test_bash_wait_works_on_a_watchers_events(host: Host) -> None:
    wid = await _start(host, "echo warming; sleep 0.3; echo 'deploy finished: ok'; exec sleep 1000")
    data = await _call(host, "bash", action="wait", process_id=wid, until={"pattern": "deploy finished"})
    assert data["reason"] == "pattern" and data["line"] == "deploy finished: ok" and data["kind"] == "watcher"
    await _call(host, "monitor_stop", watcher_id=wid)


async def test_a_program_finds_and_uses_the_monitor(host: Host) -> None:
    result = await host.run_code(
        """
        const found = await searchTools("monitor");
        const w = await tools.monitor_start({command: "echo ci: passed; exit 0", description: "CI"});
        const e = await tools.monitor_wait({watcher_id: w.watcher_id, until: {pattern: "passed"}});
        print(found.map(t => t.name).join(","), e.reason, e.line);
        await tools.monitor_wait({watcher_id: w.watcher_id, until: "exit"});  // ended: no tmpfs kept for it
        """
    )
    assert result.ok, result.text
    assert "monitor_start" in result.text and "pattern ci: passed" in result.text


async def test_disabled_extension_removes_tools_and_guidance(host: Host) -> None:
    assert "### monitor" in host.describe_tool("monitor_start")["guide"]
    assert "tools.monitor_start" in host.run_code_description()
    host.disable_extension("monitor")
    assert host.search_tools("monitor") == []
    assert (
        "### monitor" not in host.run_code_description()
        and "monitor_start" not in host.run_code_description()
    )
    assert (await host.call_tool("monitor_list", {})).is_error
    host.enable_extension("monitor")
    assert {t["name"] for t in host.search_tools("monitor")} >= {"monitor_start", "monitor_events"}


async def test_a_watcher_is_confined_like_any_command(host: Host, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    wid = await _start(
        host, f"touch {outside}/f && echo wrote || echo refused; touch inside && echo inside-ok"
    )
    await _until_exit(host, wid)
    lines = [line for e in await _all_events(host, wid) for line in e["lines"]]
    assert lines == ["refused", "inside-ok"]
    assert not (outside / "f").exists() and (host.workspace / "inside").exists()
