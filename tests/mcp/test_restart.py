"""Restart without loss (issue 33): a server killed with SIGKILL, then a new one on the same
state directory and port; an old session id answered with why its session ended; a client
that goes away without a word has its running calls cancelled.

The rule a restarted server follows: every process the state directory recorded is identity
checked (its supervisor's pid and start time). A session the dead server held has ended, so
its ``lifecycle: session`` processes are stopped; ``managed`` ones are re-adopted (they run on,
any server or the CLI on the state directory reads and stops them). Nothing is left running
that no record owns.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
import pytest
from mcp.shared.exceptions import MCPError

from codemode.tools.bash._proctree import find_members
from tests.host_support import alive, survivors
from tests.mcp.http_support import HttpServer, http_server, open_raw, session, wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]


async def _codemode(server: HttpServer, *args: str) -> subprocess.CompletedProcess[str]:
    """The codemode CLI on the server's workspace and state dir."""
    where = ["--workspace", str(server.workspace), "--state-dir", str(server.state_dir)]
    return await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "codemode", *args, *where], capture_output=True, text=True
        )
    )


async def _processes(server: HttpServer) -> dict[str, dict[str, Any]]:
    listed = await _codemode(server, "ps", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    return {row["process_id"]: row for row in json.loads(listed.stdout)}


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1].split("/", 1)[0]


async def test_a_restarted_server_stops_the_dead_ones_session_processes_and_readopts_managed_ones(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(150), http_server(tmp_path, name="one") as one:
        async with session(one.url, terminate_on_close=False) as client:
            ended = await client.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
            kept = await client.call_tool(
                "bash", {"command": "sleep 301", "run_in_background": True, "lifecycle": "managed"}
            )
            assert ended.structured_content is not None and kept.structured_content is not None
            ids = [ended.structured_content["process_id"], kept.structured_content["process_id"]]
            pids = [ended.structured_content["pid"], kept.structured_content["pid"]]
            supervisors = [psutil.Process(pid).ppid() for pid in pids]  # each command's PTY owner
            one.process.send_signal(signal.SIGKILL)
            one.process.wait()
            # A crash stops nothing by itself: the supervisors outlive their host.
            assert all(alive(pid) for pid in (*pids, *supervisors))

            with http_server(tmp_path, name="two", bind=f"127.0.0.1:{_port(one.url)}") as two:
                # The new server ended the dead one's session when it opened the state dir: its
                # lifecycle=session process is stopped, the managed one re-adopted.
                assert await wait_until_gone(pids[0]) and await wait_until_gone(supervisors[0])
                assert alive(pids[1]) and alive(supervisors[1])
                rows = await _processes(two)
                assert (rows[ids[0]]["state"], rows[ids[1]]["state"]) == ("stopped", "running")
                assert find_members(ids[0]) == set()  # nothing of it is left running unowned

                # The client still presents its old session id: the new server answers 404 with
                # why the session ended and what to do (the SDK raises the error it carries).
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("bash", {"action": "list"})
                said = str(refused.value)
                assert "died and the server was restarted" in said and f"pid {one.process.pid}" in said
                assert "start a new session" in said

                # A new session works; the re-adopted process is read and stopped through its record.
                async with session(two.url) as fresh:
                    ran = await fresh.call_tool("run_code", {"code": "print(6 * 7)"})
                    assert not ran.is_error
                stopped = await _codemode(two, "stop", ids[1])
                assert stopped.returncode == 0, stopped.stderr
                assert await wait_until_gone(pids[1]) and await wait_until_gone(supervisors[1])
                assert find_members(ids[1]) == set()


async def _raw_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """A session opened by hand and used once (tools/list): its request headers."""
    headers = (await open_raw(http, url)).headers
    listed = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert listed.status_code == 200
    return headers


async def _until_ended(server: HttpServer, session_id: str) -> None:
    """Wait until the state dir records that the session ended (polled, with a bound)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.closing(sqlite3.connect(server.state_dir / "state.db")) as db:
            row = db.execute(
                "SELECT reason FROM session_holds WHERE session_id = ?", (session_id,)
            ).fetchone()
        if row is not None and row[0] is not None:
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"session {session_id} did not end")


async def test_an_old_session_id_is_told_how_its_session_ended(tmp_path: Path) -> None:
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    with http_server(tmp_path, "--idle-timeout", "1") as server, anyio.fail_after(60):
        async with httpx2.AsyncClient(timeout=30) as http:
            closed = await _raw_session(http, server.url)
            assert (await http.delete(server.url, headers=closed)).status_code == 200
            expired = await _raw_session(http, server.url)
            # Left alone (a request would keep it alive) until the idle timeout has ended it.
            await _until_ended(server, f"mcp-{expired['Mcp-Session-Id']}")
            answers = {
                name: await http.post(server.url, headers=headers, json=ping)
                for name, headers in (("closed", closed), ("expired", expired))
            }
            unknown = await http.post(server.url, headers={**closed, "Mcp-Session-Id": "0" * 32}, json=ping)
    said = {name: answer.json()["error"]["message"] for name, answer in answers.items()}
    assert [a.status_code for a in answers.values()] == [404, 404], said
    assert "the client closed it (DELETE)" in said["closed"]
    assert "idle longer than the server's idle timeout (1 s)" in said["expired"]
    assert (
        unknown.status_code == 404
        and "holds no MCP session with this id" in unknown.json()["error"]["message"]
    )
    assert all("start a new session" in text for text in said.values())


_CLIENT = textwrap.dedent(
    """
    import os, sys, anyio
    from tests.mcp.http_support import session

    async def main(url, code):
        async with session(url, terminate_on_close=False) as client:
            await client.call_tool("run_code", {"code": code})

    anyio.run(main, sys.argv[1], os.environ["TEST_CODE"])
    """
)


async def test_a_client_that_vanishes_has_its_running_call_cancelled(tmp_path: Path) -> None:
    """A client killed mid-call sends neither a cancellation nor DELETE; its session lives on
    (idle timeout 30 min) but its call is cancelled at once: the command it runs is stopped."""
    token = f"{3000 + os.getpid() % 1000}.25"
    with http_server(tmp_path) as server, anyio.fail_after(90):
        root = str(Path(__file__).resolve().parents[2])
        code = f'await tools.bash({{command: "sleep {token}"}}); print("never")'
        client = subprocess.Popen(  # (the code in the environment: its command line shows no sleep)
            [sys.executable, "-c", _CLIENT, server.url],
            env={**os.environ, "PYTHONPATH": root, "TEST_CODE": code},
        )
        try:
            while not survivors(f"sleep {token}"):
                assert client.poll() is None, "the client ended before its call ran"
                await anyio.sleep(0.05)
            (command,) = survivors(f"sleep {token}")
            client.send_signal(signal.SIGKILL)
            client.wait()
            assert await wait_until_gone(command), "the vanished client's command still runs"
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        assert "Traceback" not in server.stderr.read_text()
