"""The messages between the host and an engine worker process: framed bytes on three stream sockets.

A frame is a 4-byte big-endian length (of what follows), one byte saying what it is, and its
body. The *sync* socket is the worker's main thread's: it brings each program (host -> worker:
`RUN`, read while the worker is idle) and carries the calls the program's thread waits for
(worker -> host: `HOST_CALL`, `STRIP`; the host answers each with `REPLY`). The *results*
socket brings the results of its posted calls (host -> worker: `RESULT`), which the main thread
reads when its program waits. The *control* socket carries the rest (host -> worker: `STOP`,
read by the worker's relay thread even while the program computes; worker -> host: `CALLS`,
`OUTPUT`, `PRINTED`, `END`, and `READY` once).

Standard library only (and `_guest`, the JSON forms of what a run carries; `_qjs`, for `Spin`):
the worker imports it without the host. The zygote's messages (`ZygoteOrder`, `ZygoteHello`,
`ZygoteReport`) are JSON objects, one per datagram on its own socket.

The host trusts nothing a worker sends: a frame over `MAX_FRAME`, an unknown kind or a body that
does not decode ends that worker (`WireError`), never the host.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import TypedDict

from codemode.engine import _qjs
from codemode.engine._guest import EngineLimitsJson, GuestEndJson

# host -> worker (sync)
RUN = 1
"""A program: JSON `RunMessage`."""
# host -> worker (results)
RESULT = 2
"""A call's result: `RESULT_HEAD` (run id, call id, ok, is text) then the payload (UTF-8)."""
# host -> worker (control)
STOP = 3
"""Stop the running program: `RUN_ID`."""
# worker -> host (control)
CALLS = 4
"""Calls the program posted: JSON ``[run, settled, [[id, name, arguments JSON, size], ...]]``,
``settled`` the results of this run the program has taken so far (the host holds the others'
values for its end: written, in the socket, or posted and not yet taken)."""
OUTPUT = 5
"""Printed text collected (UTF-8), sent only when the run streams its output."""
END = 6
"""How the program ended: JSON `EndMessage` (`GuestEnd.to_json` and the run id)."""
READY = 7
"""The worker is confined and waits for programs (empty body)."""
PRINTED = 11
"""How many characters the program has printed (run id, count: ``>IQ``), sent for progress
reports as printed text is collected when the run does not stream it."""
# sync socket
HOST_CALL = 8
"""worker -> host: the prelude's hostCall, `HOST_CALL_HEAD` then its name and payload JSON
(UTF-8), made by `host_call`. Not JSON: framing it as a JSON list (the payload JSON escaped in
it, and decoded again) took 15 of an inline call's ~50 us on the two sides, this 7."""
STRIP = 9
"""worker -> host: a source QuickJS rejected (UTF-8), to be stripped of TypeScript types."""
REPLY = 10
"""host -> worker: the answer to `HOST_CALL` (UTF-8) or `STRIP` (JSON)."""

KINDS = frozenset({RUN, RESULT, STOP, CALLS, OUTPUT, END, READY, HOST_CALL, STRIP, REPLY, PRINTED})
RESULT_HEAD = struct.Struct(">IQ??")
HOST_CALL_HEAD = struct.Struct(">?QQI")
"""The head of `HOST_CALL`: whether it is an operation (``sync``: the store, search) rather than
an inline tool's call (``call``), the call id, the arguments' size (UTF-16 units), and the
length of the name in bytes."""
RUN_ID = struct.Struct(">I")
"""The body of `STOP`, and the head of `OUTPUT`: the run's id."""
PRINTED_BODY = struct.Struct(">IQ")
"""The body of `PRINTED`: the run's id, and how many characters."""
_HEAD = struct.Struct(">IB")
MAX_FRAME = 256 * 1024 * 1024
"""No frame is larger: a program's data is capped well below (tool data 64 MiB, output 8 MiB
of characters, at most 4 bytes each in UTF-8)."""


class RunSpec(TypedDict):
    """A program as a worker gets it: `GuestSpec`'s fields."""

    source: str
    limits: EngineLimitsJson
    timeout_seconds: float
    effectful_json: str
    namespaces_json: str
    inline_json: str


class RunMessage(TypedDict):
    """The body of `RUN`: the run's id, whether its calls are answered at once (no batched
    decisions), whether its printed text streams, and the program."""

    run: int
    immediate: bool
    stream: bool
    spec: RunSpec


class EndMessage(GuestEndJson):
    """The body of `END`: how the program ended, and which run."""

    run: int


class WorkerLimits(TypedDict):
    """What the zygote sets on a worker it forks (`_confine.set_limits`)."""

    address_space_bytes: int
    cpu_seconds: int


class ZygoteOrder(TypedDict, total=False):
    """host -> zygote (one JSON datagram, with the worker's two sockets for ``fork``): fork a
    worker with these limits, or kill one of its workers by pid."""

    fork: WorkerLimits
    kill: int


class ZygoteHello(TypedDict):
    """zygote -> host, first: its pid, why it could not drop privileges (or None), why Landlock
    is missing (or None)."""

    hello: int
    problem: str | None
    landlock: str | None


class ZygoteReport(TypedDict, total=False):
    """zygote -> host after its hello: a worker forked (its pid), or one that ended (its pid and
    wait status); ``gone`` is the host's own mark for a zygote that went away."""

    forked: int
    died: int
    status: int
    gone: bool


class WireError(Exception):
    """The other side broke the protocol or went away."""


class PeerClosed(WireError):
    """The other side closed the socket (it ended): no break of the protocol."""


def host_call(kind: str, call_id: int, name: str, payload: str, size: int) -> bytes:
    """The body of a `HOST_CALL` (the worker's side; the host reads it with
    `_worker_frames.read_host_call`).

    Raises:
        struct.error: The id or the size is not a number from 0 to 2**64 - 1.
    """
    name_bytes = name.encode("utf-8", "surrogatepass")
    head = HOST_CALL_HEAD.pack(kind == "sync", call_id, size, len(name_bytes))
    return head + name_bytes + payload.encode("utf-8", "surrogatepass")


def frame(kind: int, body: bytes) -> bytes:
    """One frame's bytes."""
    return _HEAD.pack(len(body) + 1, kind) + body


class Sender:
    """Writes whole frames on a blocking socket, from any thread (one frame at a time)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()

    def send(self, kind: int, body: bytes = b"") -> None:
        """Send one frame.

        Raises:
            OSError: The socket is closed or the peer went away.
        """
        data = frame(kind, body)
        with self._lock:
            self._sock.sendall(data)


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """The next frame from a blocking socket.

    Raises:
        WireError: The peer closed the socket or sent a frame that breaks the protocol.
    """
    head = _read_exactly(sock, _HEAD.size)
    size, kind = _HEAD.unpack(head)
    _check(size, kind)
    return kind, _read_exactly(sock, size - 1)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        try:
            chunk = sock.recv(min(n - len(chunks), 1 << 20))
        except OSError as exc:
            raise WireError(f"the socket failed: {exc}") from None
        if not chunk:
            raise PeerClosed("the peer closed the socket")
        chunks += chunk
    return bytes(chunks)


def _check(size: int, kind: int) -> None:
    if size < 1 or size > MAX_FRAME + 1:
        raise WireError(f"a frame of {size} bytes")
    if kind not in KINDS:
        raise WireError(f"a frame of unknown kind {kind}")


class Spin:
    """Looks for a frame the peer is about to send before sleeping on the socket: the reply to
    an inline call and a call's result (the worker's main thread), the next call of a chain (the
    host's sync thread).

    Waking a thread asleep on the other CPU costs ~25 us here, and about as much CPU to the
    thread that wakes it (an IPI to a halted vCPU: a bare round trip between two processes takes
    ~50 us apart, ~5 us on one CPU, ~6 us when one looks without sleeping). A thread that looks
    again and again is told by memory instead, and its peer wakes nobody: a loop of inline calls
    took 95-100 us a call asleep, 35-60 us so; an async call 145-155 us, 100-110 us
    (bench/bench_engine_modes.py measures both beside thread mode). It yields its CPU between
    looks, and stops at the first look after a yield that let another task run: the CPU is
    wanted, and sleeping is then as fast (the peer runs on the same CPU, ~5 us a hand-off) while
    spinning would cost that task's slice per look. It then sleeps at once for the next 16, 32,
    ... up to 4,096 waits (halved by each spin that paid; made one less instead, the spin
    stayed off after the VM's own hiccups and an inline call took 107 us at load 1.1-1.4), so
    that a machine whose CPUs are all busy pays a slice once in many calls, not once per call.
    A spin that saw nothing (a slow tool, the end of a chain) sleeps for twice as many waits
    too, from 16 up to 256 (more would keep a run of quick inline calls after one slow one
    asleep for long): a worker whose programs await slow tools (200 programs each awaiting a
    20 ms one) spun one wait in 17, 200 us each, ~12 us of CPU a program; now one in 257 at
    most. Two threads spinning on one CPU (`taskset -c 0`)
    take 55-60 us an inline call, as asleep (a spin without the yield took 130-185 us there).
    """

    _MIN_SKIP = 16
    _MAX_SKIP = 4096
    _MAX_IDLE_SKIP = 256  # (the most a spin that saw nothing sets)

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self._fd = sock.fileno()
        self._seconds = seconds
        self._backoff = 0
        self._skip = 0

    def wait(self) -> None:
        """Return when a frame may be there (or after the spin's time): the read that follows
        sleeps as usual when none came."""
        if self._skip:
            self._skip -= 1
            return
        seen = _qjs.spin_readable(self._fd, self._seconds)
        if seen > 0:
            self._backoff //= 2
        elif seen < 0:  # the CPU is wanted
            self._backoff = min(max(self._backoff * 2, self._MIN_SKIP), self._MAX_SKIP)
            self._skip = self._backoff
        else:  # nothing came in time
            self._backoff = max(self._backoff, min(self._backoff * 2, self._MAX_IDLE_SKIP), self._MIN_SKIP)
            self._skip = self._backoff


class FrameReader:
    """Frames out of bytes read from a non-blocking socket as they come (the host's event loop)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The frames ``data`` completes, in order. With nothing held before it (most reads
        bring whole frames) they are cut from ``data`` itself, without copying it to the buffer.

        Raises:
            WireError: A frame breaks the protocol.
        """
        buffer = self._buffer
        if not buffer:
            frames, at = _cut(data)
            if at < len(data):
                buffer += memoryview(data)[at:]
            return frames
        buffer += data
        frames, at = _cut(buffer)
        if at:
            del buffer[:at]
        return frames


def _cut(buffer: bytes | bytearray) -> tuple[list[tuple[int, bytes]], int]:
    """The whole frames at the start of ``buffer``, and where the first partial one starts.

    Raises:
        WireError: A frame breaks the protocol.
    """
    frames: list[tuple[int, bytes]] = []
    at = 0
    length = len(buffer)
    with memoryview(buffer) as view:  # one copy of each body, not two
        while length - at >= _HEAD.size:
            size, kind = _HEAD.unpack_from(buffer, at)
            _check(size, kind)
            end = at + 4 + size
            if length < end:
                break
            frames.append((kind, bytes(view[at + _HEAD.size : end])))
            at = end
    return frames, at
