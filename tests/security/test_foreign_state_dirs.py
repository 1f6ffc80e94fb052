"""Processes belong to their state directory: a host never sweeps another state directory's.

A host that dies (SIGKILL, or a one-shot ``codemode call`` that ends after promoting a run)
leaves foreground commands and promoted runs behind. The next host on the same state directory
ends its foreground orphans and keeps its promoted runs (they are recorded there). A host on
another state directory cannot tell them apart (it does not see those records), so it must touch
neither: it used to kill both, which lost every promoted run of a `codemode call` as soon as any
other host started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from codemode.state import State
from codemode.tools.bash import ProcessManager
from tests.host_support import survivors

pytestmark = pytest.mark.anyio

_REPO = Path(__file__).resolve().parents[2]

# Host A: promotes one run (it writes `done` once `go` exists), starts a plain foreground run
# that never ends, says so, and waits to be killed.
_HOST_A = textwrap.dedent(
    """
    import json, sys, anyio
    from pathlib import Path
    from codemode.state import State
    from codemode.sandbox import SandboxPolicy
    from codemode.tools.bash import ProcessManager
    from codemode.tools._model import ToolContext

    async def main():
        state, ws, tmp, token, go = (Path(p) for p in sys.argv[1:6])
        archive = State(state).archive
        promoting = ProcessManager(archive, handoff_seconds=0.3).extension().tools[0]
        plain = ProcessManager(archive, handoff_seconds=None).extension().tools[0]
        policy = SandboxPolicy(writable_roots=(ws,), temp_dir=tmp, protected=(state,))
        ctx = ToolContext("s1", ws, policy, archive)

        async def call(tool, **args):
            model = tool.input_model.model_validate(args)
            return await tool.handler(**tool.bind(model, ctx))

        command = f"while [ ! -e {go} ]; do sleep 0.02; done; echo done > {ws}/f"
        promoted = await call(promoting, command=command)
        async with anyio.create_task_group() as tg:
            started = ws / "fg-started"
            tg.start_soon(lambda: call(plain, command=f"touch {started}; exec -a {token} sleep 1000"))
            with anyio.fail_after(30):
                while not started.exists():
                    await anyio.sleep(0.01)
            print(json.dumps({"promoted": promoted.structured_content["promoted_process_id"]}), flush=True)
            await anyio.sleep_forever()

    anyio.run(main)
    """
)


@pytest.fixture
def killed_host(tmp_path: Path) -> Iterator[tuple[Path, Path, Path, str, str]]:
    """Host A on ``state-a``, killed with SIGKILL once its runs are going: (state dir,
    workspace, go file, token of its plain foreground run, promoted process id)."""
    state, ws, tmp = tmp_path / "state-a", tmp_path / "ws", tmp_path / "tmp"
    ws.mkdir()
    tmp.mkdir()
    go = tmp_path / "go"
    token = f"foreignorphan{os.getpid()}x{tmp_path.name}"
    host = subprocess.Popen(
        [sys.executable, "-c", _HOST_A, str(state), str(ws), str(tmp), token, str(go)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(_REPO)},
    )
    assert host.stdout is not None
    try:
        line = host.stdout.readline()  # bounded: host A fails after 30 s of waiting
        assert line, "host A ended without starting its runs"
        promoted = json.loads(line)["promoted"]
        host.send_signal(signal.SIGKILL)
        host.wait()
        yield state, ws, go, token, promoted
    finally:
        go.touch()
        if host.poll() is None:
            host.kill()
            host.wait()
        host.stdout.close()
        for pid in survivors(token):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


async def test_a_host_on_another_state_dir_leaves_a_dead_hosts_runs_alone(
    killed_host: tuple[Path, Path, Path, str, str], tmp_path: Path
) -> None:
    state_a, ws, go, token, promoted = killed_host
    assert survivors(token) != []  # host A's plain foreground run, its host dead

    # Host B starts (its start-up upkeep sweeps orphans) on a state directory of its own.
    other = State(tmp_path / "state-b")
    host_b = ProcessManager(other.archive, handoff_seconds=None)
    host_b.maintain()  # and once more, as a long-lived host does later
    await host_b.aclose()
    other.close()

    # The promoted run of host A lives on and finishes its work.
    go.touch()
    with anyio.fail_after(30):
        while not (ws / "f").exists():
            await anyio.sleep(0.02)
    assert (ws / "f").read_text() == "done\n"
    # Host A's foreground orphan is not host B's to end.
    assert survivors(token) != []

    # A host on host A's own state directory ends that orphan, and finds the promoted run's exit.
    own = State(state_a)
    host_a2 = ProcessManager(own.archive, handoff_seconds=None)
    assert survivors(token) == []
    with anyio.fail_after(30):
        while _state(host_a2, promoted) == "running":
            await anyio.sleep(0.02)
    assert _state(host_a2, promoted) == "exited"
    await host_a2.aclose()
    own.close()


def _state(manager: ProcessManager, process_id: str) -> str:
    return next(p["state"] for p in manager.list_processes("s1") if p["process_id"] == process_id)


# -- reading another host's state dir -----------------------------------------------------------
# Landlock kept only a host's own state dir unreadable: a command could read every other codemode
# state dir of the same user (the default one, a test's, and a `--token-file` kept in one).


@pytest.mark.slow  # four hosts and their confined commands: ~8 s under three workers
def test_a_command_reads_no_other_hosts_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codemode.sandbox._landlock import landlock_status
    from tests.security._host_driver import run_host

    if landlock_status().abi < 3:
        pytest.skip("confined commands need Landlock ABI >= 3")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("CODEMODE_HOME", raising=False)
    ws_a, ws_b = tmp_path / "ws-a", tmp_path / "ws-b"
    ws_a.mkdir()
    ws_b.mkdir()
    state_a, state_b = tmp_path / "state-a", tmp_path / "state-b"
    run_host(ws_b, state_b, [{"command": "true"}])  # host B opens (and closes) on its own state dir
    (state_b / "token").write_text("s3cr3t-of-b\n")
    default = tmp_path / "xdg" / "codemode"  # the default state dir of this user
    default.mkdir(parents=True, exist_ok=True)
    (default / "token").write_text("s3cr3t-of-default\n")

    for sandbox in ("read-only", "workspace-write"):
        answers = run_host(
            ws_a,
            state_a,
            [
                {"command": f"cat {state_b}/token {default}/token; ls {state_b}; echo ran"},
                {"tool": "read_file", "arguments": {"path": str(state_b / "token")}},
            ],
            sandbox=sandbox,
        )
        assert "ran" in answers[0]["text"]
        assert "s3cr3t" not in answers[0]["text"], answers[0]["text"]
        assert "s3cr3t" not in answers[1]["text"], answers[1]["text"]
