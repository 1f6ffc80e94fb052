"""Attack class: markup a program or a command writes, run as script in the console's page.

A program's source and output, a tool call's arguments, a command line and a terminal's output
are a model's or a command's text: the page shows them as text (its DOM built with
``textContent``; the CSP forbids inline script besides). Checked in a real Chromium.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.console.browser_support import anyio_backend, browser_page, until
from tests.mcp.http_support import HttpServer, http_server, session

pytestmark = [pytest.mark.anyio, pytest.mark.browser]
__all__ = ["anyio_backend"]  # Playwright runs on asyncio

_MARKUP = '<img src=x onerror="window.__owned=1"><script>window.__owned=2</script>'


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with http_server(tmp_path) as running:
        yield running


async def test_markup_from_programs_and_commands_shows_as_text(server: HttpServer) -> None:
    program = (
        f"// {_MARKUP}\nconst m = {_MARKUP!r};\nawait tools.bash({{command: 'true # ' + m}});\nprint(m);"
    )
    async with browser_page(server) as page, session(server.url) as client:
        await client.call_tool("run_code", {"code": program})
        command = f"printf '%s\\n' '{_MARKUP}'; printf '\\033]0;{_MARKUP}\\007'; cat"
        started = await client.call_tool("bash", {"command": command, "run_in_background": True})
        assert not started.is_error
        await page.click("#sessions-refresh")
        await page.click("#sessions [data-session-id]")
        await page.click("#runs [data-run-id]:last-child")
        await page.locator("#run-output", has_text="<script>").wait_for()
        assert _MARKUP in await page.inner_text("#run-source")
        assert "<script>window.__owned=2</script>" in await page.inner_text("#timeline")  # the arguments
        await page.click("#processes [data-process-id] .open-terminal")

        async def shown() -> bool:
            return "<img src=x" in await page.inner_text("#terminal .xterm-rows")

        await until(shown)
        assert _MARKUP in await page.inner_text("#processes")
        owned = await page.evaluate("window.__owned === undefined && !document.querySelector('img[src=x]')")
    assert owned is True
