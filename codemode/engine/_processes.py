"""The host's side of engine mode ``process``: the zygote, the worker processes, and their pool.

A program runs in a worker process (`codemode.engine.worker`) that holds nothing: confined like a
command and more (no file, no socket, no exec, no new thread, no root). A crash or an exploit of
QuickJS costs that one program. A worker serves one session only (a worker a program of another
session compromised could read the next program's source and results), runs one program at a
time, and goes back to its session's idle list after. At most ``max_workers`` run programs at
once (programs beyond wait for one); at most ``idle_workers`` wait idle for their sessions'
next programs, the least recently used retired first. Idle workers are what make a session's
next program cheap: a new one costs ~8 ms of CPU (the zygote's fork, the confinement, a
cgroup, a host thread), an idle one ~0.3 ms (bench/bench_front.py, 1,000 sessions).

Everything a worker sends is untrusted: frames are checked (`_wire`), its answers are parsed
into plain values, and a worker that breaks the protocol is killed. The host never blocks on a
worker: the control socket is read and written by the event loop without blocking; the sync
socket (the calls a program's thread waits for) is served by one host thread per worker, which
answers only while a program of the worker runs, and kills the worker when it breaks the
protocol there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Protocol

import anyio
import anyio.to_thread

from codemode.engine import _wire
from codemode.engine._zygote_client import (
    START_SECONDS,
    EngineUnavailable,
    describe_status,
    give_cgroup,
    kill_worker,
    log,
    zygote,
)

_MAX_RUNS = 10_000  # programs one worker runs before it is replaced (its CPU rlimit is a total)
_WORKER_CPU_SECONDS = 24 * 3600
# How long the end of a program waits for a call its worker's sync thread is answering (a
# worker that asked as its program ended; inline tools are quick).
_END_CALLS_SECONDS = 5.0
# How long a worker's sync thread looks for its program's next call after a reply before it
# sleeps (`_wire.Spin`): a program that calls inline tools in a loop sends the next ~10 us later.
_NEXT_CALL_SPIN_SECONDS = 100e-6
# What the loop reads of a worker's control socket when it wakes (once: it is woken again while
# more is there), so that a worker flooding its socket with tiny frames holds it ~20 ms at most.
_READ_SIZE = 256 * 1024
# What a worker may send while no program of it runs: what its relay thread had on the way as
# its program ended (a late progress report), about that program. Read and dropped.
LATE_KINDS = frozenset({_wire.PRINTED, _wire.OUTPUT, _wire.CALLS})
# (An int: `socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL` is an enum operation, ~3 us a send.)
_SEND_FLAGS = int(socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
_PEEK_FLAGS = int(socket.MSG_PEEK | socket.MSG_DONTWAIT)


SyncHandler = Callable[[int, bytes], bytes]


class _Writer:
    """Frames written on a socket without blocking the loop (on the loop): what the socket does
    not take at once is written as it drains. When writing fails (the worker died, or closed
    that socket), what is left is dropped and ``on_broken`` is called."""

    def __init__(self, sock: socket.socket, on_broken: Callable[[], None]) -> None:
        self._sock = sock
        self._on_broken = on_broken
        self._queue = collections.deque[bytes | memoryview]()
        self._watching = False

    @property
    def pending(self) -> int:
        """Frames not yet written whole."""
        return len(self._queue)

    def write(self, data: bytes) -> None:
        rest: bytes | memoryview = data
        if not self._queue:  # (nothing waits to be written before it: one send, most often whole)
            try:
                sent = self._sock.send(data, _SEND_FLAGS)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._on_broken()
                return
            if sent == len(data):
                return
            rest = memoryview(data)[sent:]
        self._queue.append(rest)
        if not self._watching:
            self._flush()

    def _flush(self) -> None:
        while self._queue:
            data = self._queue[0]
            try:
                sent = self._sock.send(data, _SEND_FLAGS)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._queue.clear()
                self._on_broken()
                break
            if sent < len(data):
                # The rest as a view: copying it would make a large frame quadratic (a 100 MiB
                # string went out in ~500 socket-buffer pieces).
                self._queue[0] = memoryview(data)[sent:]
                if not self._watching:
                    self._watching = True
                    asyncio.get_running_loop().add_writer(self._sock.fileno(), self._flush)
                return
            self._queue.popleft()
        if self._watching:
            self._watching = False
            asyncio.get_running_loop().remove_writer(self._sock.fileno())

    def close(self) -> None:
        """Drop what is left, and stop waiting for the socket to drain."""
        self._queue.clear()
        if self._watching:
            self._watching = False
            with contextlib.suppress(RuntimeError):  # (no loop runs: nothing waits)
                asyncio.get_running_loop().remove_writer(self._sock.fileno())


class FrameSink(Protocol):
    """What a worker's control socket brings goes to its running program (`_remote._Run`)."""

    def frame(self, kind: int, body: bytes) -> None:
        """One whole frame (on the loop).

        Raises:
            Exception: The frame breaks the protocol (the worker is killed).
        """

    def broke(self, why: str) -> None:
        """The worker died, closed its socket or broke the protocol (on the loop)."""


class WorkerProcess:
    """One worker: its pid, its sockets, and the host thread that answers its program's waits.

    The event loop watches its control socket for the worker's whole life (`watch`), not per
    program: what comes goes to the running program's `sink`; the worker's death is seen
    even while it is idle.
    """

    def __init__(
        self, pid: int, ctl: socket.socket, sync: socket.socket, results: socket.socket, session_id: str
    ) -> None:
        self.pid = pid
        self.ctl = ctl
        self.sync = sync
        self.results = results
        self.session_id = session_id
        self.runs = 0
        self.dead = False
        self.broken: str | None = None  # how it broke the protocol on its sync socket (that thread's)
        self.handler: SyncHandler | None = None  # the running program's, set per run
        self._answering = threading.Lock()  # held by the sync thread while it answers a call
        self._closing = threading.Lock()  # its sockets are shut down (sync thread) or closed (loop)
        # Results not yet written whole (so not yet read by the program: calls it still holds
        # in flight), and what is left to write of its program (`send_run`).
        self._results_out = _Writer(results, lambda: None)
        self._run_out = _Writer(sync, self._end_control)
        self.sink: FrameSink | None = None  # the running program's (on the loop)
        self.on_idle_end: Callable[[WorkerProcess], None] | None = None  # its pool's, while parked
        self._reader = _wire.FrameReader()
        self._watching: asyncio.AbstractEventLoop | None = None
        threading.Thread(target=self._serve_sync, name=f"codemode-worker-{pid}", daemon=True).start()

    def _serve_sync(self) -> None:
        sender = _wire.Sender(self.sync)
        spin = _wire.Spin(self.sync, _NEXT_CALL_SPIN_SECONDS)
        try:
            while True:
                kind, body = _wire.read_frame(self.sync)
                if kind not in (_wire.HOST_CALL, _wire.STRIP):
                    raise _wire.WireError(f"unexpected frame {kind} on the sync socket")
                with self._answering:  # (held until the reply is written: see end_calls)
                    handler = self.handler
                    if handler is None:
                        raise _wire.WireError("a call when no program of it runs")
                    reply = handler(kind, body)
                    sender.send(_wire.REPLY, reply)
                spin.wait()  # (a program's inline calls come in runs: the next is ~10 us away)
        except (_wire.PeerClosed, OSError):
            # The worker ended, or the host closed it; or it closed this socket only, when its
            # program can no longer run: its loop side sees the end now either way.
            self._end_control()
        except Exception as exc:  # a frame no worker of ours sends, or what it made the host do
            if not self.dead:
                self._break(f"broke the protocol on its sync socket ({exc})")

    def _break(self, why: str) -> None:
        """The worker broke the protocol on its sync socket (on that thread): kill it; its
        program, if one runs, ends with ``engine_crashed`` when its control socket closes."""
        log.warning("engine worker %d %s", self.pid, why)
        self.broken = why
        self.dead = True
        kill_worker(self.pid)
        with self._closing:  # its program's loop side sees the end now (and sends it nothing more)
            for sock in (self.ctl, self.sync, self.results):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _end_control(self) -> None:
        """Shut the control socket down (any thread): the loop reads its end, and the program
        ends with ``engine_crashed`` (how the worker ended is asked of the zygote)."""
        with self._closing, contextlib.suppress(OSError):
            self.ctl.shutdown(socket.SHUT_RDWR)

    def calls_ended(self) -> bool:
        """Its program ended: no call more is answered. Whether none is being answered (else
        see `end_calls`)."""
        self.handler = None
        if self._answering.acquire(blocking=False):
            self._answering.release()
            return True
        return False

    async def end_calls(self) -> bool:
        """Its program ended: no call more is answered, and one being answered (until its reply
        is written) is waited for, up to `_END_CALLS_SECONDS`, so that none runs once the
        program's end is returned. False when one still is: the worker ended its program with a
        call unanswered or its reply unread, which no worker of ours does (it waits for each
        reply), and it must not get another program on that socket: the caller kills it."""
        if self.calls_ended():
            return True
        answering = self._answering
        if await anyio.to_thread.run_sync(lambda: answering.acquire(timeout=_END_CALLS_SECONDS)):
            answering.release()
            return True
        return False

    # -- the control socket, from the event loop ---------------------------------------------

    def watch(self) -> None:
        """Have the running event loop read the control socket from now on (again when the
        host runs on another loop than before). On the loop."""
        loop = asyncio.get_running_loop()
        if self._watching is loop:
            return
        self._unwatch()
        loop.add_reader(self.ctl.fileno(), self._on_readable)
        self._watching = loop

    def _unwatch(self) -> None:
        loop, self._watching = self._watching, None
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.remove_reader(self.ctl.fileno())
        else:  # (a host that moved to another loop, or closes with none running)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.remove_reader, self.ctl.fileno())

    def _on_readable(self) -> None:
        """The control socket has bytes: read some (`_READ_SIZE`) and hand the whole frames to
        the running program. Whatever handling a frame raises breaks the protocol: the worker
        is killed, its program ends, the loop goes on."""
        try:
            try:
                data = self.ctl.recv(_READ_SIZE)
            except BlockingIOError:
                return
            except ConnectionResetError:  # it died with our frames unread
                data = b""
            if not data:
                self._gone("ended")
                return
            for kind, body in self._reader.feed(data):
                sink = self.sink
                if sink is not None:
                    sink.frame(kind, body)
                elif kind not in LATE_KINDS:
                    raise _wire.WireError(f"a frame of kind {kind} while no program runs")
        except Exception as exc:  # a frame no worker of ours sends, or what it made the host do
            log.warning("engine worker %d broke the protocol: %r", self.pid, exc)
            kill_worker(self.pid)
            self._gone(f"broke the protocol ({exc})")

    def _gone(self, why: str) -> None:
        """Its control socket ended (or it broke the protocol): read no more; its program,
        if one runs, ends (`FrameSink.broke`); an idle one is retired by its pool now."""
        self.dead = True
        self._unwatch()
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.broke(why)
        elif self.on_idle_end is not None:
            self.on_idle_end(self)

    def closed(self) -> bool:
        """Whether the worker has closed its control socket (it died while idle); without
        blocking, and leaving what it sent (a late progress report) for its next program."""
        try:
            return self.ctl.recv(1, _PEEK_FLAGS) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def send_result(self, body: bytes) -> None:
        """Queue a call's result (`_wire.RESULT`) on the results socket, where the worker's main
        thread reads it when its program waits; written without blocking the loop (on the loop)."""
        if not self.dead:
            self._results_out.write(_wire.frame(_wire.RESULT, body))

    @property
    def results_queued(self) -> int:
        """Results not yet written whole (on the loop)."""
        return self._results_out.pending

    def stop(self, run_id: int) -> None:
        """Ask the worker to stop its program (`_wire.STOP`, on the control socket, which its
        relay thread reads even while the program computes; on the loop). Nothing else goes
        that way, so it is never full: a worker whose relay reads nothing is killed when its
        program does not end (`run_in_worker`)."""
        if self.dead:
            return
        with contextlib.suppress(OSError):
            self.ctl.send(_wire.frame(_wire.STOP, _wire.RUN_ID.pack(run_id)), _SEND_FLAGS)

    @property
    def sending_run(self) -> bool:
        """Whether part of its program is still to be written (on the loop)."""
        return self._run_out.pending > 0

    def send_run(self, body: bytes) -> None:
        """Send a program (`_wire.RUN`) to this idle worker, without blocking the loop (on the
        loop). It goes on the sync socket, where the worker's idle main thread waits for it;
        the sync thread only reads that socket, and writes its replies only while a program
        runs. The two never interleave: a worker that ends its program before reading all of
        it (`sending_run`), or with a reply unread (`end_calls`), is killed, not kept."""
        if not self.dead:
            self._run_out.write(_wire.frame(_wire.RUN, body))

    def close(self) -> None:
        """End the worker: its sockets closed, it exits (and is killed, should it not)."""
        self._unwatch()
        self.sink = None
        self._results_out.close()
        self._run_out.close()
        self.dead = True
        with self._closing:
            for sock in (self.ctl, self.sync, self.results):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


class _Waiter:
    """A program waiting for a worker: handed one of its session's, or woken to try again."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.event = anyio.Event()
        self.worker: WorkerProcess | None = None


class ProcessPool:
    """Worker processes for one engine, each serving one session.

    Args:
        max_workers: Workers running programs at once; a program beyond waits for one.
        address_space_bytes: Each worker's RLIMIT_AS.
        idle_workers: Workers kept idle for their sessions' next programs, at most.
    """

    def __init__(self, max_workers: int, address_space_bytes: int, idle_workers: int) -> None:
        self.max_workers = max_workers
        self.idle_workers = idle_workers
        self._limits: _wire.WorkerLimits = {
            "address_space_bytes": address_space_bytes,
            "cpu_seconds": _WORKER_CPU_SECONDS,
        }
        self._idle: collections.OrderedDict[int, WorkerProcess] = collections.OrderedDict()  # LRU first
        # The same idle workers by session (most recent last): a program finds its session's in
        # one lookup, not by a walk of every idle worker (~0.8 ms a call with 1,000 sessions).
        self._idle_by_session: dict[str, dict[int, WorkerProcess]] = {}
        self._busy: dict[int, WorkerProcess] = {}
        self._running = 0  # programs holding a worker, or having one started for them
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._closed = False

    async def acquire(self, session_id: str) -> WorkerProcess:
        """A worker for a program of this session: one of its idle ones, a new one, or, when
        the pool is full, the next to come free (first come, first served).

        Raises:
            EngineUnavailable: Workers cannot be made here.
        """
        ahead = False  # woken to try again: it goes before those still waiting
        while True:
            first = ahead or not self._waiters
            if self._running < self.max_workers and first:
                self._running += 1
                idle = self._idle_of(session_id)
                if idle is not None:
                    self._busy[idle.pid] = idle
                    return idle
                try:
                    started = await self._start(session_id)
                except BaseException:
                    self._running -= 1
                    self._wake_one()
                    raise
                self._busy[started.pid] = started
                return started
            waiter = _Waiter(session_id)
            self._waiters.append(waiter)
            try:
                await waiter.event.wait()
            except BaseException:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.worker is None:  # woken to try again: the next waiter tries instead
                    self._wake_one()
                elif waiter.worker is not None:  # handed one as it was cancelled: give it back
                    self.release(waiter.worker, ran=False)
                raise
            if waiter.worker is not None:
                self._busy[waiter.worker.pid] = waiter.worker
                return waiter.worker
            ahead = True  # woken because room was made: go round again

    def _idle_of(self, session_id: str) -> WorkerProcess | None:
        """The session's most recently used idle worker, taken from the idle list; one that
        died while idle, or broke the protocol (its sync thread killed it), is retired instead."""
        while mine := self._idle_by_session.get(session_id):
            worker = self._unpark(next(reversed(mine)))
            if not worker.dead and not worker.closed():
                return worker
            worker.close()
        return None

    def _park(self, worker: WorkerProcess) -> None:
        self._idle[worker.pid] = worker
        self._idle_by_session.setdefault(worker.session_id, {})[worker.pid] = worker
        worker.on_idle_end = self._idle_ended

    def _unpark(self, pid: int) -> WorkerProcess:
        worker = self._idle.pop(pid)
        worker.on_idle_end = None
        mine = self._idle_by_session[worker.session_id]
        del mine[pid]
        if not mine:
            del self._idle_by_session[worker.session_id]
        return worker

    def _idle_ended(self, worker: WorkerProcess) -> None:
        """An idle worker died or broke the protocol (the loop saw it on its control socket)."""
        if self._idle.get(worker.pid) is worker:
            self._unpark(worker.pid).close()

    async def _start(self, session_id: str) -> WorkerProcess:
        mine_ctl, theirs_ctl = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        mine_sync, theirs_sync = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        mine_results, theirs_results = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        limits = self._limits

        def fork() -> int:
            try:
                pid = zygote().fork(theirs_ctl, theirs_sync, theirs_results, limits)
            finally:
                theirs_ctl.close()
                theirs_sync.close()
                theirs_results.close()
            mine_ctl.settimeout(START_SECONDS)
            try:
                kind, _ = _wire.read_frame(mine_ctl)
            except (_wire.WireError, OSError) as exc:
                zygote().kill(pid)
                status = zygote().wait_status(pid, 1.0)
                raise EngineUnavailable(
                    f"an engine worker {describe_status(status)} before it was ready ({exc})"
                ) from None
            finally:
                mine_ctl.settimeout(None)
            if kind != _wire.READY:
                zygote().kill(pid)
                raise EngineUnavailable("an engine worker sent something else than ready")
            give_cgroup(pid)
            return pid

        try:
            pid = await anyio.to_thread.run_sync(fork)
        except BaseException:
            mine_ctl.close()
            mine_sync.close()
            mine_results.close()
            raise
        mine_ctl.setblocking(False)
        return WorkerProcess(pid, mine_ctl, mine_sync, mine_results, session_id)

    def release(self, worker: WorkerProcess, *, ran: bool = True) -> None:
        """A program ended: its worker goes to the next program of its session that waits, or
        idle for its session (the least recently used idle worker retired when there are more
        than ``idle_workers``); it is replaced when it died, misbehaved or ran its share of
        programs. A program of another session that waits is woken: there is room to run."""
        self._busy.pop(worker.pid, None)
        worker.handler = None
        worker.runs += int(ran)
        if worker.dead or self._closed or worker.runs >= _MAX_RUNS:
            worker.close()
        else:
            for waiter in self._waiters:
                if waiter.session_id == worker.session_id:
                    self._waiters.remove(waiter)
                    waiter.worker = worker  # (its running slot passes on with the worker)
                    waiter.event.set()
                    return
            self._park(worker)
            while len(self._idle) > self.idle_workers:
                self._unpark(next(iter(self._idle))).close()
        self._running -= 1
        self._wake_one()

    def kill(self, worker: WorkerProcess) -> None:
        """Kill a worker now (it stopped answering, or broke the protocol)."""
        worker.dead = True
        kill_worker(worker.pid)

    def _wake_one(self) -> None:
        """Room was made: the oldest waiting program tries again."""
        if self._waiters:
            self._waiters.popleft().event.set()

    def forget_session(self, session_id: str) -> None:
        """End the idle workers of a session that ended."""
        for pid in list(self._idle_by_session.get(session_id, ())):
            self._unpark(pid).close()

    def close(self) -> None:
        """End every idle worker; busy ones end when their programs do."""
        self._closed = True
        while self._idle:
            self._unpark(next(reversed(self._idle))).close()

    @property
    def waiting(self) -> int:
        """Programs waiting for a worker (status)."""
        return len(self._waiters)

    def worker_pids(self) -> list[int]:
        """The pids of the idle workers (tests, doctor)."""
        return list(self._idle)

    def busy_pids(self) -> list[int]:
        """The pids of the workers running a program (tests, doctor)."""
        return list(self._busy)
