"""One program in a worker process (engine mode ``process``): the host's side of its run.

The host sends the program (`_wire.RUN`) to a worker of the calling session and serves it like a
program on a thread: posted calls come as `CALLS` frames and go to the same `LoopCalls` (checked,
asked about, run, their results sent back as `RESULT`), the program's waits for inline tools and
the store come over the sync socket to the same `HostCalls`, printed text streams as `OUTPUT`,
and the end comes as `END`. A worker that dies, breaks the protocol or stops answering ends
only this program, with ``engine_crashed``.

Everything the worker sends is read as untrusted (`_worker_frames`): bounded, typed, and checked
against what the program may hold (its calls in flight, their data, its output). The loop reads
a bounded amount per wake-up, so that a worker that floods its socket cannot hold it; the sync
socket answers calls only while the program runs (`WorkerProcess.end_calls`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from codemode.engine import _wire
from codemode.engine._calls import LoopCalls
from codemode.engine._guest import GuestEnd, GuestError, limits_json
from codemode.engine._loop import LoopSpawner
from codemode.engine._outcome import CallGate, EngineLimits, ProgramCalls, ProgramOutcome, outcome_of
from codemode.engine._processes import LATE_KINDS, ProcessPool, WorkerProcess
from codemode.engine._program import HostCalls, strip_typescript
from codemode.engine._text import _js_text
from codemode.engine._worker_frames import check_posted, read_calls, read_end, read_host_call
from codemode.engine._zygote_client import EngineUnavailable, crashed, describe_status, log, zygote

if TYPE_CHECKING:
    from codemode.engine._runtime import RunView
from codemode.tools import ToolContext, ToolRegistry

# How long past its own wall limit a worker may take to report its end before it is killed
# (it keeps the limit itself; this is the backstop for one that stopped answering).
_GRACE_SECONDS = 10.0
# How long a stopped program's worker gets to say it stopped before it is killed.
_STOP_SECONDS = 2.0

_next_run = 0


class _RemoteChannel:
    """`LoopCalls`'s channel for a program in a worker: calls from its `CALLS` frames, results
    to `RESULT` frames."""

    def __init__(self, worker: WorkerProcess, run_id: int) -> None:
        self.worker = worker
        self.run_id = run_id
        self.incoming: list[tuple[int, str, str, int]] = []
        self.posted = 0  # results sent
        self.settled = 0  # of which the program has taken this many (its last CALLS says)

    def take_calls(self) -> list[tuple[int, str, str, int]]:
        calls, self.incoming = self.incoming, []
        return calls

    def post(self, call_id: int, ok: bool, payload: str, is_text: bool, /) -> None:
        self.posted += 1
        head = _wire.RESULT_HEAD.pack(self.run_id, call_id, ok, is_text)
        self.worker.send_result(head + payload.encode("utf-8", "surrogatepass"))

    @property
    def unread(self) -> int:
        # At most this many results are unread: those sent, but for those the program said it
        # had taken (it may have taken more since). Keeping too many is safe.
        return self.posted - self.settled


class _NoChannel:
    """The channel of a program that never started."""

    def take_calls(self) -> list[tuple[int, str, str, int]]:
        return []

    def post(self, call_id: int, ok: bool, payload: str, is_text: bool, /) -> None:
        pass

    @property
    def unread(self) -> int:
        return 0


def _sync_handler(host: HostCalls, source: str) -> Callable[[int, bytes], bytes]:
    """Answers a program's waits (on the worker's sync thread): hostCall, and TypeScript.

    What is stripped of TypeScript is the program's own source as the host sent it (as the
    worker compiles it: `_js_text`), once: never text a worker chose.
    """
    stripped_once = False

    def handle(kind: int, body: bytes) -> bytes:
        nonlocal stripped_once
        if kind == _wire.STRIP:
            if stripped_once:
                raise _wire.WireError("a second STRIP in one run")
            stripped_once = True
            stripped = strip_typescript(_js_text(source))
            if isinstance(stripped, GuestError):
                reply: dict[str, object] = {"error": [stripped.message, stripped.line, stripped.column]}
            else:
                reply = {"js": stripped} if stripped is not None else {}
            return json.dumps(reply).encode("utf-8")
        answer = host(*read_host_call(body, host.limits.tool_data_bytes))
        return answer.encode("utf-8", "surrogatepass")

    return handle


class _Run:
    """The loop's view of one program in a worker: frames in, its end (or its worker's death)."""

    def __init__(
        self,
        worker: WorkerProcess,
        run_id: int,
        calls: LoopCalls,
        channel: _RemoteChannel,
        limits: EngineLimits,
    ) -> None:
        self.worker = worker
        self.run_id = run_id
        self.calls = calls
        self.channel = channel
        self.limits = limits
        self.ended = anyio.Event()
        self.end: GuestEnd | None = None
        self.broken: str | None = None  # why the worker is dead or unusable
        self.stream: Callable[[str], object] | None = None
        self.printed = 0

    @property
    def printed_chars(self) -> int:
        """Characters printed so far, as the worker last reported (progress reports)."""
        return self.printed

    @property
    def tool_calls(self) -> int:
        """Tool calls started so far."""
        return self.calls.shared.tool_calls

    def frame(self, kind: int, body: bytes) -> None:
        """One frame of its worker's control socket (`FrameSink`): what the program sends."""
        if self.ended.is_set():
            if self.end is None or kind in LATE_KINDS:
                return  # what follows its break, or a late report, is not read
            raise _wire.WireError(f"a frame of kind {kind} after its program's end")
        if kind == _wire.CALLS:
            calls = self.calls
            run_id, settled, posted = read_calls(body, self.limits.calls_in_flight)
            if run_id != self.run_id:
                return  # calls an earlier program left: it has ended
            # The calls the host holds for the program: not answered, or answered with a result
            # not yet sent (the program can have read neither).
            pending = calls.pending_ids
            held = len(pending) + len(self.channel.incoming) + self.worker.results_queued
            check_posted(posted, pending, held, calls.shared.args_held, self.limits)
            # (A worker that says more than it was sent only loses its own end's report of them.)
            self.channel.settled = max(self.channel.settled, min(settled, self.channel.posted))
            self.channel.incoming.extend(posted)
            calls.on_posted()
        elif kind == _wire.OUTPUT:
            (run_id,) = _wire.RUN_ID.unpack_from(body)
            if run_id == self.run_id and self.stream is not None:
                text = body[_wire.RUN_ID.size :].decode("utf-8", "replace")
                self.printed += len(text)
                self.stream(text)
        elif kind == _wire.PRINTED:
            run_id, printed = _wire.PRINTED_BODY.unpack(body)
            if run_id == self.run_id:
                self.printed = printed
        elif kind == _wire.END:
            run_id, end = read_end(body, self.limits, self.calls.shared.tool_calls)
            if run_id != self.run_id:
                raise _wire.WireError("an end of another run")
            if self.worker.sending_run:  # (a worker of ours reads its program whole first)
                raise _wire.WireError("an end before its program was read whole")
            self.end = end
            self.ended.set()
        else:
            raise _wire.WireError(f"unexpected frame {kind}")

    def broke(self, why: str) -> None:
        """Its worker died, closed its socket or broke the protocol (`FrameSink`)."""
        if self.broken is None:
            self.broken = why
        self.worker.dead = True
        self.ended.set()


_tables: tuple[tuple[object, ...], bytes] | None = None  # (the key, its encoding): `_run_body`


def _run_body(
    run_id: int,
    batches: bool,
    stream: bool,
    source: str,
    timeout_seconds: float,
    limits: EngineLimits,
    registry: ToolRegistry,
) -> bytes:
    """A program's `_wire.RUN` body (a `_wire.RunMessage`). What all programs of a host share
    (the limits and the prelude's tables of tools) is encoded once, not per program: the tables
    are JSON text inside JSON, escaped again each time (~10 us of the loop's CPU a program)."""
    global _tables
    # With batched decisions every call goes to the loop, where they are asked about.
    inline = "[]" if batches else registry.inline_names_json()
    key = (limits, registry.effectful_names_json(), registry.namespaces_json(), inline)
    tables = _tables  # (one read: hosts on other threads may replace it meanwhile)
    if tables is None or tables[0] != key:
        shared = {
            "limits": limits_json(limits),
            "effectful_json": key[1],
            "namespaces_json": key[2],
            "inline_json": inline,
        }
        tables = _tables = key, json.dumps(shared, ensure_ascii=False).encode("utf-8")[1:-1]
    head = f'{{"run":{run_id},"immediate":{"false" if batches else "true"},"stream":{"true" if stream else "false"},'
    spec = f'"spec":{{"timeout_seconds":{json.dumps(float(timeout_seconds))},"source":{json.dumps(source, ensure_ascii=False)},'
    return (head + spec).encode("utf-8", "surrogatepass") + tables[1] + b"}}"


async def run_in_worker(
    pool: ProcessPool,
    registry: ToolRegistry,
    limits: EngineLimits,
    source: str,
    context: ToolContext,
    *,
    timeout_seconds: float,
    gate: CallGate | None,
    spawner: LoopSpawner,
    stream: Callable[[str], object] | None,
    view: RunView | None = None,
) -> tuple[ProgramOutcome, LoopCalls]:
    """Run one program in a worker of its session; its outcome, and the loop's side of its calls
    (whose pending ones the engine settles).

    Raises:
        EngineUnavailable: No worker can be made here.
    """
    global _next_run
    _next_run = (_next_run + 1) & 0xFFFFFFFF
    run_id = _next_run
    shared = ProgramCalls()
    if view is not None:
        view.waiting = True
    try:
        worker = await pool.acquire(context.session_id)
    except EngineUnavailable as exc:
        log.error("%s", exc)
        error = GuestError(
            "internal", "EngineUnavailable", f"{exc} (a problem of the host, not of the program)"
        )
        outcome = ProgramOutcome(output="", error=error, tool_calls=0, cancelled=[], cpu_seconds=0.0)
        return outcome, LoopCalls(registry, context, limits, gate, _NoChannel(), spawner, shared)
    channel = _RemoteChannel(worker, run_id)
    calls = LoopCalls(registry, context, limits, gate, channel, spawner, shared)
    run = _Run(worker, run_id, calls, channel, limits)
    run.stream = stream
    if view is not None:
        view._program = run
        view.waiting = False
    worker.handler = _sync_handler(HostCalls(registry, context, limits, shared, gate), source)
    batches = gate is not None and gate.batches
    worker.watch()
    worker.sink = run
    finished = False
    try:
        worker.send_run(
            _run_body(run_id, batches, stream is not None, source, timeout_seconds, limits, registry)
        )
        with anyio.move_on_after(timeout_seconds + _GRACE_SECONDS):
            await run.ended.wait()
        finished = True
    finally:
        if not finished:  # this call was cancelled: stop the program, give it a moment to say so
            spawner.close()
            worker.stop(run_id)
            with anyio.CancelScope(shield=True), anyio.move_on_after(_STOP_SECONDS):
                await run.ended.wait()
        worker.sink = None
        if run.end is None:
            if run.broken is None:
                run.broken = worker.broken or "stopped answering"
            pool.kill(worker)
        # No call of the program is answered once it has ended (one being answered is waited for).
        if not worker.calls_ended():
            with anyio.CancelScope(shield=True):
                if not await worker.end_calls():
                    worker.broken = worker.broken or "ended its program with a call unanswered"
                    pool.kill(worker)
        pool.release(worker)
    if run.end is not None and worker.broken is None:
        return outcome_of(run.end, shared), calls
    how = worker.broken or run.broken or "ended"
    if how == "ended":
        status = await anyio.to_thread.run_sync(lambda: zygote().wait_status(worker.pid, 1.0))
        how = describe_status(status)
    log.warning(
        "engine worker %d %s while running a program of session %s: the program ended with engine_crashed",
        worker.pid,
        how,
        context.session_id,
    )
    pending = dict(calls.pending_names())
    return (
        ProgramOutcome(
            output="",
            error=crashed(how),
            tool_calls=shared.tool_calls,
            cancelled=list(pending.values()),
            pending_calls=pending,
            cpu_seconds=0.0,
        ),
        calls,
    )
