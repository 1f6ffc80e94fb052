"""Files a command wrote are never read on the event loop: a script file the command policy
reads (a FIFO, a huge or slow file) would stall every session of the host. The approvals'
command check (``approve_commands``), the bash gate and the monitor's gate run in worker
threads, and a rule keeps new loop-side calls of them from appearing.

Real Host, real QuickJS, real commands; the policy only notes the thread each check runs on."""

from __future__ import annotations

import ast
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

import codemode
from codemode import ApprovalRequest, CommandPolicy, Decision, Host

pytestmark = pytest.mark.anyio

ROOT = Path(codemode.__file__).parent.parent


class NotingPolicy(CommandPolicy):
    """The command policy, noting the thread each check runs on."""

    threads: ClassVar[list[int]] = []

    def check(self, **kwargs: Any) -> Any:
        NotingPolicy.threads.append(threading.get_ident())
        return super().check(**kwargs)


async def allow(requests: list[ApprovalRequest]) -> Sequence[Decision]:
    return [Decision.allow() for _ in requests]


async def test_the_approvals_command_check_and_the_gates_run_off_the_loop(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "build.sh").write_text("echo built > out.txt\n")
    loop_thread = threading.get_ident()
    NotingPolicy.threads.clear()
    policy = NotingPolicy(approve_commands=True)
    async with Host(workspace=ws, state_dir=tmp_path / "state", approve=allow, command_policy=policy) as host:
        with anyio.fail_after(60):
            result = await host.run_code(
                "const r = await Promise.all([tools.bash({command: 'bash build.sh'}), tools.bash({command: 'ls'})]);"
                "print(r.map(x => x.exit_code).join(' '));"
            )
            assert result.ok and result.text.strip() == "0 0", result.text
            in_program = len(NotingPolicy.threads)
            direct = await host.call_tool("bash", {"command": "bash build.sh"})
            assert not direct.is_error, direct.text
            in_direct = len(NotingPolicy.threads)
            started = await host.call_tool("monitor_start", {"command": "bash build.sh"})
            assert not started.is_error, started.text
            # Ended before the host closes, the watcher leaves no session tmpfs kept for it.
            assert isinstance(started.structured_content, dict), started.text
            wid = started.structured_content["watcher_id"]
            until = {"watcher_id": wid, "until": "exit", "timeout_ms": 60_000}
            waited = await host.call_tool("monitor_wait", until)
            assert not waited.is_error, waited.text
    assert (ws / "out.txt").read_text() == "built\n"
    # Each run is checked by the approvals and again by the gate; the watcher by the gate.
    assert in_program >= 4 and in_direct >= in_program + 2 and len(NotingPolicy.threads) > in_direct
    assert loop_thread not in NotingPolicy.threads


# ---- the rule --------------------------------------------------------------------------------

#: Calls that may read files a command wrote (the command policy reading scripts, the bash gate).
READERS = frozenset({"requests", "run_spec", "_prepare", "check"})
#: The modules whose code runs on the event loop and calls them.
LOOP_MODULES = (
    "codemode/host.py",
    "codemode/runner/_runner.py",
    "codemode/policy/_approval.py",
    "codemode/engine/_runtime.py",
    "codemode/engine/_calls.py",
    "codemode/engine/_remote.py",
    "codemode/engine/_program.py",
    "codemode/tools/monitor/_tools.py",
    "codemode/tools/bash/_manager.py",
    "codemode/tools/bash/_reading.py",
    "codemode/tools/bash/_watchers.py",
    "codemode/tools/bash/_stopping.py",
    "codemode/tools/bash/_reaping.py",
    "codemode/tools/bash/_tool.py",
)
#: (module, function, call) -> why that call does not read on the loop.
ALLOWED = {
    ("codemode/policy/_approval.py", "Approvals.approve_call", "self.requests"): (
        "only when gate.reads_files says the call runs no command check (else in a thread)"
    ),
    ("codemode/engine/_calls.py", "LoopCalls.on_posted", "gate.requests"): (
        "only when gate.reads_files says the call runs no command check (else _check_then_decide, in a thread)"
    ),
    ("codemode/engine/_program.py", "HostCalls._inline", "self.gate.requests"): (
        "only when gate.reads_files is false (else the call goes to the loop, which checks it off it)"
    ),
    ("codemode/tools/bash/_manager.py", "ProcessManager._spec", "self.run_spec"): (
        "_spec is called only by _prepare, which runs in a worker thread (to_thread.run_sync(self._prepare, ...))"
    ),
}


def _thread_lambdas(tree: ast.AST) -> set[int]:
    """ids of the lambdas and named functions handed to ``to_thread.run_sync``."""
    handed: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run_sync"
        ):
            for arg in node.args:
                handed.add(id(arg))
    return handed


def loop_side_readers(source: str) -> list[tuple[str, str, int]]:
    """(enclosing function, call, line) of each call of a reader that is not inside a lambda
    handed to ``to_thread.run_sync`` (nor a function whose name says it is that side)."""
    tree = ast.parse(source)
    handed = _thread_lambdas(tree)
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, scope: str, in_thread: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner, threaded = scope, in_thread or id(child) in handed
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{scope}.{child.name}" if scope else child.name
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr in READERS
                and not threaded
            ):
                found.append((scope, ast.unparse(child.func), child.lineno))
            visit(child, inner, threaded)

    visit(tree, "", False)
    return found


def test_no_new_loop_side_call_of_a_reader_appears() -> None:
    offenders, used = [], set()
    for module in LOOP_MODULES:
        path = ROOT / module
        if not path.exists():
            continue
        for scope, call, line in loop_side_readers(path.read_text()):
            if call.endswith(".check") and "polic" not in call:
                continue  # other .check()s (not the command policy)
            key = (module, scope, call)
            if key in ALLOWED:
                used.add(key)
            else:
                offenders.append(f"{module}:{line} {scope}: {call}(...)")
    assert not offenders, (
        "calls that may read a file a command wrote, not in a worker thread "
        "(wrap them in anyio.to_thread.run_sync, or allow them above saying why):\n" + "\n".join(offenders)
    )
    assert used == set(ALLOWED), f"allowlist entries that no longer match: {set(ALLOWED) - used}"


def test_the_rule_sees_a_reader_called_on_the_loop() -> None:
    source = (
        "async def start(self):\n"
        "    spec = self.manager.run_spec(1)\n"
        "    ok = await anyio.to_thread.run_sync(lambda: self.manager.run_spec(2))\n"
    )
    assert loop_side_readers(source) == [("start", "self.manager.run_spec", 2)]
