"""Engine mode ``process``: each program runs in a confined worker process forked by the zygote;
a crash costs that program only, a worker serves one session, and the pool waits when full.

Real zygote, real workers, real signals; no timing thresholds."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import anyio
import pytest

from codemode import Host, Progress, RunResult
from codemode.engine import _processes, _remote, _zygote_client
from codemode.sandbox import cgroup_remove, cgroup_root, pids_limit_path
from tests.host_support import MakeHost, alive

pytestmark = pytest.mark.anyio


def _workers(host: Host) -> list[int]:
    pool = host.engine.processes
    assert pool is not None
    return pool.worker_pids()


def _busy_worker(host: Host) -> int:
    """The pid of the one worker of ``host`` that is running a program."""
    pool = host.engine.processes
    assert pool is not None
    busy = pool.busy_pids()
    assert len(busy) == 1, busy
    return busy[0]


async def test_a_crashed_worker_costs_its_program_only(make_host: MakeHost) -> None:
    async with make_host(engine="process") as (host, probe):
        assert (await host.run_code("print(1)", session_id="other")).ok
        results: dict[str, RunResult] = {}

        async def run(name: str, source: str, session: str) -> None:
            results[name] = await host.run_code(source, session_id=session)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "victim", "await tools.slow({}); for (;;) {}", "victim")
                while probe.slow_calls < 1:
                    await anyio.sleep(0.01)
                victim = _busy_worker(host)
                tg.start_soon(run, "bystander", "print('still here')", "other")
                os.kill(victim, signal.SIGSEGV)
                probe.release.set()
        crashed = results["victim"]
        assert not crashed.ok and crashed.error is not None
        assert crashed.error.kind == "engine_crashed"
        assert (
            "SIGSEGV" in crashed.error.message and "nothing of the program's state" in crashed.error.message
        )
        assert results["bystander"].text == "still here\n"
        after = await host.run_code("print('next')", session_id="victim")
        assert after.text == "next\n", after.text
        assert victim not in _workers(host)


async def test_a_worker_is_confined(make_host: MakeHost) -> None:
    async with make_host(engine="process") as (host, _probe):
        assert (await host.run_code("print(1)")).ok
        (pid,) = _workers(host)
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
        assert status["Seccomp"].strip() == "2"
        assert status["NoNewPrivs"].strip() == "1"
        for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[field].strip(), 16) == 0, (field, status[field])
        if os.geteuid() == 0:
            assert status["Uid"].split()[0] == "65534"
        fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        sockets = [fd for fd in fds if fd.startswith("socket:")]
        assert len(sockets) == 3, fds  # its three sockets to the host
        # Beside them: its programs' and its relay's eventfds, and the relay's epoll instance.
        assert fds - set(sockets) <= {"/dev/null", "anon_inode:[eventfd]", "anon_inode:[eventpoll]"}, fds
        # Its keeper thread (it makes and frees contexts) runs at SCHED_IDLE (5), the others not.
        policies = sorted(_policy(pid, tid) for tid in os.listdir(f"/proc/{pid}/task"))
        assert policies.count(5) == 1 and policies.count(0) == len(policies) - 1, policies


def _policy(pid: int, tid: str) -> int:
    """The scheduling policy of thread ``tid`` of process ``pid`` (0 normal, 5 SCHED_IDLE)."""
    lines = Path(f"/proc/{pid}/task/{tid}/sched").read_text().splitlines()
    return next(int(line.split(":")[1]) for line in lines if line.startswith("policy"))


def _cgroup_of(pid: int) -> str:
    """The cgroup v2 path of process ``pid`` (``0::`` line of /proc/<pid>/cgroup)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    raise AssertionError(f"process {pid} has no cgroup v2 line")


async def test_a_worker_runs_in_a_cgroup_of_its_own_removed_when_it_ends(make_host: MakeHost) -> None:
    root = cgroup_root()
    if root.path is None:
        pytest.skip(f"no cgroups here: {root.reason}")
    async with make_host(engine="process") as (host, _probe):
        assert (await host.run_code("print(1)", session_id="a")).ok
        (pid,) = _workers(host)
        path = _zygote_client.worker_cgroup(pid)
        assert path is not None and path.endswith(f"/engine-{os.getpid()}/w{pid}")
        assert _cgroup_of(pid).endswith(f"/engine-{os.getpid()}/w{pid}")
        limit = pids_limit_path(path)
        if limit is not None:  # the pids controller (v2, or its v1 twin on a hybrid host)
            assert Path(limit).read_text().strip() == str(_zygote_client._WORKER_PIDS)
        await host.close_session("a")  # its worker ends
        with anyio.fail_after(30):
            while os.path.isdir(path):
                await anyio.sleep(0.01)
        assert _zygote_client.worker_cgroup(pid) is None


def test_cgroups_of_workers_of_a_host_that_was_killed_are_swept() -> None:
    root = cgroup_root()
    if root.path is None:
        pytest.skip(f"no cgroups here: {root.reason}")
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)  # a pid that no process holds now
    left = root.make(f"engine-{dead}", "w1", pids_max=4)
    live = root.make(f"engine-{os.getpid()}", "w-test", pids_max=4)
    try:
        _zygote_client.sweep_cgroups()
        assert not os.path.isdir(left) and not os.path.isdir(os.path.dirname(left))
        assert os.path.isdir(live)  # this host's own stay
    finally:
        cgroup_remove(live)
        cgroup_remove(left)


async def test_a_worker_serves_one_session(make_host: MakeHost) -> None:
    async with make_host(engine="process") as (host, _probe):
        assert (await host.run_code("print(1)", session_id="a")).ok
        (first,) = _workers(host)
        assert (await host.run_code("print(1)", session_id="a")).ok
        assert _workers(host) == [first]  # reused by its session
        assert (await host.run_code("print(1)", session_id="b")).ok
        assert sorted(_workers(host)) != [first] and first in _workers(host)
        await host.close_session("a")
        assert first not in _workers(host)


async def test_idle_workers_outlive_other_sessions_programs_up_to_their_bound(make_host: MakeHost) -> None:
    # One program at a time, two idle workers kept: a third session's program retires the
    # least recently used idle worker, not the others, and running slots never cost an idle one.
    async with make_host(engine="process", max_workers=1, idle_workers=2) as (host, _probe):
        assert (await host.run_code("print(1)", session_id="a")).ok
        (a,) = _workers(host)
        assert (await host.run_code("print(1)", session_id="b")).ok
        (b,) = set(_workers(host)) - {a}
        assert (await host.run_code("print(1)", session_id="a")).ok  # a's again: its own worker
        assert sorted(_workers(host)) == sorted([a, b])
        assert (await host.run_code("print(1)", session_id="c")).ok
        (c,) = set(_workers(host)) - {a, b}
        assert sorted(_workers(host)) == sorted([a, c])  # b's was the least recently used
        with anyio.fail_after(30):
            while alive(b):
                await anyio.sleep(0.02)


async def test_no_idle_workers_means_a_new_worker_for_every_program(make_host: MakeHost) -> None:
    async with make_host(engine="process", idle_workers=0) as (host, _probe):
        first = await host.run_code("print(1)", session_id="a")
        assert first.ok and _workers(host) == []
        assert (await host.run_code("print(1)", session_id="a")).ok
        assert _workers(host) == []


async def test_programs_beyond_the_pool_wait_for_a_worker(make_host: MakeHost) -> None:
    async with make_host(engine="process", max_workers=1) as (host, probe):
        results: list[RunResult] = []
        said: list[str] = []

        async def progress(report: Progress) -> None:
            said.append(report.message())

        async def run(source: str, session: str) -> None:
            results.append(await host.run_code(source, session_id=session, on_progress=progress))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "print(await tools.slow({}))", "a")
                while probe.slow_calls < 1:
                    await anyio.sleep(0.01)
                tg.start_soon(run, "print('second')", "b")
                pool = host.engine.processes
                assert pool is not None
                while pool.waiting < 1:
                    await anyio.sleep(0.01)
                while not any("waiting for an engine worker" in line for line in said):
                    await anyio.sleep(0.05)  # its status says why it has not started
                assert results == []  # the second waits for the only worker
                probe.release.set()
        assert sorted(r.text for r in results) == ["released\n", "second\n"]


async def test_a_worker_that_stops_answering_is_killed(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_remote, "_GRACE_SECONDS", 0.5)
    async with make_host(engine="process") as (host, probe):
        result: list[RunResult] = []

        async def run() -> None:
            result.append(await host.run_code('// @run_code: {"timeout_seconds": 1}\nawait tools.slow({})'))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                while probe.slow_calls < 1:
                    await anyio.sleep(0.01)
                os.kill(_busy_worker(host), signal.SIGSTOP)  # it can keep no limit now
        (stopped,) = result
        assert stopped.error is not None and stopped.error.kind == "engine_crashed"
        assert "stopped answering" in stopped.error.message
        probe.release.set()
        assert (await host.run_code("print('next')")).text == "next\n"


async def test_an_idle_worker_that_dies_is_retired_at_once(make_host: MakeHost) -> None:
    # The loop watches a worker's control socket for its whole life: an idle one's death is
    # seen when it happens, not when its session's next program asks for it.
    async with make_host(engine="process") as (host, _probe):
        assert (await host.run_code("print(1)", session_id="a")).ok
        (idle,) = _workers(host)
        os.kill(idle, signal.SIGKILL)
        with anyio.fail_after(30):
            while idle in _workers(host):
                await anyio.sleep(0.01)
        assert (await host.run_code("print('next')", session_id="a")).text == "next\n"


async def test_thread_mode_runs_in_this_process(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", engine="thread") as host:
        assert host.engine.processes is None
        assert (await host.run_code("print(1)")).text == "1\n"


def test_describe_status_names_the_signal() -> None:
    assert _zygote_client.describe_status(signal.SIGSEGV) == "was killed by SIGSEGV"
    assert _zygote_client.describe_status(70 << 8) == "exited with status 70"
    assert _zygote_client.describe_status(None) == "ended"


@pytest.mark.parametrize("stop_first", [True, False])
async def test_a_program_stopped_as_it_is_sent_stops_and_keeps_its_worker(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch, stop_first: bool
) -> None:
    """A program comes on the sync socket, its STOP on the control socket: read by two threads,
    in either order, the STOP stops it (else it would compute to its timeout), and its worker
    is kept."""
    async with make_host(engine="process") as (host, _probe):
        assert (await host.run_code("print(1)")).ok
        (pid,) = _workers(host)
        real_send_run = _processes.WorkerProcess.send_run

        def send_run_and_stop(worker: _processes.WorkerProcess, body: bytes) -> None:
            run_id = json.loads(body)["run"]
            if stop_first:
                worker.stop(run_id)
            real_send_run(worker, body)
            if not stop_first:
                worker.stop(run_id)

        monkeypatch.setattr(_processes.WorkerProcess, "send_run", send_run_and_stop)
        for _ in range(3):
            result = await host.run_code("while (true) {}", timeout_seconds=20)
            assert result.error is not None and "cancelled" in result.error.message, result.error
        monkeypatch.setattr(_processes.WorkerProcess, "send_run", real_send_run)
        after = await host.run_code("print('next')")
        assert after.text == "next\n", after.text
        assert _workers(host) == [pid]  # never killed for not answering


async def test_a_workers_open_files_do_not_grow_with_its_programs(make_host: MakeHost) -> None:
    """Each program has a channel of its own (an eventfd, made before the last one is closed):
    a worker that kept its programs' channels would run out of files after a few programs (it
    has a small RLIMIT_NOFILE)."""
    async with make_host(engine="process") as (host, _probe):
        source = "const r = await tools.echo({value: 1}); print(JSON.stringify(r))"
        for _ in range(2):
            assert (await host.run_code(source)).ok
        (pid,) = _workers(host)
        # (Exactly as many: the watchdog thread once held the last program's channel while it
        # slept, so that a program's eventfd closed at its next program or when it next woke.)
        before = len(os.listdir(f"/proc/{pid}/fd"))
        for _ in range(24):
            result = await host.run_code(source)
            assert result.ok, result.text
        assert _workers(host) == [pid]
        files = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert len(files) == before, files


async def test_a_program_larger_than_a_socket_buffer_reaches_its_worker_whole(make_host: MakeHost) -> None:
    """A program goes to its worker without blocking the loop: what the socket does not take at
    once is written as the worker reads it."""
    async with make_host(engine="process") as (host, _probe):
        padding = "x" * (4 * 1024 * 1024)
        result = await host.run_code(f"const s = {json.dumps(padding)}; print(s.length)")
        assert result.text == f"{len(padding)}\n", result.text[:200]
        assert (await host.run_code("print('next')")).text == "next\n"
