"""A hostile worker's frames on its control socket: malformed, of the wrong kind, of another
run, or well-formed with fields that lie (types, ranges, sizes, images that are not images).

Each ends only its own program, with ``engine_crashed`` saying the worker broke the protocol:
no traceback reaches the model, the worker is killed (by the zygote, which kills only its own
workers: the pid the fake worker carries is a stranger's, which lives on), and the host runs the
next program as before."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable

import anyio
import pytest

from codemode import Host
from codemode.engine import _wire
from codemode.engine._zygote_client import zygote
from tests.host_support import MakeHost, assert_healthy
from tests.security.hostile_worker import Attack, HostileWorker, worker_of

pytestmark = pytest.mark.anyio

_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
_CALLS_IN_FLIGHT = 8


def _frames(*frames: Callable[[int], bytes]) -> Attack:
    """An attack: take the program, send these raw bytes (made from its run id), wait for the end."""

    def attack(worker: HostileWorker) -> None:
        run_id = worker.take_run()["run"]
        for make in frames:
            worker.ctl.sendall(make(run_id))
        worker.wait_closed()

    return attack


def _json(kind: int, value: Callable[[int], object]) -> Callable[[int], bytes]:
    return lambda run_id: _wire.frame(kind, json.dumps(value(run_id)).encode())


def _end(**fields: object) -> Callable[[int], bytes]:
    def make(run_id: int) -> bytes:
        message = {
            "run": run_id,
            "output": "",
            "error": None,
            "cpu_seconds": 0.0,
            "output_dropped_bytes": 0,
            "dropped_timers": 0,
            "pending": [],
            "unobserved": [],
            "images": [],
        }
        message.update(fields)
        return _wire.frame(
            _wire.END, json.dumps({k: v for k, v in message.items() if v != "missing"}).encode()
        )

    return make


def _calls(*calls: list[object]) -> Callable[[int], bytes]:
    return _json(_wire.CALLS, lambda run_id: [run_id, 0, list(calls)])


_ERROR = {"kind": "uncaught", "name": "Error", "message": "m"}

BROKEN: dict[str, Attack] = {
    "an unknown kind": _frames(lambda _: struct.pack(">IB", 1, 99)),
    "a frame over MAX_FRAME": _frames(lambda _: struct.pack(">IB", _wire.MAX_FRAME + 2, _wire.CALLS)),
    "a frame of no size": _frames(lambda _: struct.pack(">IB", 0, _wire.CALLS)),
    "a kind only the host sends": _frames(lambda _: _wire.frame(_wire.RUN, b"{}")),
    "calls that are not JSON": _frames(lambda _: _wire.frame(_wire.CALLS, b"\xff{")),
    "calls nested 100,000 deep": _frames(lambda _: _wire.frame(_wire.CALLS, b"[" * 100_000)),
    "calls of the wrong shape": _frames(_json(_wire.CALLS, lambda run_id: [run_id, 0])),
    "a negative call id": _frames(_calls([-1, "echo", "{}", 2])),
    "a call id over 64 bits": _frames(_calls([1 << 64, "echo", "{}", 2])),
    "a call id as text": _frames(_calls(["1", "echo", "{}", 2])),
    "a tool name that is not text": _frames(_calls([1, ["echo"], "{}", 2])),
    "a size smaller than the arguments": _frames(_calls([1, "echo", '{"value": "xxxxxxxxxxxx"}', 2])),
    "a call id twice in flight": _frames(_calls(*[[1, "slow", "{}", 2]] * 2)),
    "more calls than may be in flight": _frames(
        _calls(*[[i, "slow", "{}", 2] for i in range(_CALLS_IN_FLIGHT + 1)])
    ),
    "more calls in flight over two frames": _frames(
        _calls(*[[i, "slow", "{}", 2] for i in range(_CALLS_IN_FLIGHT)]), _calls([99, "slow", "{}", 2])
    ),
    "a printed count of the wrong size": _frames(lambda _: _wire.frame(_wire.PRINTED, b"\0\0")),
    "output without its run": _frames(lambda _: _wire.frame(_wire.OUTPUT, b"")),
    "an end that is not JSON": _frames(lambda _: _wire.frame(_wire.END, b"{")),
    "an end that is not an object": _frames(_json(_wire.END, lambda run_id: [run_id])),
    "an end of another run": _frames(lambda run_id: _end()(run_id + 1)),
    "an end without its pending calls": _frames(_end(pending="missing")),
    "output that is not text": _frames(_end(output=["a", "b"])),
    "output over the in-memory limit": _frames(_end(output="x" * (8 * 1024 * 1024 + 2048))),
    "a negative CPU time": _frames(_end(cpu_seconds=-1.0)),
    "a CPU time that is not a number": _frames(_end(cpu_seconds=float("nan"))),
    "a CPU time as text": _frames(_end(cpu_seconds="1")),
    "a negative count of dropped output": _frames(_end(output_dropped_bytes=-5)),
    "an error line as text": _frames(_end(error={**_ERROR, "line": "3"})),
    "an error line that is negative": _frames(_end(error={**_ERROR, "line": -3})),
    "an error without a message": _frames(_end(error={"kind": "uncaught", "name": "Error"})),
    "an error's data that is not text": _frames(_end(error={**_ERROR, "data": {"a": 1}})),
    "more pending calls than may be in flight": _frames(
        _end(pending=[[i, "echo"] for i in range(_CALLS_IN_FLIGHT + 1)])
    ),
    "more unobserved calls than calls made": _frames(_end(unobserved=[1])),
    "a pending call that is not a pair": _frames(_end(pending=[[1, "echo", "x"]])),
    "an image that is not an image": _frames(
        _end(images=[["image/png", base64.b64encode(b"hello").decode()]])
    ),
    "an image that is not base64": _frames(_end(images=[["image/png", "!!!!" + _PNG]])),
    "an image of a type not shown": _frames(_end(images=[["text/html", _PNG]])),
    "nine images": _frames(_end(images=[["image/png", _PNG]] * 9)),
}


async def _attacked(host: Host, monkeypatch: pytest.MonkeyPatch, attack: Attack, session: str) -> str:
    """Run a program on a hostile worker of ``session`` doing ``attack``: its error message."""
    with HostileWorker() as worker:
        worker.install(host, monkeypatch, attack)
        result = await host.run_code("print(1)", session_id=session)
        worker.check()
    assert result.error is not None, result.text
    assert result.error.kind == "engine_crashed", result.error
    assert "Traceback" not in result.text
    return result.error.message


async def test_a_broken_frame_ends_its_program_only(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_host(engine="process", calls_in_flight=_CALLS_IN_FLIGHT) as (host, probe):
        for name, attack in BROKEN.items():
            message = await _attacked(host, monkeypatch, attack, session="attacker")
            assert "broke the protocol" in message, (name, message)
        # No call of a frame that broke the limits ran: only the first frame of two.
        assert probe.slow_calls == _CALLS_IN_FLIGHT
        await assert_healthy(host)
        pool = host.engine.processes
        assert pool is not None and pool.busy_pids() == []


async def test_a_worker_that_dies_mid_frame_ends_its_program_only(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    def attack(worker: HostileWorker) -> None:
        worker.take_run()
        worker.ctl.sendall(_wire.frame(_wire.END, b'{"run": 1, "out')[:12])
        worker.ctl.close()

    async with make_host(engine="process") as (host, _probe):
        message = await _attacked(host, monkeypatch, attack, session="attacker")
        assert "ended while running the program" in message
        await assert_healthy(host)


async def test_a_lying_end_within_the_limits_is_taken_as_data(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a worker may say (its program's output, error, pending calls) it may say falsely:
    that is its program's result, typed and bounded, never the host's failure."""

    def attack(worker: HostileWorker) -> None:
        run_id = worker.take_run()["run"]
        error = {**_ERROR, "line": 7, "column": 0, "stack": "at nowhere", "tool": "bash", "data": "null"}
        worker.end(run_id, output="made up\n", error=error, cpu_seconds=3, pending=[[5, "bash"]])
        worker.wait_closed()

    async with make_host(engine="process") as (host, _probe):
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, attack)
            result = await host.run_code("print(1)")
            worker.check()
        assert result.error is not None and result.error.kind == "uncaught"
        assert (result.error.line, result.error.message) == (7, "m")
        assert "made up" in result.text and "bash" in result.cancelled_calls
        await assert_healthy(host)


async def test_the_zygote_kills_only_its_own_workers(make_host: MakeHost) -> None:
    async with make_host(engine="process") as (host, _probe):
        await assert_healthy(host)  # the zygote runs
        with HostileWorker() as worker:
            zygote().kill(worker.bystander.pid)
            # The zygote reads its orders in turn: once it forked the next worker, it has read
            # the kill (and refused it).
            assert (await host.run_code("print(1)", session_id="next")).ok
            worker.check()


async def test_an_idle_worker_may_send_a_late_report_and_nothing_else(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between programs the loop still reads a worker's control socket: a progress report its
    relay had on the way as its program ended is dropped, and the worker serves its session's
    next program; any other frame then is a break of the protocol, and the worker is killed and
    retired at once (its program's result stands)."""

    def late_report(worker: HostileWorker) -> None:
        first = worker.take_run()["run"]
        worker.end(first, output="one\n")
        worker.send(_wire.PRINTED, _wire.PRINTED_BODY.pack(first, 4))
        second = worker.take_run()["run"]
        worker.end(second, output="two\n")
        worker.wait_closed()

    def end_twice(worker: HostileWorker) -> None:
        run_id = worker.take_run()["run"]
        worker.end(run_id, output="once\n")
        worker.end(run_id, output="twice\n")
        worker.wait_closed()

    async with make_host(engine="process") as (host, _probe):
        pool = host.engine.processes
        assert pool is not None
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, late_report)
            assert (await host.run_code("print(1)", session_id="late")).text == "one\n"
            assert (await host.run_code("print(2)", session_id="late")).text == "two\n"
            worker.check()
        with HostileWorker() as worker:
            worker.install(host, monkeypatch, end_twice)
            assert (await host.run_code("print(1)", session_id="twice")).text == "once\n"
            with anyio.fail_after(30):
                while worker_of(pool, worker.bystander.pid):
                    await anyio.sleep(0.01)
            worker.check()
        assert (await host.run_code("print('next')", session_id="twice")).text == "next\n"
        await assert_healthy(host)
