"""Object.keys(tools) and for...in list the tools and namespaces a program can call."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from codemode import Host
from codemode.tools import Extension, make_tool

pytestmark = pytest.mark.anyio


async def run(host: Host, source: str) -> Any:
    with anyio.fail_after(60):
        return await host.run_code(source)


def _mount(host: Host) -> None:
    async def ping() -> str:
        """Answer pong."""
        return "pong"

    async def pong() -> str:
        """Answer ping."""
        return "ping"

    tools = [make_tool(ping), make_tool(pong)]
    for t in tools:  # named as an upstream server's tools are: "<server>.<tool>"
        t.name = f"srv.{t.name}"
    host.add_extension(Extension(name="mcp:srv", tools=tools, namespace="srv"))


async def test_object_keys_lists_tools_and_namespaces(host: Host) -> None:
    _mount(host)
    result = await run(
        host,
        """
const keys = Object.keys(tools);
print(JSON.stringify(keys));
print(JSON.stringify(Object.keys(tools.srv)));
const seen = [];
for (const k in tools) seen.push(k);
print(seen.length === keys.length, typeof tools[keys[0]], await tools.srv[Object.keys(tools.srv)[0]]());
""",
    )
    assert result.ok, result.text
    top, inner, last = result.text.splitlines()
    names = json.loads(top)
    expected = sorted({n.split(".", 1)[0] for n in host.registry.names()})
    assert sorted(names) == expected
    assert "srv" in names and "echo" in names and "srv.ping" not in names
    assert json.loads(inner) == ["ping", "pong"]
    assert last == "true function pong"


async def test_a_listing_is_a_plain_read_only_view(host: Host) -> None:
    result = await run(
        host,
        """
const d = Object.getOwnPropertyDescriptor(tools, "echo");
print(d.enumerable, d.writable, typeof d.value, Object.getOwnPropertyDescriptor(tools, "nope") === undefined);
print(Reflect.set(tools, "echo", 1), Object.keys(tools).includes("echo"), (await tools.echo({value: 3})).value);
""",
    )
    assert result.ok, result.text
    assert result.text == "true false function true\nfalse true 3\n"
