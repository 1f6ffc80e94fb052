"""The console in a real Chromium: Debian's, driven by Playwright, logged in through its form."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.console.console_support import base_of
from tests.mcp.http_support import TOKEN, HttpServer

_CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium on this machine: headless, no sandbox (root), nothing reaching for the network.
_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_WAIT_MS = 30_000

if not Path(_CHROMIUM).exists():  # pragma: no cover - .ci/run installs it for the browser stage
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)
playwright_api = pytest.importorskip("playwright.async_api", reason="pip install playwright")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Playwright's async API runs on asyncio


@asynccontextmanager
async def browser_page(server: HttpServer, *, login: bool = True) -> AsyncIterator[Any]:
    """A Chromium page on the server's console (logged in through its form)."""
    async with playwright_api.async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=_CHROMIUM, args=_ARGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(_WAIT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on(
                "console",
                lambda msg: (
                    errors.append(msg.text) if msg.type == "error" and "401" not in msg.text else None
                ),
            )
            await page.goto(f"{base_of(server)}/console")
            if login:
                await page.fill("#login-token", TOKEN)
                await page.click("#login-submit")
                await page.wait_for_selector("#app-view:not([hidden])")
            yield page
            assert not [e for e in errors if "Content Security Policy" in e], errors  # nothing refused by CSP
        finally:
            await browser.close()


async def screenshot(page: Any, name: str) -> None:
    folder = os.environ.get("CODEMODE_SCREENSHOTS")
    if folder:
        await page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=False)


async def until(check: Any) -> None:
    """Look again (``check``: an async function of nothing) until it holds. (The page's CSP
    forbids evaluating strings, so Playwright's ``wait_for_function`` cannot run there.)"""
    with anyio.fail_after(_WAIT_MS / 1000):
        while not await check():
            await anyio.sleep(0.05)
