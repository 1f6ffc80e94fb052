"""The public surface is exactly what codemode.__all__ names (like httpx's test of its API)."""

from __future__ import annotations

import subprocess
import sys

import codemode

PUBLIC = {
    "ApprovalRequest",
    "CallResult",
    "CodemodeError",
    "CommandPolicy",
    "Decision",
    "ErrorCode",
    "Extension",
    "Host",
    "HostConfig",
    "HostFault",
    "McpServerConfig",
    "Notification",
    "ProcessNotFound",
    "Progress",
    "RunError",
    "RunImage",
    "RunResult",
    "SandboxDenied",
    "SandboxMode",
    "SandboxPolicy",
    "SandboxUnavailable",
    "StateDirError",
    "TextContent",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "UnknownRefError",
    "Usage",
    "UserError",
    "__version__",
    "load_mcp_config",
    "make_tool",
    "run_code",
    "tool",
}


def test_all_is_the_public_api() -> None:
    assert set(codemode.__all__) == PUBLIC
    assert sorted(codemode.__all__) == list(codemode.__all__)  # kept sorted, one per line


def test_every_public_name_is_importable_and_documented() -> None:
    for name in codemode.__all__:
        value = getattr(codemode, name)
        if name != "__version__":
            assert (value.__doc__ or "").strip(), f"codemode.{name} has no docstring"


def test_nothing_else_public_leaks_from_the_package() -> None:
    leaked = {
        name
        for name in vars(codemode)
        if not name.startswith("_") and name not in codemode.__all__ and not _is_submodule(name)
    }
    assert leaked == set()


def _is_submodule(name: str) -> bool:
    import types

    return isinstance(getattr(codemode, name), types.ModuleType)


def test_importing_codemode_does_not_load_the_mcp_sdk() -> None:
    # The SDK is ~0.5 s of a cold start; only a Host that mounts a server, or the MCP front, needs it.
    probe = "import sys, codemode, codemode.cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp'))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_importing_codemode_leaves_what_only_commands_need_unloaded() -> None:
    # Verification and result shaping load at the first command (~10 ms of every cold start);
    # so do the sandbox's launch path, the network proxy and the command policy's walker (its
    # shell parser) (~25 ms, bench/bench_start.py); the built-in tools' modules (their models)
    # at the first use of one of them (~30 ms); psutil when a process must be found or ended
    # (~7 ms; not even for the host's identity). The probe imports the host, as `codemode run` does.
    probe = (
        "import sys, codemode, codemode.cli, codemode.host; "
        "print(sorted(m for m in sys.modules if m.startswith(('codemode.tools._verification', "
        "'codemode.tools.bash._shape', 'codemode.tools.bash._tool', 'codemode.tools.bash._results', "
        "'codemode.tools.files', 'codemode.tools.monitor', 'codemode.tools._read_archive', 'psutil', "
        "'codemode.sandbox._enforce', 'codemode.sandbox._landlock', 'codemode.sandbox._seccomp', "
        "'codemode.network._proxy', 'codemode.network._service', 'codemode.policy._walk', "
        "'codemode.policy._shell', 'tree_sitter'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_importing_codemode_loads_its_names_at_first_use() -> None:
    # `codemode run` imports the engine's zygote starter before the host (cli._start_zygote_early):
    # the package's names load when first used, not with the package.
    probe = (
        "import sys, codemode; before = sorted(m for m in sys.modules if m.startswith('codemode.')); "
        "codemode.Host; print(before, 'codemode.host' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['codemode._lazy', 'codemode._version'] True"
