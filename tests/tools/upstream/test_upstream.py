"""Upstream MCP servers as tools, against a real SDK-written server in a subprocess."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import Host
from codemode.errors import UserError
from codemode.sandbox import landlock_status
from codemode.tools.upstream import parse_mcp_config, unique_identifiers
from tests.tools.upstream.upstream_support import SERVER, read_marks, stdio_server

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]


def _host(tmp_path: Path, servers: dict[str, Any], **options: Any) -> Host:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return Host(
        workspace=workspace, state_dir=tmp_path / "state", mcp_servers={"mcpServers": servers}, **options
    )


async def _run(host: Host, source: str) -> Any:
    with anyio.fail_after(60):
        return await host.run_code(source)


async def test_calls_from_a_program_run_at_once_and_resolve_with_producer_data(tmp_path: Path) -> None:
    async with _host(tmp_path, {"up": stdio_server()}) as host:
        result = await _run(
            host,
            """
            const [sum, user, text] = await Promise.all([
              tools.up.typed_sum({numbers: [1, 2, 3]}),
              tools.up.user_info({login: "bob"}),
              tools.up.echo({text: "hello"}),
            ]);
            print(sum.total, sum.inputs.length, user.login, user.id, typeof text, text);
            """,
        )
    assert result.ok, result.text
    assert result.text.strip() == "6 3 bob 3 string hello"


async def test_declared_and_observed_result_types(tmp_path: Path) -> None:
    async with _host(tmp_path, {"up": stdio_server()}) as host:
        await host.connect_mcp_servers()
        typed = host.describe_tool("up.typed_sum")
        declared = typed["output_schema"]
        assert typed["result_type"] == "declared" and declared is not None and declared["properties"]["total"]
        assert "Promise<{ total: number; inputs: number[] }>" in typed["signature"]
        before = host.describe_tool("up.user_info")
        assert before["result_type"] == "unknown" and before["signature"].endswith("Promise<any>")
        assert (await _run(host, 'await tools.up.user_info({login: "al"})')).ok
        after = host.describe_tool("up.user_info")
        assert after["result_type"] == "observed"
        assert (
            "{ login: string; id: number; tags: string[]; admin: boolean } /* observed" in after["signature"]
        )
        seen = await _run(host, 'print((await describeTool("up.user_info")).result_type)')
        assert seen.text.strip() == "observed"
    # Kept in the state dir: a new Host knows the type before any call.
    async with _host(tmp_path, {"up": stdio_server()}) as host:
        await host.connect_mcp_servers()
        assert host.describe_tool("up.user_info")["result_type"] == "observed"
        # A plain-text result teaches nothing.
        assert (await _run(host, 'await tools.up.user_info_2({login: "al"})')).ok
        assert host.describe_tool("up.user_info_2")["result_type"] == "unknown"


async def test_names_are_identifiers_collisions_deterministic_originals_shown(tmp_path: Path) -> None:
    servers = {"my-docs": stdio_server(), "bash": stdio_server()}
    async with _host(tmp_path, servers) as host:
        await host.connect_mcp_servers()
        names = host.registry.names()
        # "user-info" sorts before "user_info": it keeps the identifier, the other gets _2.
        assert "my_docs.user_info" in names and "my_docs.user_info_2" in names
        assert host.describe_tool("my_docs.user_info")["origin"] == {"server": "my-docs", "tool": "user-info"}
        assert host.describe_tool("my_docs.user_info_2")["origin"] == {
            "server": "my-docs",
            "tool": "user_info",
        }
        # A server may not shadow a built-in tool: "bash" is mounted as bash_mcp.
        assert "bash_mcp.echo" in names and host.registry.get("bash") is not None
        result = await _run(
            host,
            'print(await tools.bash_mcp.echo({text: "x"}), (await tools.bash({command: "echo y"})).exit_code)',
        )
        assert result.text.strip() == "x 0", result.text
        found = [r["name"] for r in host.search_tools("user info login")]
        assert "my_docs.user_info" in found[:4]
        description = host.run_code_description()
        assert "MCP server my-docs (as tools.my_docs): 11 tools (upstream-test 1.2.3)" in description
        signature = host.describe_tool("my_docs.user_info")["signature"]
        assert signature.startswith("tools.my_docs.user_info(args: { login: string })")
    assert unique_identifiers(["b-x", "b_x", "9z", ""]) == {
        "": "tool",
        "9z": "_9z",
        "b-x": "b_x",
        "b_x": "b_x_2",
    }
    assert unique_identifiers(["then", "bash"], taken=("then", "bash"), suffix="_mcp") == {
        "bash": "bash_mcp",
        "then": "then_mcp",
    }


async def test_errors_arguments_images_and_secrets(tmp_path: Path) -> None:
    async with _host(tmp_path, {"up": stdio_server()}) as host:
        result = await _run(
            host,
            """
            try { await tools.up.fail({reason: "disk full"}) } catch (e) { print(e.code, "|", e.message) }
            try { await tools.up.typed_sum({numbers: "no"}) } catch (e) { print(e.code, "|", e.message) }
            try { await tools.up.nope({}) } catch (e) { print(e.code) }
            const img = await tools.up.picture();
            print(JSON.stringify(img));
            print(await tools.up.leak());
            """,
        )
        lines = result.text.splitlines()
        assert lines[0].startswith("upstream_error | up.fail: the MCP server reported an error:")
        assert "cannot do it: disk full" in lines[0]
        assert lines[1].startswith("invalid_arguments | Invalid arguments for up.typed_sum: at $.numbers:")
        assert lines[2] == "unknown_tool"
        image = json.loads(lines[3])[0]
        assert image["type"] == "image" and image["mimeType"] == "image/png" and image["bytes"] == 33
        page = await host.call_tool("read_archive", {"ref": image["ref"]})
        assert not page.is_error
        assert "s3cr3t-value-xyz" not in result.text and lines[4].startswith("the token is [REDACTED:")
        report = json.dumps(await host.mcp_servers_report())
        assert "s3cr3t-value-xyz" not in report and '"env": ["UPSTREAM_SECRET"]' in report
        direct = await host.call_tool("up.typed_sum", {"numbers": [2, 2]})
        assert direct.structured_content == {"total": 4, "inputs": [2, 2]}


async def test_a_server_that_crashes_mid_call_is_restarted(tmp_path: Path, marks: Path) -> None:
    async with _host(tmp_path, {"up": stdio_server(marks)}) as host:
        first = await _run(host, "print(await tools.up.pid())")
        crashed = await _run(
            host,
            'try { await tools.up.crash() } catch (e) { print(e.code, "|", e.message) }',
        )
        assert crashed.text.startswith("upstream_unavailable | up.crash: MCP server 'up' is not available:")
        assert "stopped while this call was in flight" in crashed.text
        assert "about to crash: goodbye" in crashed.text  # its stderr's last lines
        again = await _run(host, "print(await tools.up.pid())")
        assert again.ok, again.text
        assert again.text.strip() != first.text.strip()  # a new process
        log = host.mcp_server_log("up")
        assert "about to crash: goodbye" in log and log.count("--- started") == 2


async def test_a_changed_tool_list_is_refreshed(tmp_path: Path) -> None:
    async with _host(tmp_path, {"up": stdio_server()}) as host:
        assert (await _run(host, "print(await tools.up.grow())")).text.strip() == "grown"
        with anyio.fail_after(20):
            while host.registry.get("up.extra") is None:
                await anyio.sleep(0.01)
        result = await _run(host, "print(await tools.up.extra({x: 5}))")
        assert result.text.strip() == "extra 5"
        assert "12 tools" in host.run_code_description()


async def test_a_call_abandoned_by_its_program_is_cancelled_upstream(tmp_path: Path, marks: Path) -> None:
    async with _host(tmp_path, {"up": stdio_server(marks)}) as host:
        result = await _run(
            host,
            """
            tools.up.slow({seconds: 30, tag: "left"});
            await sleep(200);
            print("leaving");
            """,
        )
        assert "leaving" in result.text
        assert "tools.up.slow" in result.text  # the end-of-program report names the call
        lines = await anyio.to_thread.run_sync(read_marks, marks, "cancelled left")
        assert "done left" not in lines


async def test_a_call_over_the_servers_timeout_is_cancelled(tmp_path: Path, marks: Path) -> None:
    async with _host(tmp_path, {"up": stdio_server(marks, timeout=0.5)}) as host:
        result = await _run(
            host,
            'try { await tools.up.slow({seconds: 30, tag: "t"}) } catch (e) { print(e.code, "|", e.message) }',
        )
        assert result.text.startswith(
            "upstream_timeout | up.slow: MCP tool up.slow did not answer within 0.5 s"
        )
        await anyio.to_thread.run_sync(read_marks, marks, "cancelled t")


async def test_http_upstream_with_a_required_header(tmp_path: Path, http_server: tuple[str, str]) -> None:
    url, token = http_server
    servers = {
        "web": {"url": url, "headers": {"Authorization": f"Bearer {token}"}},
        "nokey": {"url": url},
    }
    async with _host(tmp_path, servers) as host:
        result = await _run(
            host,
            "const r = await Promise.all([1, 2, 3].map(n => tools.web.typed_sum({numbers: [n, n]})));"
            "print(r.map(x => x.total).join(','))",
        )
        assert result.text.strip() == "2,4,6", result.text
        report = {row["name"]: row for row in await host.mcp_servers_report()}
        assert report["web"]["reachable"] and report["web"]["tools"] == 11
        assert not report["nokey"]["reachable"] and "401" in report["nokey"]["reason"]
        assert token not in json.dumps(report) and report["web"]["headers"] == ["Authorization"]
        assert "MCP server nokey: not available" in host.run_code_description()


async def test_a_missing_command_is_reported_not_raised(tmp_path: Path) -> None:
    async with _host(tmp_path, {"gone": {"command": str(tmp_path / "no-such-server")}}) as host:
        result = await _run(host, "print(1)")
        assert result.ok
        (row,) = await host.mcp_servers_report()
        assert row["reachable"] is False and "no-such-server" in row["reason"]
        called = await _run(
            host, "try { await tools.gone.anything({}) } catch (e) { print(e.code, '|', e.message) }"
        )
        assert called.text.startswith("unknown_tool | Unknown tool 'gone.anything'."), called.text
        assert "MCP server gone: not available (the command was not found" in called.text
        assert "MCP server gone: not available" in host.run_code_description()
        # Once the command exists, a later use connects it (after the failure's backoff).
        script = tmp_path / "no-such-server"
        script.write_text(f"#!/bin/sh\nexec {sys.executable} {SERVER} stdio\n")
        script.chmod(0o755)
        with anyio.fail_after(30):
            while host.registry.get("gone.echo") is None:
                await _run(host, "print(1)")
                await anyio.sleep(0.05)
        assert (await _run(host, 'print(await tools.gone.echo({text: "back"}))')).text.strip() == "back"


async def test_connect_at_open_and_add_mcp_server(tmp_path: Path) -> None:
    async with _host(tmp_path, {"up": stdio_server()}, connect_mcp_at_open=True) as host:
        assert host.registry.get("up.echo") is not None  # before any use
        assert host.add_mcp_server("more", stdio_server()) == "more"
        assert (await _run(host, 'print(await tools.more.echo({text: "m"}))')).text.strip() == "m"


def test_configuration_expands_variables_and_checks_fields() -> None:
    (server,) = parse_mcp_config(
        {
            "mcpServers": {
                "d": {"url": "https://x/${HOSTPART}/mcp", "headers": {"Authorization": "Bearer ${TOK}"}}
            }
        },
        environ={"HOSTPART": "h", "TOK": "abcdef123"},
    )
    assert server.url == "https://x/h/mcp" and server.headers == {"Authorization": "Bearer abcdef123"}
    assert "abcdef123" not in repr(server) and "abcdef123" not in json.dumps(server.public())
    assert server.redactor().redact("got abcdef123") == "got [REDACTED:env:MCP_D_AUTHORIZATION_TOKEN]"
    with pytest.raises(UserError, match=r"server 'd', headers.Authorization: \$\{TOK\} is not set"):
        parse_mcp_config({"d": {"url": "u", "headers": {"Authorization": "Bearer ${TOK}"}}}, environ={})
    with pytest.raises(UserError, match='either "command"'):
        parse_mcp_config({"d": {"command": "x", "url": "y"}}, environ={})
    with pytest.raises(UserError, match="timeout"):
        parse_mcp_config({"d": {"command": "x", "timeout": 0}}, environ={})
    (default,) = parse_mcp_config({"d": {"command": "${NOPE:-srv}"}}, environ={})
    assert default.command == "srv" and default.timeout == 60


@pytest.mark.skipif(landlock_status().abi < 3, reason=f"no Landlock ABI >= 3: {landlock_status().reason}")
async def test_a_sandboxed_server_runs_through_the_launch_path(tmp_path: Path) -> None:
    workspace_marks = tmp_path / "ws" / "marks.txt"
    servers = {
        "ro": stdio_server(workspace_marks, sandbox="read-only"),
        "rw": stdio_server(workspace_marks, sandbox="workspace-write"),
    }
    async with _host(tmp_path, servers) as host:
        result = await _run(
            host,
            """
            print(await tools.ro.echo({text: "boxed"}));
            print(await tools.ro.slow({seconds: 0, tag: "ro"}).catch(e => e.code));
            print(await tools.rw.slow({seconds: 0, tag: "rw"}));
            print(await tools.ro.crash().catch(e => e.code));
            """,
        )
        assert result.text.splitlines() == ["boxed", "upstream_error", "slept 0.0 (rw)", "upstream_error"], (
            result.text
        )
        assert "PermissionError" in host.mcp_server_log("ro")  # read-only: the workspace is not writable
        assert workspace_marks.read_text().splitlines()[:2] == ["start rw", "done rw"]
        before = (await _run(host, "print(await tools.rw.pid())")).text.strip()
        crashed = await _run(host, "print(await tools.rw.crash().catch(e => e.code))")
        assert crashed.text.strip() == "upstream_unavailable", crashed.text
        after = (await _run(host, "print(await tools.rw.pid())")).text.strip()
        assert after.isdigit() and after != before  # restarted through the launch path
        (ro, rw) = await host.mcp_servers_report()
        assert ro["sandbox"] == "read-only" and ro["reachable"] and rw["sandbox"] == "workspace-write"
