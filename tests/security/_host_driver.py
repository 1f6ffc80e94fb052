"""A real Host in a process of its own, driven through its bash tool as an attacker with only a
``bash`` call would drive it.

A host whose event loop blocks (on a FIFO, say) answers nothing, and cannot be timed out from
inside its own loop: so the host runs in a child process and the test waits for it with a bound.
A host that froze is killed and the test fails saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: How long a host gets for its whole script; a frozen one never ends, a working one takes seconds.
BOUND_SECONDS = 90.0

_DRIVER = r"""
import json, sys
import anyio
from codemode import Host, SandboxMode

async def main(spec):
    answers = []
    host = Host(
        workspace=spec["workspace"],
        state_dir=spec["state_dir"],
        sandbox=SandboxMode(spec["sandbox"]),
        network=spec["network"],
        handoff_seconds=None,
    )
    await host.open()
    try:
        for call in spec["calls"]:
            tool, arguments = (call["tool"], call["arguments"]) if "tool" in call else ("bash", call)
            result = await host.call_tool(tool, arguments)
            answers.append({"text": result.text, "data": result.structured_content, "error": result.is_error})
            print(json.dumps({"answered": len(answers)}), file=sys.stderr, flush=True)
    finally:
        await host.aclose()
    print(json.dumps(answers))

anyio.run(main, json.loads(sys.argv[1]))
"""


class HostFroze(AssertionError):
    """The host did not finish its calls within the bound."""


def run_host(
    workspace: Path,
    state_dir: Path,
    calls: list[dict[str, Any]],
    *,
    sandbox: str = "workspace-write",
    network: bool = True,
) -> list[dict[str, Any]]:
    """Start a Host on ``workspace`` and ``state_dir``, make each call in turn (bash arguments,
    or ``{"tool": name, "arguments": {...}}``), close it; each call's ``{text, data, error}``.

    Raises:
        HostFroze: It had not answered every call and closed within `BOUND_SECONDS`.
    """
    spec = {
        "workspace": str(workspace),
        "state_dir": str(state_dir),
        "sandbox": sandbox,
        "network": network,
        "calls": calls,
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        out, err = proc.communicate(timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        answered = err.decode(errors="replace").count('"answered"')
        raise HostFroze(
            f"the host froze: {answered} of {len(calls)} calls answered in {BOUND_SECONDS:.0f} s"
        ) from None
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    answers: list[dict[str, Any]] = json.loads(out.decode().strip().splitlines()[-1])
    return answers
