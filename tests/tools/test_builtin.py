"""codemode's own extensions register lazily (tools/_builtin.py): what each declares before it
loads (its tools' names, which of them are effectful) must be what it loads, and a run that
calls none of them loads none of their modules."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codemode.tools import ToolRegistry
from tests.host_support import MakeHost

pytestmark = pytest.mark.anyio


async def test_each_builtin_extension_loads_what_it_declares(make_host: MakeHost) -> None:
    async with make_host() as (host, _probe):
        lazy = [e for e in host.registry._lazy.values()]
        assert {e.name for e in lazy} == {"files", "archive", "bash", "monitor"}
        for declared in lazy:
            loaded = declared.load()
            assert loaded.name == declared.name
            assert sorted(t.name for t in loaded.tools) == sorted(declared.tool_names)
            assert {t.name for t in loaded.tools if t.destructive is True} == declared.effectful


async def test_names_and_effects_are_known_before_anything_loads(make_host: MakeHost) -> None:
    async with make_host() as (host, _probe):
        registry: ToolRegistry = host.registry
        assert {"bash", "read_file", "monitor_start", "read_archive"} <= set(registry.names())
        assert set(registry._lazy) == {"files", "archive", "bash", "monitor"}
        effectful = registry.effectful_names_json()
        for name in ("bash", "edit_file", "write_file", "monitor_stop"):
            assert f'"{name}"' in effectful
        assert set(registry._lazy) == {"files", "archive", "bash", "monitor"}  # still nothing loaded
        result = await host.run_code("print(await tools.read_file({path: 'nope'}).catch((e) => e.code))")
        assert "not_found" in result.text
        assert set(registry._lazy) == {"archive", "bash", "monitor"}  # files loaded at its first call


@pytest.mark.blackbox  # starts codemode as a separate process
def test_a_cold_run_of_print_loads_no_builtin_tool_module(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    probe = textwrap.dedent(
        f"""
        import sys, anyio
        from codemode import Host
        async def main():
            async with Host(workspace={str(tmp_path / "ws")!r}, state_dir={str(tmp_path / "st")!r}) as host:
                print((await host.run_code("print(1)")).text.strip())
        anyio.run(main)
        heavy = ("codemode.tools.bash._tool", "codemode.tools.bash._results", "codemode.tools.files",
                 "codemode.tools.monitor", "codemode.tools._read_archive")
        print(sorted(m for m in sys.modules if m.startswith(heavy)))
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "[]"]
