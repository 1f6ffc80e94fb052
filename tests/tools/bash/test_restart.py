"""A host killed with SIGKILL mid-run, then a new manager on the same state directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import psutil
import pytest

from codemode.state import State
from codemode.tools.bash import ProcessManager
from tests.host_support import survivors

pytestmark = pytest.mark.anyio

_HOST = textwrap.dedent(
    """
    import json, sys, anyio
    from pathlib import Path
    from codemode.state import State
    from codemode.sandbox import SandboxPolicy
    from codemode.tools.bash import ProcessManager
    from codemode.tools._model import ToolContext

    async def main():
        state, ws, tmp, token, go = (Path(p) for p in sys.argv[1:6])
        archive_state = State(state)
        archive = archive_state.archive
        manager = ProcessManager(archive, handoff_seconds=0.3)
        no_handoff = ProcessManager(archive, handoff_seconds=None)
        plain = no_handoff.extension().tools[0]
        policy = SandboxPolicy(writable_roots=(ws,), temp_dir=tmp, protected=(state,))
        ctx = ToolContext("s1", ws, policy, archive)
        bash = manager.extension().tools[0]

        async def call(**args):
            model = bash.input_model.model_validate(args)
            return await bash.handler(**bash.bind(model, ctx))

        waits = await call(command="read x; echo got $x; exit 3", run_in_background=True)
        ends = await call(command=f"while [ ! -e {go} ]; do sleep 0.02; done; exit 7", run_in_background=True)
        promoted = await call(command=f"exec -a {token} sleep 1000")
        ids = {
            "waits": waits.structured_content["process_id"],
            "ends": ends.structured_content["process_id"],
            "promoted": promoted.structured_content["promoted_process_id"],
        }
        async with anyio.create_task_group() as tg:
            # A plain foreground run, still going when the host is killed.
            started = ws / "fg-started"
            command = f"touch {started}; exec -a {token}fg sleep 1000"
            model = plain.input_model.model_validate({"command": command})
            tg.start_soon(lambda: plain.handler(**plain.bind(model, ctx)))
            while not started.exists():
                await anyio.sleep(0.01)
            print(json.dumps(ids), flush=True)
            await anyio.sleep_forever()

    anyio.run(main)
    """
)


def _describe(pid: int) -> dict[str, object]:
    try:
        described: dict[str, object] = psutil.Process(pid).as_dict(
            ["pid", "ppid", "status", "cmdline", "create_time"]
        )
        return described  # (psutil has no type information)
    except psutil.Error as exc:
        return {"pid": pid, "gone": repr(exc)}


async def test_host_sigkill_then_restart(state_dir: Path, workspace: Path, tmp_path: Path) -> None:
    token = f"orphaned{os.getpid()}"
    go = workspace / "go"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    host = subprocess.Popen(
        [sys.executable, "-c", _HOST, str(state_dir), str(workspace), str(tmp), token, str(go)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    try:
        await _kill_restart_and_check(host, state_dir, go, token)
    finally:
        # Whatever failed above, leave nothing running: release the waiting loop, then stop
        # every process the dead host started.
        go.touch()
        if host.poll() is None:
            host.kill()
            host.wait()
        cleanup = ProcessManager(State(state_dir).archive, handoff_seconds=None)
        for process in cleanup.list_processes("s1"):
            if process["state"] == "running":
                await cleanup.stop("s1", process["process_id"])
        await cleanup.aclose()


async def _kill_restart_and_check(
    host: subprocess.Popen[bytes], state_dir: Path, go: Path, token: str
) -> None:
    assert host.stdout is not None
    with anyio.fail_after(60):
        line = await anyio.to_thread.run_sync(host.stdout.readline)
    ids = json.loads(line)
    host.send_signal(signal.SIGKILL)
    host.wait()
    host.stdout.close()

    archive_state = State(state_dir)

    archive = archive_state.archive
    go.touch()  # the second background process ends while no host runs
    first = ProcessManager(archive, handoff_seconds=None)
    with anyio.fail_after(20):
        while first.list_processes("s1") and any(
            p["state"] == "running" for p in first.list_processes("s1") if p["process_id"] == ids["ends"]
        ):
            await anyio.sleep(0.02)
    states = {p["process_id"]: (p["state"], p["exit_code"]) for p in first.list_processes("s1")}
    assert states[ids["waits"]] == ("running", None)
    assert states[ids["ends"]] == ("exited", 7)
    # The promoted run's supervisor reads it, not the host: it outlived the host's death.
    assert states[ids["promoted"]] == ("running", None)
    assert survivors(token) != []
    assert survivors(f"{token}fg") == []  # the plain foreground run the dead host had did not

    pending = first.pending_notifications("s1")
    assert [n.process_id for n in pending] == [ids["ends"]]
    first.ack("s1", [n.id for n in pending])
    await first.aclose()

    # A second restart: the acknowledged one is never delivered again; the promoted run is
    # still there to stop.
    second = ProcessManager(archive, handoff_seconds=None)
    assert second.pending_notifications("s1") == []
    stopped = await second.stop("s1", ids["promoted"])
    assert stopped["state"] == "stopped"
    left = survivors(token)
    assert left == [], [_describe(pid) for pid in left]  # seen once under load: say what survived
    await second.write("s1", ids["waits"], "later\n")
    with anyio.fail_after(20):
        while True:
            data = await second.read("s1", ids["waits"], 0, None, 1000)
            if data["exited"]:
                break
    assert "got later" in data["output"]
    assert data["exit_code"] == 3
    assert second.pending_notifications("s1") == []  # the read showed the exit: delivered
    await second.aclose()
    archive_state.close()
