"""``--mcp-config`` on the CLI: run, call, tools, describe, doctor and ``logs mcp:SERVER``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.upstream.upstream_support import stdio_server


def _codemode(tmp_path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CODEMODE_HOME": str(tmp_path / "state"), "UPSTREAM_TOKEN": "tok-123456789"}
    return subprocess.run(
        [sys.executable, "-m", "codemode", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path / "ws",
        timeout=120,
    )


@pytest.mark.slow  # a dozen CLI processes, each a cold start: ~20 s on 2 busy cores
def test_mcp_config_on_run_call_tools_describe_doctor_and_logs(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    server = stdio_server(env={"UPSTREAM_SECRET": "${UPSTREAM_TOKEN}"})
    first = tmp_path / "one.json"
    first.write_text(json.dumps({"mcpServers": {"up": server}}))
    second = tmp_path / "two.json"
    second.write_text(json.dumps({"mcpServers": {"down": {"command": str(tmp_path / "missing")}}}))
    config = ["--mcp-config", str(first), "--mcp-config", str(second)]

    run = _codemode(
        tmp_path, "run", "-", *config, stdin="print(await tools.up.leak(), await tools.up.echo({text: 'x'}))"
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith("the token is [REDACTED:") and "tok-123456789" not in run.stdout

    call = _codemode(tmp_path, "call", "up.typed_sum", '{"numbers": [4, 5]}', "--json", *config)
    assert json.loads(call.stdout)["structured_content"] == {"total": 9, "inputs": [4, 5]}

    tools = _codemode(tmp_path, "tools", "user", *config)
    assert tools.stdout.splitlines()[0].startswith("up.user_info ")
    assert tools.stdout.splitlines()[0].endswith(" (listed as up__user_info)")  # the name MCP clients see

    describe = _codemode(tmp_path, "describe", "up.typed_sum", *config)
    assert describe.stdout.startswith(
        "tools.up.typed_sum(args: { numbers: number[] }): Promise<{ total: number;"
    )

    doctor = _codemode(tmp_path, "doctor", *config)
    assert doctor.returncode == 1  # the missing server is a finding
    assert (
        "mcp server    up (stdio, unconfined:" in doctor.stdout
        and "reachable, 11 tools, upstream-test 1.2.3" in doctor.stdout
    )
    assert "MCP server 'down' is not reachable: the command was not found" in doctor.stdout
    assert "tok-123456789" not in doctor.stdout

    logs = _codemode(tmp_path, "logs", "mcp:up")  # found in the state dir without the config
    assert logs.returncode == 0 and "[codemode] connected: upstream-test 1.2.3, 11 tools" in logs.stdout
    unknown = _codemode(tmp_path, "logs", "mcp:nobody")
    assert unknown.returncode == 2 and "no log of an MCP server named 'nobody'" in unknown.stderr

    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"x": {"url": "http://h/${NOT_SET_ANYWHERE}"}}}')
    refused = _codemode(tmp_path, "run", "-", "--mcp-config", str(bad), stdin="print(1)")
    assert refused.returncode == 2 and "${NOT_SET_ANYWHERE} is not set" in refused.stderr
