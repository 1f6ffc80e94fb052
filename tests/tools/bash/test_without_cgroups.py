"""Where cgroups are unavailable (not root, no delegation) commands still run, stop and report.

The probe is cached per process, so the host runs in a child process with the switch set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = r"""
import anyio, json, sys
from codemode import Host
from codemode.sandbox import cgroup_root, sandbox_report

async def main():
    async with Host(workspace=sys.argv[1], state_dir=sys.argv[2], handoff_seconds=None) as host:
        fg = await host.call_tool("bash", {"command": "echo fg; cat /proc/self/cgroup | grep -c codemode"})
        bg = await host.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
        pid = bg.structured_content["process_id"]
        stop = await host.call_tool("bash", {"action": "stop", "process_id": pid})
        layers = {l.name: l.state for l in sandbox_report(host._policy)}
        print(json.dumps({"root": cgroup_root().path, "reason": cgroup_root().reason, "fg": fg.text,
                          "stop": stop.structured_content["state"], "layers": layers}))

anyio.run(main)
"""


def test_commands_work_without_cgroups(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    env = {**os.environ, "CODEMODE_NO_CGROUPS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "ws"), str(tmp_path / "state")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["root"] is None and "CODEMODE_NO_CGROUPS" in facts["reason"]
    assert facts["fg"].splitlines()[:2] == ["fg", "0"], facts  # in no codemode cgroup
    assert facts["stop"] == "stopped"
    assert facts["layers"]["cgroup per command"] == "unavailable"
    assert facts["layers"]["seccomp"] == "on" or facts["layers"]["landlock"] != "on"
