"""Every ```js block of README.md runs as written against a real Host, and its ```sh lines
that are safe to run (no placeholder, nothing that installs or runs the whole suite) run."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from codemode import Host

pytestmark = pytest.mark.blackbox

README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.M | re.S)
# Words that stand for something the reader fills in: a line holding one is not run as written.
_PLACEHOLDERS = re.compile(r"\b(prog\.js|REF|ID|DIR|S|PATH)\b|\[")
# sh lines left out on purpose: installing the package, the whole test suite, servers that run
# until stopped.
_NOT_RUN = ("pip install", "python -m pytest", "codemode mcp", "export ")


def blocks(lang: str) -> list[str]:
    return [m.group("body") for m in _BLOCK.finditer(README.read_text("utf-8")) if m.group("lang") == lang]


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("print('a')\n")
    (ws / "b.py").write_text("print('b')\n")
    (ws / "README.md").write_text("# a workspace\n")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run(["git", "-C", str(ws), "add", "."], check=True)
    return ws


def test_readme_has_js_and_sh_blocks() -> None:
    assert len(blocks("js")) >= 1 and len(blocks("sh")) >= 2


@pytest.mark.anyio
@pytest.mark.parametrize("index", range(len(blocks("js"))))
async def test_a_js_block_runs_as_written(tmp_path: Path, index: int) -> None:
    source = blocks("js")[index]
    ws = _workspace(tmp_path)
    async with Host(workspace=ws, state_dir=tmp_path / "state", handoff_seconds=0.5) as host:
        with anyio.fail_after(120):
            result = await host.run_code(source)
    assert result.ok, result.text
    assert result.error is None


def _sh_lines() -> list[str]:
    lines = []
    for body in blocks("sh"):
        for raw in body.splitlines():
            line = re.split(r"\s#\s", raw, maxsplit=1)[0].strip()
            if not line or line.startswith("#"):
                continue
            for part in line.split(" && "):
                part = part.strip()
                if part.startswith(_NOT_RUN) or _PLACEHOLDERS.search(part):
                    continue
                lines.append(part)
    return lines


@pytest.mark.parametrize("line", _sh_lines())
def test_a_safe_sh_line_runs(tmp_path: Path, line: str) -> None:
    ws = _workspace(tmp_path)
    if "examples/" in line:  # a repository file, run in a copy (it writes to its workspace)
        shutil.copytree(README.parent / "examples", ws / "examples")
    bindir = Path(sys.executable).parent
    env = {**os.environ, "CODEMODE_HOME": str(tmp_path / "home"), "PATH": f"{bindir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", line], cwd=ws, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"{shlex.quote(line)} exited {done.returncode}: {done.stderr[-2000:]}"
