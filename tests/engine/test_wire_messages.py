"""The JSON a worker process and the host exchange keeps every field of what it carries: a
field added to `EngineLimits`, `GuestError` or `GuestEnd` and not to its JSON form fails here
(in a worker it would silently take its default)."""

from __future__ import annotations

import dataclasses
import json
import socket
import typing

import pytest

from codemode.engine import _qjs, _wire
from codemode.engine._guest import (
    EngineLimits,
    EngineLimitsJson,
    GuestEnd,
    GuestEndJson,
    GuestError,
    GuestErrorJson,
    limits_json,
)


def _through_json(value: object) -> typing.Any:
    return json.loads(json.dumps(value))


def test_the_json_forms_name_every_field() -> None:
    for model, form in (
        (EngineLimits, EngineLimitsJson),
        (GuestError, GuestErrorJson),
        (GuestEnd, GuestEndJson),
    ):
        assert set(typing.get_type_hints(form)) == {f.name for f in dataclasses.fields(model)}, form


def test_limits_cross_unchanged() -> None:
    limits = EngineLimits(
        **{f.name: getattr(EngineLimits(), f.name) + 1 for f in dataclasses.fields(EngineLimits)}
    )
    assert limits != EngineLimits()
    assert EngineLimits(**_through_json(limits_json(limits))) == limits


def test_an_end_crosses_unchanged() -> None:
    end = GuestEnd(
        output="out",
        error=GuestError("uncaught", "ToolError", "failed", 3, 7, "at line 3", "bash", '{"x":1}'),
        cpu_seconds=0.5,
        output_dropped_bytes=10,
        dropped_timers=2,
        pending={4: "bash", 9: "read_file"},
        unobserved=[4],
        images=[("image/png", "aGk=")],
    )
    assert GuestEnd.from_json(_through_json(end.to_json())) == end
    plain = GuestEnd(output="", error=None, cpu_seconds=0.0)
    assert GuestEnd.from_json(_through_json(plain.to_json())) == plain


def test_an_end_from_a_lying_worker_keeps_the_types() -> None:
    data = _through_json(GuestEnd(output="x", error=None, cpu_seconds=1.0, pending={1: "a"}).to_json())
    data.update(output=5, cpu_seconds="2", pending=[["3", 4]])
    data["error"] = {"kind": "uncaught", "name": 1, "message": "m", "extra": "ignored"}
    end = GuestEnd.from_json(data)
    assert (end.output, end.cpu_seconds, end.pending) == ("5", 2.0, {3: "4"})
    assert end.error == GuestError("uncaught", "1", "m")


def _spins_answering(monkeypatch: pytest.MonkeyPatch, answers: list[int]) -> list[int]:
    """`_qjs.spin_readable` made to say ``answers`` in turn; the list of the fds it was asked
    about (one entry per spin)."""
    said: list[int] = []
    left = iter(answers)

    def spin_readable(fd: int, seconds: float) -> int:
        said.append(fd)
        return next(left)

    monkeypatch.setattr(_qjs, "spin_readable", spin_readable)
    return said


def test_a_spin_that_finds_the_cpu_wanted_sleeps_for_longer_and_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The policy of `_wire.Spin` (what spin_readable says is the kernel's): -1 (another task
    # wanted the CPU) skips the next 16, then 32, ... waits; a spin that paid halves that; one
    # that saw nothing skips twice as many too (at least 16, at most 256 on its own).
    said = _spins_answering(monkeypatch, [-1, -1, 1, 0, 1])
    ours, theirs = socket.socketpair()
    with ours, theirs:
        spin = _wire.Spin(ours, 0.001)
        spin.wait()  # -1: skip 16
        for _ in range(16):
            spin.wait()
        assert len(said) == 1
        spin.wait()  # -1 again: skip 32
        for _ in range(32):
            spin.wait()
        assert len(said) == 2
        spin.wait()  # paid: no skip, and the next skip is halved (16)
        spin.wait()  # nothing came: skip 32 (16 doubled)
        assert len(said) == 4
        for _ in range(32):
            spin.wait()
        assert len(said) == 4
        spin.wait()
        assert len(said) == 5


def test_a_spin_that_sees_nothing_again_and_again_sleeps_longer_up_to_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker whose programs await slow tools: each spin sees nothing. The skips double from
    # 16 to 256 and stay there; after one that pays the next wait spins.
    said = _spins_answering(monkeypatch, [0] * 7 + [1, 0])
    ours, theirs = socket.socketpair()
    with ours, theirs:
        spin = _wire.Spin(ours, 0.001)
        for spun, skip in enumerate([16, 32, 64, 128, 256, 256, 256], 1):
            spin.wait()  # spins: nothing came
            assert len(said) == spun
            for _ in range(skip):
                spin.wait()
            assert len(said) == spun
        spin.wait()  # spins, and pays: the next wait spins at once
        spin.wait()
        assert len(said) == 9


def test_a_run_body_carries_the_program_and_the_current_tables() -> None:
    """The RUN body's shared part is encoded once; each body still says all of its own run, and
    a change of the limits or of the tools is in the next one."""
    from codemode.engine._remote import _run_body
    from codemode.tools import ToolRegistry

    registry = ToolRegistry()
    limits = EngineLimits(memory_bytes=64 << 20)
    source = 'print("é \\" \\\\ \u2028 ü")\n// </script>'

    def body(**changed: typing.Any) -> typing.Any:
        args: dict[str, typing.Any] = {
            "run_id": 7,
            "batches": False,
            "stream": True,
            "source": source,
            "timeout_seconds": 12.5,
            "limits": limits,
            "registry": registry,
        }
        args.update(changed)
        return json.loads(_run_body(**args))

    first = body()
    assert first == {
        "run": 7,
        "immediate": True,
        "stream": True,
        "spec": {
            "source": source,
            "limits": limits_json(limits),
            "timeout_seconds": 12.5,
            "effectful_json": "[]",
            "namespaces_json": "[]",
            "inline_json": "[]",
        },
    }
    batched = body(run_id=8, batches=True, stream=False, timeout_seconds=3)
    assert (batched["run"], batched["immediate"], batched["stream"]) == (8, False, False)
    assert batched["spec"]["timeout_seconds"] == 3.0

    def quick() -> int:
        "Answer at once."
        return 1

    async def send() -> None:
        "Send."

    registry.add(quick, inline=True)
    registry.add(send, destructive=True)

    other = EngineLimits(calls_in_flight=5)
    changed = body(limits=other)
    assert changed["spec"]["limits"] == limits_json(other)
    assert json.loads(changed["spec"]["inline_json"]) == ["quick"]
    assert json.loads(changed["spec"]["effectful_json"]) == ["send"]
    assert json.loads(body(batches=True)["spec"]["inline_json"]) == []  # every call asked about
    assert body() == {**first, "spec": {**changed["spec"], "limits": limits_json(limits)}}


def test_frames_come_out_whole_however_the_reads_cut_them() -> None:
    frames = [
        (_wire.CALLS, b"[1,0,[]]"),
        (_wire.OUTPUT, b""),
        (_wire.END, b"x" * 70_000),
        (_wire.PRINTED, b"ab"),
    ]
    data = b"".join(_wire.frame(kind, body) for kind, body in frames)
    for cut in (1, 3, 5, 6, 4096, len(data) - 1, len(data)):
        reader = _wire.FrameReader()
        got: list[tuple[int, bytes]] = []
        for at in range(0, len(data), cut):
            got += reader.feed(data[at : at + cut])
        assert got == frames, cut
    with pytest.raises(_wire.WireError):
        _wire.FrameReader().feed(_wire.frame(_wire.CALLS, b"[]") + b"\0\0\0\0\x63")  # a kind no one sends
    with pytest.raises(_wire.WireError):
        reader = _wire.FrameReader()
        reader.feed(b"\0\0")
        reader.feed(b"\0\0\x04")  # a frame of no size, across two reads
