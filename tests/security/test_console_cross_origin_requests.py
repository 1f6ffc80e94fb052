"""Attack class: a page of another origin (another site, or another port of this host, which is
the same *site*, so a SameSite cookie goes along) or a forged request acting through the console.

The console lets in only its own page: a login cookie (a random id, never the token) *and* the
login's key (which the page holds in its tab's storage: per origin, port included), the
``Origin`` of a POST equal to the server's own, JSON bodies only (an HTML form cannot send
them), ``Sec-Fetch-Site`` same-origin (or none), and a ``Host`` the front answers to.

A browser sends a cookie to every port of its host: a page that a confined command serves on
another port of 127.0.0.1 (its network on) gets the console's cookie when the operator opens it.
Without the key that cookie is no login (found by an attacker's pass: a stolen cookie approved
its own command's escalation out of the sandbox).
"""

from __future__ import annotations

import html.parser
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.console.console_support import KEY_HEADER, base_of, console, same_origin
from tests.mcp.http_support import TOKEN, HttpServer, http_server, session

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with http_server(tmp_path) as running:
        yield running


async def test_requests_from_any_other_origin_are_refused_cookie_or_not(server: HttpServer) -> None:
    (server.workspace / "keep.txt").write_text("x")
    async with console(server) as web, session(server.url) as client:
        await client.call_tool("bash", {"command": "rm keep.txt"})  # something in the trash to lose
        base = base_of(server)
        port = base.rsplit(":", 1)[1]
        forged = [
            {"Origin": "http://evil.example", "Content-Type": "application/json"},
            {"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"},  # another port: same site
            {"Origin": f"http://localhost:{port}", "Content-Type": "application/json"},  # another name
            {"Origin": "null", "Content-Type": "application/json"},  # a sandboxed frame, a data: URL
            {"Content-Type": "application/json"},  # no Origin at all
            {"Origin": base, "Content-Type": "text/plain"},  # what a cross-site form or beacon can send
            {"Origin": base, "Content-Type": "application/x-www-form-urlencoded"},
            {"Origin": base, "Content-Type": "application/json-seq"},
            {"Origin": base.replace("http://", "ftp://"), "Content-Type": "application/json"},
            {"Origin": base, "Content-Type": "application/json", "Sec-Fetch-Site": "same-site"},
            {"Origin": base, "Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
        ]
        for headers in forged:
            refused = await web.post("/console/api/trash/empty", content=b"{}", headers=headers)
            assert refused.status_code in (400, 403), (headers, refused.status_code)
            assert "error" in refused.json()
        cross_read = await web.get("/console/api/sessions", headers={"Sec-Fetch-Site": "cross-site"})
        assert cross_read.status_code == 403
        foreign_read = await web.get("/console/api/sessions", headers={"Origin": "http://evil.example"})
        assert foreign_read.status_code == 403
        for host in (f"evil.example:{port}", f"127.0.0.1:{port}.evil.example"):
            rebound = await web.get("/console/api/sessions", headers={"Host": host})
            assert rebound.status_code == 403, host  # DNS rebinding: a name the front does not answer to
        assert len((await web.get("/console/api/trash")).json()) == 1  # nothing was emptied
        assert (await web.get("/console/api/actions")).json() == []


async def test_a_stolen_cookie_without_the_pages_key_is_no_login(server: HttpServer) -> None:
    async with console(server) as web:
        cookie = web.cookies.get("codemode_console")
        key = web.headers[KEY_HEADER]
        assert cookie and key and (await web.get("/console/api/me")).status_code == 200
    async with httpx2.AsyncClient(base_url=base_of(server)) as thief:
        thief.cookies.set("codemode_console", cookie, path="/console")
        for path in ("/console/api/me", "/console/api/approvals", "/console/api/events"):
            assert (await thief.get(path)).status_code == 401, path
            assert (await thief.get(path, params={"key": "guess"})).status_code == 401, path
        forged = {**same_origin(server), KEY_HEADER: "x" * len(key)}
        assert (await thief.post("/console/api/trash/empty", json={}, headers=forged)).status_code == 401
        assert (
            await thief.post("/console/api/trash/empty", json={}, headers=same_origin(server))
        ).status_code == 401
        assert (await thief.get("/console/api/me", headers={KEY_HEADER: key})).status_code == 200  # both: in


async def test_without_a_login_nothing_is_read_or_done(server: HttpServer) -> None:
    async with httpx2.AsyncClient(base_url=base_of(server)) as web:
        for path in ("/console/api/sessions", "/console/api/events", "/console/api/actions"):
            assert (await web.get(path)).status_code == 401, path
        web.cookies.set("codemode_console", "guessed-login-id", path="/console")
        assert (await web.get("/console/api/sessions")).status_code == 401
        assert (
            await web.post("/console/api/trash/empty", json={}, headers=same_origin(server))
        ).status_code == 401
        # the bearer token itself is no console login: a leaked token is not a cookie's way in
        bearer = await web.get("/console/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 401


async def test_the_page_runs_no_inline_script_and_forbids_framing(server: HttpServer) -> None:
    async with httpx2.AsyncClient(base_url=base_of(server)) as web:
        page = await web.get("/console")
    assert page.status_code == 200 and TOKEN not in page.text
    policy = page.headers["content-security-policy"]
    assert (
        "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    )
    assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"

    class Scripts(html.parser.HTMLParser):
        inline: list[str] = []  # noqa: RUF012 - one parse

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            names = {name for name, _ in attrs}
            if tag == "script" and "src" not in names:
                self.inline.append(tag)
            self.inline.extend(name for name in names if name.startswith("on"))  # inline handlers

    parser = Scripts()
    parser.feed(page.text)
    assert parser.inline == []
