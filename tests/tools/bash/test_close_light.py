"""A host that ran no command closes without reading its own start time (psutil's import,
~7 ms of a one-shot ``codemode.run_code()``): it names its cgroup owner only to clear cgroups
it kept, and it keeps none before its first command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys
import codemode
result = codemode.run_code(sys.argv[3], workspace=sys.argv[1], state_dir=sys.argv[2], engine="thread")
assert result.ok, result.text
print("psutil" in sys.modules)
"""


def _psutil_loaded(tmp_path: Path, source: str) -> bool:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(workspace), str(tmp_path / "state"), source],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
        timeout=120,
    )
    return done.stdout.strip() == "True"


def test_a_host_that_ran_no_command_closes_without_psutil(tmp_path: Path) -> None:
    assert not _psutil_loaded(tmp_path, "print(1)")
