"""The console in a real Chromium (Debian's, driven by Playwright) against a real `codemode mcp --http`.

Run with ``pytest -m browser`` (`.ci/run` installs Chromium and Playwright for that stage). With
``CODEMODE_SCREENSHOTS=docs/console`` the tests also save the screenshots README shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp.types as types
import pytest
from mcp import ClientSession

from tests.console.browser_support import anyio_backend, browser_page, screenshot, until
from tests.console.console_support import base_of
from tests.mcp.http_support import TOKEN, HttpServer, http_server, session

pytestmark = [pytest.mark.anyio, pytest.mark.browser]
__all__ = ["anyio_backend"]  # Playwright runs on asyncio: the fixture is this module's too


def _text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent)).strip()


def _run_soon(group: anyio.abc.TaskGroup, client: ClientSession, program: str) -> list[types.CallToolResult]:
    """Run ``program`` in the background; its result lands in the list returned."""
    outcome: list[types.CallToolResult] = []

    async def run() -> None:
        outcome.append(await client.call_tool("run_code", {"code": program}))

    group.start_soon(run)
    return outcome


async def _open_session(page: Any) -> None:
    await page.click("#sessions [data-session-id]")


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with http_server(tmp_path, "--approvals", "console") as running:
        yield running


async def test_a_programs_calls_appear_live_on_its_timeline(server: HttpServer) -> None:
    program = (
        "await tools.bash({command: 'echo first'});\n"
        "const [a, b] = await Promise.all([tools.bash({command: 'sleep 1; echo a'}),"
        " tools.bash({command: 'sleep 3; echo b'})]);\nprint(a.stdout.excerpt + b.stdout.excerpt);"
    )
    async with (
        browser_page(server) as page,
        session(server.url) as client,
        anyio.create_task_group() as group,
    ):
        outcome = _run_soon(group, client, program)
        await page.wait_for_selector("#sessions [data-session-id]")
        await _open_session(page)
        await page.click("#runs [data-run-id]")
        # the two parallel calls show while they run, each as its own row
        running = page.locator("#timeline [data-call-id][data-status=running]")

        async def two_running() -> bool:
            return bool(await running.count() >= 2)

        await until(two_running)
        await screenshot(page, "timeline-live")
        await page.wait_for_selector("#run-status.ok")
        rows = await page.locator("#timeline [data-call-id]").count()
        assert rows == 6  # three bash calls, each with its command under it
        assert await page.locator("#timeline [data-call-id][data-status=running]").count() == 0
        assert "sleep 3; echo b" in await page.inner_text("#timeline")
        assert "Promise.all" in await page.inner_text("#run-source")
        assert (await page.inner_text("#run-output")).split() == ["a", "b"]
        await screenshot(page, "program")
    assert _text(outcome[0]).split() == ["a", "b"]


async def test_a_person_types_into_a_background_cat_through_the_terminal(server: HttpServer) -> None:
    async with browser_page(server) as page, session(server.url) as client:
        started = await client.call_tool("bash", {"command": "cat", "run_in_background": True})
        assert not started.is_error
        await page.click("#sessions-refresh")
        await _open_session(page)
        await page.click("#processes [data-process-id] .open-terminal")
        await page.wait_for_selector("#terminal .xterm")
        await page.click("#takeover")
        await page.wait_for_selector("#handback:not([hidden])")
        await page.click("#terminal")
        await page.keyboard.type("echo from the browser")
        await page.keyboard.press("Enter")

        # the page does not echo locally: what shows came back from the process's terminal
        async def echoed() -> bool:
            return "echo from the browser" in await page.inner_text("#terminal .xterm-rows")

        await until(echoed)
        await screenshot(page, "terminal")
        refused = await client.call_tool(
            "bash", {"action": "write", "process_id": _process_id(started), "input": "model\n"}
        )
        assert refused.is_error and "taken over" in _text(refused)
        await page.click("#handback")
        await page.wait_for_selector("#takeover:not([hidden])")
        await page.locator("#actions", has_text="handback").wait_for()
        actions = await page.inner_text("#actions")
        assert "takeover" in actions and "input" in actions


def _process_id(started: types.CallToolResult) -> str:
    data = started.structured_content
    assert isinstance(data, dict)
    return str(data["process_id"])


async def test_a_command_approved_from_the_page_lets_the_program_go_on(tmp_path: Path) -> None:
    program = "const r = await tools.bash({command: 'touch approved.txt'}); print('exit ' + r.exit_code);"
    with http_server(tmp_path, "--approvals", "console", "--approve-commands") as server:
        async with (
            browser_page(server) as page,
            session(server.url) as client,
            anyio.create_task_group() as group,
        ):
            outcome = _run_soon(group, client, program)
            item = page.locator("#approvals [data-approval-id]")
            await item.wait_for()
            assert "touch approved.txt" in await item.inner_text()
            assert not (server.workspace / "approved.txt").exists()  # the program waits for the answer
            await screenshot(page, "approval")
            await item.locator(".approve-once").click()
            await item.wait_for(state="detached")
            with anyio.fail_after(30):
                while not outcome:
                    await anyio.sleep(0.05)
            await page.locator("#actions", has_text="approval").wait_for()
        assert _text(outcome[0]) == "exit 0" and (server.workspace / "approved.txt").exists()


async def test_without_the_cookie_the_page_asks_for_the_token_and_the_api_refuses(server: HttpServer) -> None:
    async with browser_page(server, login=False) as page:
        await page.wait_for_selector("#login-view:not([hidden])")
        await page.fill("#login-token", "wrong-token")
        await page.click("#login-submit")
        await page.wait_for_selector("#login-error:not([hidden])")
        assert "token" in await page.inner_text("#login-error")
        assert TOKEN not in await page.content()
        api = await page.evaluate("fetch('/console/api/sessions').then(r => r.status)")
        assert api == 401
        # a page of another origin (another port of this host) cannot act, cookie or not
        foreign = await page.request.post(
            f"{base_of(server)}/console/api/trash/empty",
            headers={"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"},
            data="{}",
        )
        assert foreign.status == 403


async def test_a_read_only_console_offers_no_action(tmp_path: Path) -> None:
    with http_server(tmp_path, "--console", "read-only") as server:
        async with browser_page(server) as page, session(server.url) as client:
            await client.call_tool("bash", {"command": "cat", "run_in_background": True})
            await page.click("#sessions-refresh")
            await _open_session(page)
            await page.click("#processes [data-process-id] .open-terminal")
            await page.wait_for_selector("#terminal .xterm")
            assert "read-only" in await page.inner_text("#mode")
            for control in ("#takeover", "#stop-process", "#trash-empty"):
                assert not await page.locator(control).is_visible(), control
            status = await page.evaluate(
                "fetch('/console/api/trash/empty', {method: 'POST', body: '{}', headers: {'Content-Type':"
                " 'application/json', 'X-Codemode-Console': sessionStorage.getItem('codemode_console_key')}})"
                ".then(r => r.status)"
            )
            assert status == 403
