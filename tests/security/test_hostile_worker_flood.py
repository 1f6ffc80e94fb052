"""A hostile worker that floods the host: frames whose JSON would make many times their size in
Python objects, more calls than a program may hold in flight (also by never reading the results),
and a stream of frames as fast as its socket takes them.

The host holds a bounded amount for it, ends its program with ``engine_crashed`` when it goes
beyond what its program may hold, and keeps its event loop turning for everyone else."""

from __future__ import annotations

import os
import socket
import struct
import threading
import tracemalloc

import anyio
import pytest

from codemode import RunResult
from codemode.engine import _wire
from tests.host_support import MakeHost, assert_healthy
from tests.security.hostile_worker import HostileWorker

pytestmark = pytest.mark.anyio

_MIB = 1024 * 1024
# 16 MiB of empty lists: json.loads makes ~350 MiB of Python objects of it.
_LISTS = b",".join([b"[]"] * (16 * _MIB // 3))


@pytest.mark.parametrize("where", ["calls", "end", "operation's payload"])
async def test_json_that_would_make_many_times_its_size_is_refused(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "calls":
        socket_name, frame = "ctl", _wire.frame(_wire.CALLS, b"[%d, 0, [" + _LISTS + b"]]")
    elif where == "end":
        socket_name, frame = "ctl", _wire.frame(_wire.END, b'{"run": %d, "pending": [' + _LISTS + b"]}")
    else:  # a store.set whose [key, value] is 16 MiB of lists (the host decodes it after the frame)
        body = _wire.host_call("sync", 1, "store.set", "[" + _LISTS.decode() + "]", 0)
        socket_name, frame = "sync", _wire.frame(_wire.HOST_CALL, body)

    def attack(worker: HostileWorker) -> None:
        run_id = worker.take_run()["run"]
        body = frame.replace(b"%d", str(run_id).encode(), 1)
        sock = worker.ctl if socket_name == "ctl" else worker.sync
        sock.sendall(struct.pack(">I", len(body) - 4) + body[4:])  # (its length with the run id)
        worker.wait_closed()

    async with make_host(engine="process") as (host, _probe):
        await assert_healthy(host)  # what the host holds anyway is made
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                result = await host.run_code("print(1)", session_id="attacker")
                peak = tracemalloc.get_traced_memory()[1] - before
            finally:
                tracemalloc.stop()
            worker.check()
        assert result.error is not None and result.error.kind == "engine_crashed", result.text
        assert "broke the protocol" in result.error.message
        # The frame itself (16 MiB) is read, copied once and decoded: nothing near 350 MiB.
        assert peak < 100 * _MIB, peak
        await assert_healthy(host)


async def test_results_it_never_reads_count_as_calls_in_flight(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that posts calls and never reads their results cannot make the host hold more
    than ``calls_in_flight`` of them: a result not yet sent is a call the program still holds."""
    go = threading.Event()

    def attack(worker: HostileWorker) -> None:
        run_id = worker.take_run()["run"]
        # Four results of 1 MiB: more than the socket takes; the worker reads none.
        worker.send_json(_wire.CALLS, [run_id, 0, [[i, "big", '{"mb":1}', 8] for i in range(4)]])
        go.wait(30)
        worker.send_json(_wire.CALLS, [run_id, 0, [[9, "echo", '{"value":1}', 11]]])
        worker.wait_closed()

    async with make_host(engine="process", calls_in_flight=4) as (host, _probe):
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            results: list[RunResult] = []

            async def run() -> None:
                results.append(await host.run_code("print(1)", session_id="attacker"))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run)
                    while worker.process is None or worker.process.results_queued < 4:
                        await anyio.sleep(0.01)  # answered, all four: none is pending any more
                    go.set()
            worker.check()
        (result,) = results
        assert result.error is not None and result.error.kind == "engine_crashed", result.text
        assert "more than the 4 calls in flight" in result.error.message
        await assert_healthy(host)


@pytest.mark.slow  # floods until another program ends: 8-12 s on a busy 2-core machine
async def test_a_flood_of_frames_does_not_hold_the_loop(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker writing progress frames as fast as its socket takes them (with a socket buffer
    as large as it can get) while another session's program runs: that program runs to its
    end during the flood; the flooding program ends as its worker says."""
    stop = threading.Event()
    flooding = threading.Event()
    flooded_out: list[bool] = []
    chunk = _wire.frame(_wire.PRINTED, struct.pack(">IQ", 0, 1)) * (_MIB // 13)

    def attack(worker: HostileWorker) -> None:
        run_id = worker.take_run()["run"]
        option = getattr(socket, "SO_SNDBUFFORCE", 32) if os.geteuid() == 0 else socket.SO_SNDBUF
        worker.ctl.setsockopt(socket.SOL_SOCKET, option, 64 * _MIB)
        sent = 0
        while not stop.is_set():
            worker.ctl.sendall(chunk)
            flooding.set()
            sent += len(chunk)
            if sent >= 256 * _MIB:  # the loop never came back to the other program
                flooded_out.append(True)
                break
        worker.end(run_id, output="flooded\n")
        worker.wait_closed()

    async with make_host(engine="process") as (host, _probe):
        await assert_healthy(host)  # a worker of the default session is ready
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            flooded: list[RunResult] = []

            async def run() -> None:
                flooded.append(await host.run_code("print(1)", session_id="attacker"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                while not flooding.is_set():
                    await anyio.sleep(0.01)
                try:
                    await assert_healthy(host)
                finally:
                    stop.set()
            worker.check()
        assert flooded_out == []
        assert flooded[0].text == "flooded\n"
