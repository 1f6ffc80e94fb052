"""The common mistakes of a program get an answer, and the end of a program tells the truth.

Forgetting ``await`` (a Promise printed or passed as an argument), calls left unawaited that
still did something, and calls stopped at the end (real QuickJS, real Host, real processes).
"""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest

from codemode import Host
from tests.host_support import Probe, assert_healthy

pytestmark = pytest.mark.anyio


async def run(host: Host, source: str, **kwargs: Any) -> Any:
    with anyio.fail_after(60):
        return await host.run_code(source, **kwargs)


async def test_printing_a_promise_asks_whether_await_was_forgotten(host: Host, probe: Probe) -> None:
    result = await run(
        host,
        'print(tools.echo({value: 1})); print(store.get("k")); print({pending: tools.nap({ms: 1})});'
        "print(new Promise(() => {})); await sleep(20);",
    )
    lines = result.text.splitlines()
    assert lines[0] == "Promise (pending): did you forget await?"
    # store.get answers at once, inside the call (the host's direct call path)
    assert lines[1] == "Promise (settled): did you forget await?"
    assert lines[2] == '{"pending":"Promise (pending): did you forget await?"}'
    assert lines[3] == "Promise: did you forget await?"
    await assert_healthy(host)


async def test_a_promise_among_the_arguments_says_await(host: Host) -> None:
    result = await run(
        host,
        "try { await tools.echo({value: tools.echo({value: 1})}); } catch (e) { print(e.name, e.message); }",
    )
    assert result.ok, result.text
    assert "arguments.value is a Promise: did you forget `await`?" in result.text
    assert "JSON cannot carry" not in result.text


async def test_a_call_left_pending_that_still_finished_says_what_it_did(host: Host, probe: Probe) -> None:
    # nap sleeps 300 ms and ignores nothing: cancelled at the end, it is stopped ("cancelled");
    # a background start is shielded, so it finishes and is reported with its result.
    result = await run(host, "tools.nap({ms: 300}); print('end');")
    assert "cancelled (stopped before they took effect): tools.nap" in result.text, result.text


async def test_cancelled_means_stopped(host: Host, probe: Probe) -> None:
    result = await run(host, "tools.slow({}); await sleep(50); print('end');")
    assert probe.slow_cancelled.is_set()
    assert "cancelled (stopped before they took effect): tools.slow" in result.text
    assert result.cancelled_calls == ["slow"]


async def test_a_background_start_left_unawaited_is_never_called_cancelled(host: Host) -> None:
    # The start takes tens of ms. Ended before it began, the call is refused (nothing ran: it
    # is "cancelled"); ended while it runs, the start is shielded, finishes, and is reported
    # with its process id; done before the end, nothing is pending and nothing is claimed.
    for delay in (0, 5, 15, 30, 60, 400):
        result = await run(
            host,
            f'tools.bash({{command: "sleep 30", run_in_background: true}}); await sleep({delay}); print("end");',
        )
        listed = await host.call_tool("bash", {"action": "list"})
        running = {p["process_id"] for p in listed.structured_content["processes"] if p["state"] == "running"}
        named = set(re.findall(r"p_[0-9a-f]{12}", result.text))
        if running and "cancelled" in result.text:
            raise AssertionError(f"a running process was called cancelled: {result.text}")
        if named:
            assert named <= running, result.text
        for pid in running:
            await host.call_tool("bash", {"action": "stop", "process_id": pid})


async def test_a_call_that_finished_unawaited_during_the_program_is_reported_with_what_it_did(
    host: Host,
) -> None:
    # The start finishes long before the program ends; nothing ever looks at its promise.
    # Its process id must still reach the model (the process runs on).
    result = await run(
        host,
        'tools.bash({command: "sleep 30", run_in_background: true}); await sleep(1500); print("end");',
    )
    listed = await host.call_tool("bash", {"action": "list"})
    running = {p["process_id"] for p in listed.structured_content["processes"] if p["state"] == "running"}
    try:
        assert len(running) == 1, listed.text
        (pid,) = running
        assert "tools.bash (not awaited) finished while the program ran" in result.text, result.text
        assert pid in result.text
        assert "cancelled" not in result.text
    finally:
        for pid in running:
            await host.call_tool("bash", {"action": "stop", "process_id": pid})


@pytest.mark.parametrize(
    "looked_at",
    [
        "await p;",
        "await Promise.all([p]);",
        "p.then(v => print('then'));",
        "p.catch(() => {});",
        "await p.finally(() => {});",
    ],
)
async def test_a_call_whose_result_the_program_looked_at_is_not_reported_again(
    host: Host, looked_at: str
) -> None:
    result = await run(
        host, f"const p = tools.echo({{value: 'seen'}}); {looked_at} await sleep(20); print('end');"
    )
    assert result.ok, result.text
    assert "not awaited" not in result.text, result.text


async def test_read_only_tools_left_unawaited_change_nothing_so_are_not_reported(
    host: Host, tmp_path: Any
) -> None:
    result = await run(host, 'tools.read_file({path: "nothing-here.txt"}); await sleep(50); print("end");')
    assert "not awaited" not in result.text, result.text
    write = await run(
        host, 'tools.write_file({path: "w.txt", content: "x"}); await sleep(200); print("end");'
    )
    assert "tools.write_file (not awaited) finished while the program ran" in write.text, write.text
