"""Issue 8's findings, tried as a hostile command would, through the bash tool of a real Host.

Each test asserts the errno or error text the attacker gets, then that the host still works.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import Host
from codemode.sandbox import cgroup_root
from tests.sandbox.sandbox_support import needs_landlock

pytestmark = [pytest.mark.anyio, needs_landlock]
needs_cgroups = pytest.mark.skipif(cgroup_root().path is None, reason=f"no cgroups: {cgroup_root().reason}")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    made = {name: tmp_path / name for name in ("ws", "out", "state")}
    for path in made.values():
        path.mkdir()
    return made


@pytest.fixture
async def host(places: dict[str, Path]) -> AsyncIterator[Host]:
    h = Host(workspace=places["ws"], state_dir=places["state"], handoff_seconds=None)
    await h.open()
    yield h
    await h.aclose()


async def _bash(host: Host, command: str, session: str | None = None, **args: Any) -> Any:
    return await host.call_tool("bash", {"command": command, **args}, session_id=session)


async def _healthy(host: Host) -> None:
    result = await _bash(host, "echo still-here")
    assert not result.is_error and "still-here" in result.text, result.text


async def test_the_state_directory_cannot_be_read_or_written(host: Host, places: dict[str, Path]) -> None:
    # Something worth stealing: a store value, an archived output, a streamed log.
    await host.run_code('await store.set("token", "hunter2-secret-value")', session_id="victim")
    await _bash(host, "head -c 200000 /dev/zero | tr '\\0' x", session="victim")
    state = places["state"]
    # STATE/bin holds the rm shim, the one thing commands may read and run there (not write).
    files = [p for p in state.rglob("*") if p.is_file() and p.parent != state / "bin"]
    assert any(p.name == "state.db" for p in files) and any("blobs" in p.parts for p in files)
    listing = " ".join(f"'{p}'" for p in files)
    result = await _bash(
        host,
        f'for f in {listing}; do cat "$f" >/dev/null 2>&1 && echo READ $f; done; '
        f"sqlite3 {state}/state.db .dump 2>&1 | head -1; touch {state}/x {state}/bin/x 2>&1; "
        f"cp /bin/true {state}/bin/rm 2>&1; echo done",
    )
    assert "READ" not in result.text, result.text
    assert "hunter2" not in result.text
    assert "done" in result.text and not (state / "x").exists() and not (state / "bin" / "x").exists()
    assert not (state / "bin" / "rm").read_bytes().startswith(b"\x7fELF")  # still the shim
    await _healthy(host)


async def test_another_sessions_temp_dir_is_out_of_reach(host: Host) -> None:
    mine = await _bash(host, "echo secret > $TMPDIR/note && echo $TMPDIR", session="a")
    tmp_a = mine.text.strip().splitlines()[0]
    assert os.path.isfile(os.path.join(tmp_a, "note"))
    other = await _bash(host, f"cat {tmp_a}/note; echo x > {tmp_a}/planted; echo $TMPDIR", session="b")
    assert "secret" not in other.text and other.text.count("Permission denied") == 2, other.text
    assert not os.path.exists(os.path.join(tmp_a, "planted"))


async def test_a_command_cannot_kill_or_cripple_the_host(host: Host) -> None:
    me = os.getpid()
    result = await _bash(
        host,
        f"prlimit --pid {me} --cpu=1:1; echo cpu=$?; prlimit --pid {me} --nofile=8:8; echo nofile=$?; "
        f"renice -n 19 -p {me}; echo renice=$?; taskset -p 1 {me}; echo taskset=$?; "
        f"ionice -c 3 -p {me}; echo ionice=$?; kill -STOP {me}; echo kill=$?",
    )
    for word in ("cpu", "nofile", "renice", "taskset", "ionice", "kill"):
        assert f"{word}=1" in result.text, result.text
    import resource

    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 8
    assert resource.getrlimit(resource.RLIMIT_CPU) == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    assert os.getpriority(os.PRIO_PROCESS, me) <= 0
    await _healthy(host)


async def test_device_nodes_and_root_powers_are_refused(host: Host, places: dict[str, Path]) -> None:
    result = await _bash(
        host,
        "mknod ./lo b 7 0; echo mknod=$?; mknod ./tty c 5 0; echo mknodc=$?; "
        "hostname evil; echo hostname=$?; date -s 2001-01-01 >/dev/null 2>&1; echo date=$?; "
        "chrt -f -p 50 $$ 2>/dev/null; echo chrt=$?; renice -n -20 -p $$ >/dev/null 2>&1; echo nice=$?; "
        "grep CapEff /proc/self/status",
    )
    for word in ("mknod", "mknodc", "hostname", "date", "chrt", "nice"):
        assert re.search(rf"{word}=[1-9]", result.text), result.text
    assert "CapEff:\t0000000000000000" in result.text
    assert not (places["ws"] / "lo").exists() and not (places["ws"] / "tty").exists()


async def test_network_off_lets_no_datagram_or_raw_packet_out(places: dict[str, Path]) -> None:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)
    port = receiver.getsockname()[1]
    host = Host(workspace=places["ws"], state_dir=places["state"], handoff_seconds=None, network=False)
    await host.open()
    try:
        result = await _bash(
            host,
            f"echo leak > /dev/udp/127.0.0.1/{port}; echo udp=$?; "
            "python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)' 2>&1 | tail -1",
        )
        assert "udp=1" in result.text and "Operation not permitted" in result.text, result.text
        with pytest.raises(BlockingIOError):
            receiver.recv(100)
    finally:
        receiver.close()
        await host.aclose()


async def _wait_gone(pid: int) -> bool:
    with anyio.move_on_after(10):
        while os.path.exists(f"/proc/{pid}") and not Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            await anyio.sleep(0.02)
        return True
    return False


def _escapee_pids(tag: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if Path(f"/proc/{name}/cmdline").read_bytes() == f"/bin/sleep\0{tag}\0".encode():
                    found.append(int(name))
            except OSError:
                continue
    return found


@needs_cgroups
async def test_an_escaped_process_ends_with_its_session(host: Host) -> None:
    # setsid + a cleared environment: no process group, no marker variable to find it by.
    tag = f"333.{os.getpid()}1"
    result = await _bash(
        host, f"setsid env -i /bin/sleep {tag} </dev/null >/dev/null 2>&1 & echo started", session="s1"
    )
    assert "started" in result.text
    with anyio.fail_after(10):
        while not _escapee_pids(tag):
            await anyio.sleep(0.02)
    (pid,) = _escapee_pids(tag)
    await host.close_session("s1")
    assert await _wait_gone(pid)
    await _healthy(host)


@needs_cgroups
async def test_stop_ends_an_escaped_grandchild_of_a_background_process(host: Host) -> None:
    tag = f"334.{os.getpid()}2"
    started = await _bash(
        host, f"setsid env -i /bin/sleep {tag} </dev/null >/dev/null 2>&1 & sleep 300", run_in_background=True
    )
    process_id = started.structured_content["process_id"]
    with anyio.fail_after(10):
        while not _escapee_pids(tag):
            await anyio.sleep(0.02)
    (pid,) = _escapee_pids(tag)
    stopped = await host.call_tool("bash", {"action": "stop", "process_id": process_id})
    assert not stopped.is_error, stopped.text
    assert await _wait_gone(pid)


@needs_cgroups
async def test_an_escaped_process_ends_with_the_host(places: dict[str, Path]) -> None:
    tag = f"335.{os.getpid()}3"
    host = Host(workspace=places["ws"], state_dir=places["state"], handoff_seconds=None)
    await host.open()
    await _bash(host, f"setsid env -i /bin/sleep {tag} </dev/null >/dev/null 2>&1 &")
    with anyio.fail_after(10):
        while not _escapee_pids(tag):
            await anyio.sleep(0.02)
    (pid,) = _escapee_pids(tag)
    await host.aclose()
    assert await _wait_gone(pid)


async def test_no_other_command_can_type_into_a_background_process(
    host: Host, places: dict[str, Path]
) -> None:
    started = await _bash(host, "read line; echo got:$line", run_in_background=True, session="a")
    process_id = started.structured_content["process_id"]
    # The channel is an abstract socket (listed in /proc/net/unix, so its name is no secret).
    names = [
        line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines() if "codemode-in-" in line
    ]
    assert names
    # Another session's confined command: Landlock's scope refuses the connection.
    attack = "; ".join(
        f"python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0{n[1:]}'); s.sendall(b'x'*64+b'pwned\\n')\" 2>&1 | tail -1"
        for n in names
    )
    result = await _bash(host, attack, session="b")
    assert "Operation not permitted" in result.text, result.text
    # Even unconfined, without the token the bytes go nowhere.
    for name in names:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect("\0" + name[1:])
            s.sendall(b"0" * 64 + b"pwned\n")
    await host.call_tool(
        "bash", {"action": "write", "process_id": process_id, "input": "hello\n"}, session_id="a"
    )
    with anyio.fail_after(30):
        while True:
            read = await host.call_tool(
                "bash", {"action": "read", "process_id": process_id, "wait_ms": 1000}, session_id="a"
            )
            if read.structured_content["exited"]:
                break
    assert (
        "got:hello" in read.structured_content["output"] and "pwned" not in read.structured_content["output"]
    )


def test_state_dir_json_unreadable_even_by_name(places: dict[str, Path]) -> None:
    # A plain sanity check of the ruleset, without a host: listing is allowed, reading is not.
    from tests.sandbox.sandbox_support import Dirs, run_confined

    dirs = Dirs(ws=places["ws"], tmp=places["state"] / "tmp", state=places["state"], out=places["out"])
    dirs.tmp.mkdir()
    (places["state"] / "secret.json").write_text(json.dumps({"k": "v"}))
    result = run_confined(
        dirs.policy(), ["bash", "-c", f"ls {places['state']}; cat {places['state']}/secret.json"]
    )
    assert (
        "secret.json" in result.stdout and "Permission denied" in result.stderr and '"k"' not in result.stdout
    )
    assert time.time() > 0
