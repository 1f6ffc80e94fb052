"""A hostile worker on its sync socket, where the host answers the calls a program's thread waits
for (inline tools, the store, TypeScript) on a thread of its own.

It can reach only its own session's program: the host answers nothing once that program has
ended (a call after its end kills the worker, and runs nothing), strips only the program's own
source (once), and kills the worker for a frame that breaks the protocol there, which ends its
program with ``engine_crashed``."""

from __future__ import annotations

import json
import re
import socket
import struct
import threading

import anyio
import pytest

from codemode import Host
from codemode.engine import _processes, _wire
from tests.host_support import MakeHost, assert_healthy
from tests.security.hostile_worker import HostileWorker

pytestmark = pytest.mark.anyio

_BIG_PROGRAM = f"const s = {json.dumps('x' * (4 * 1024 * 1024))}; print(s.length)"


def _store_set(key: str, value: str) -> bytes:
    """A HOST_CALL body: store.set(key, value) as the prelude asks it."""
    return _wire.host_call("sync", 1, "store.set", json.dumps([key, json.dumps(value)]), 0)


async def _stored(host: Host, session: str, key: str) -> str:
    result = await host.run_code(
        f"print(JSON.stringify(await store.get({json.dumps(key)})))", session_id=session
    )
    assert result.ok, result.text
    return result.text.strip()


@pytest.mark.parametrize(
    "frame",
    [
        _wire.frame(99, b""),  # an unknown kind
        _wire.frame(_wire.CALLS, b"[]"),  # a control frame on the sync socket
        _wire.frame(_wire.HOST_CALL, b"short"),
        _wire.frame(_wire.HOST_CALL, _wire.HOST_CALL_HEAD.pack(False, 1, 2, 1000) + b"echo{}"),
        _wire.frame(_wire.HOST_CALL, _wire.HOST_CALL_HEAD.pack(False, 1, 2, 4) + b"\xff\xfe\xfd\xfc{}"),
        _wire.frame(_wire.HOST_CALL, _wire.host_call("call", 1, "echo", "{}", 1 << 40)),
        _wire.frame(_wire.HOST_CALL, _wire.host_call("call", 1, "echo", "{}", 1)),
        struct.pack(">IB", _wire.MAX_FRAME + 2, _wire.HOST_CALL),
    ],
    ids=[
        "unknown kind",
        "control kind",
        "shorter than its head",
        "a name past its end",
        "not UTF-8",
        "arguments over the tool data",
        "a size that is not the arguments'",
        "over MAX_FRAME",
    ],
)
async def test_a_broken_sync_frame_ends_its_program_only(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch, frame: bytes
) -> None:
    def attack(worker: HostileWorker) -> None:
        worker.take_run()
        worker.sync.sendall(frame)
        worker.wait_closed()

    async with make_host(engine="process") as (host, _probe):
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            with anyio.fail_after(30):
                result = await host.run_code("print(1)", session_id="attacker")
            worker.check()
        assert result.error is not None and result.error.kind == "engine_crashed", result.text
        assert "broke the protocol on its sync socket" in result.error.message
        await assert_healthy(host)


async def test_no_call_is_answered_after_its_program_ended(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = threading.Event()
    answers: list[tuple[int, bytes]] = []

    def attack(worker: HostileWorker) -> None:
        run_id = worker.take_run()["run"]
        worker.end(run_id, output="done\n")
        go.wait(30)
        answers.append(worker.ask(_wire.HOST_CALL, _store_set("late", "written after the end")))

    async with make_host(engine="process") as (host, _probe):
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            result = await host.run_code("print(1)", session_id="attacker")
            assert result.text == "done\n"
            process = worker.process
            assert process is not None
            go.set()  # the program has ended: the worker waits idle for the next
            with anyio.fail_after(30):
                while not process.dead:
                    await anyio.sleep(0.01)
            worker.check()
        assert answers == []  # no answer: the worker was killed
        assert process.broken is not None and "no program of it runs" in process.broken
        assert await _stored(host, "attacker", "late") == "null"  # (on a new worker)


async def test_a_workers_calls_reach_its_own_session_only(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers: list[tuple[int, bytes]] = []

    def attack(worker: HostileWorker) -> None:
        run_id = worker.take_run()["run"]
        answers.append(worker.ask(_wire.HOST_CALL, _store_set("k", "from the worker")))
        worker.end(run_id)
        worker.wait_closed()

    async with make_host(engine="process") as (host, _probe):
        assert await _stored(host, "victim", "k") == "null"
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            assert (await host.run_code("print(1)", session_id="attacker")).ok
            await host.close_session("attacker")  # its idle worker goes
            worker.check()
        assert answers == [(_wire.REPLY, b"jnull")]
        assert await _stored(host, "attacker", "k") == '"from the worker"'
        assert await _stored(host, "victim", "k") == "null"


async def test_only_the_programs_own_source_is_stripped_once(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers: list[tuple[int, bytes]] = []

    def attack(worker: HostileWorker) -> None:
        worker.take_run()
        typescript = b"const x: number = 1; print(x)"
        answers.append(worker.ask(_wire.STRIP, typescript))
        answers.append(worker.ask(_wire.STRIP, typescript))

    async with make_host(engine="process") as (host, _probe):
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            with anyio.fail_after(30):
                result = await host.run_code("print(1)", session_id="attacker")
            worker.check()
        # The program is JavaScript: nothing to strip, whatever text the worker sent.
        assert answers == [(_wire.REPLY, b"{}")]
        assert result.error is not None and "broke the protocol on its sync socket" in result.error.message
        await assert_healthy(host)


async def test_a_worker_that_ends_before_reading_its_whole_program_is_killed_not_kept(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program goes on the sync socket, written as the worker reads it: a worker that ends
    with part of it unread would be kept idle with the rest still to write, and its next program
    written into the middle of the last."""

    def attack(worker: HostileWorker) -> None:
        head = worker.sync.recv(64)  # the start of a program larger than the socket takes at once
        found = re.search(rb'"run": ?(\d+)', head)
        assert found is not None, head
        worker.end(int(found.group(1)), output="A\n")
        worker.wait_closed()

    async with make_host(engine="process") as (host, _probe):
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            with anyio.fail_after(30):
                result = await host.run_code(_BIG_PROGRAM, session_id="attacker")
            worker.check()
            process = worker.process
            assert process is not None and process.dead and not process.sending_run
        assert result.error is not None and result.error.kind == "engine_crashed", result.text
        assert "an end before its program was read whole" in result.error.message
        assert (await host.run_code("print('next')", session_id="attacker")).text == "next\n"
        await assert_healthy(host)


async def test_a_worker_that_ends_with_a_reply_unread_is_killed_not_given_another_program(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply the worker does not read would otherwise still be being written on the socket
    that carries its next program (the two interleaved)."""
    monkeypatch.setattr(_processes, "_END_CALLS_SECONDS", 0.5)

    def attack(worker: HostileWorker) -> None:
        run_id = worker.take_run()["run"]
        worker.sync.sendall(_wire.frame(_wire.HOST_CALL, _wire.host_call("call", 1, "large_text", "{}", 2)))
        worker.sync.recv(1)  # its reply is being written (more than the socket takes at once)
        worker.end(run_id, output="done\n")
        worker.wait_closed()

    async with make_host(engine="process") as (host, _probe):

        @host.tool(inline=True)
        def large_text() -> str:
            """A large text."""
            return "x" * (4 * 1024 * 1024)

        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            with anyio.fail_after(30):
                result = await host.run_code("print(1)", session_id="attacker")
            worker.check()
            process = worker.process
            assert process is not None and process.dead
        assert result.error is not None and result.error.kind == "engine_crashed", result.text
        assert "ended its program with a call unanswered" in result.error.message
        assert (await host.run_code("print('next')", session_id="attacker")).text == "next\n"
        await assert_healthy(host)


@pytest.mark.parametrize("after_its_program", [False, True])
async def test_a_worker_that_closes_its_sync_socket_ends_its_program_at_once(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch, after_its_program: bool
) -> None:
    """Without its sync socket a worker can neither get its program nor wait for a call: the
    program ends then (engine_crashed), not at its timeout."""

    def attack(worker: HostileWorker) -> None:
        if after_its_program:
            worker.take_run()
        worker.sync.shutdown(socket.SHUT_RDWR)
        worker.wait_closed()

    async with make_host(engine="process") as (host, _probe):
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            with anyio.fail_after(30):  # (its timeout is 120 s)
                result = await host.run_code("print(1)", session_id="attacker", timeout_seconds=120)
            worker.check()
        assert result.error is not None and result.error.kind == "engine_crashed", result.text
        assert (await host.run_code("print('next')", session_id="attacker")).text == "next\n"
        await assert_healthy(host)
