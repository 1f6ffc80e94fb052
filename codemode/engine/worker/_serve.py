"""One engine worker: runs the programs the host sends, one at a time, each on a fresh context.

Three sockets, two threads. The main thread takes each program from the *sync* socket and runs
its JavaScript (`GuestRun`); the host answers its inline calls at once over that socket. When
the program waits, the main thread hands its posted calls to the host (`CALLS` on the *control*
socket) and sleeps on the *results* socket, whose `RESULT` frames it posts into the program's
channel itself. The relay thread reads the control socket, where the host sends only `STOP` (it
must reach a program that computes), tells the host now and then how much a program printed,
and hands over the calls of a program that posted them and computes on (after 1 ms: the
channel's ``hands_over``). Every frame names the run it belongs to, so that a late result of an
earlier program never reaches a later one. The worker ends when the host closes its sockets (or
kills it).

Why the main thread waits itself: each thread woken on the other CPU costs ~25 us here (an IPI
to a halted vCPU). An async call through the relay woke four (the relay for the call, the host,
the relay for the result, the main thread); now two (the host, the main thread). A program that
calls nothing never wakes the relay: it sleeps in epoll, to which the main thread adds each
program's channel without waking it.
"""

from __future__ import annotations

import json
import math
import os
import select
import socket
import threading
import time

from codemode.engine import _qjs, _wire
from codemode.engine._guest import EngineLimits, GuestError, GuestRun, GuestSpec
from codemode.engine._watchdog import WATCHDOG
from codemode.engine.worker import _confine

# How long after a program printed the relay tells the host how much (progress reports tick in
# seconds; a frame per print would wake the host's loop for nothing, and a program that ends
# sooner says it all in its end). The relay polls with that timeout only while the running
# program has text untold; a program that goes on after handing text over (it waits for a call
# or a timer) wakes it. Before, a timer per program woke it ~250 ms after every short one had
# ended, ~0.3 ms of CPU each in a worker idle meanwhile (cold caches: /proc/<pid>/task/*/schedstat,
# one program every 0.3 s).
_PRINTED_EVERY = 0.25
_READ_SIZE = 1 << 20
# How long the main thread looks for the reply to its call, or for a result its program waits
# for, before it sleeps (`_wire.Spin`): an inline tool answers in ~10-30 us, the loop a quick
# async one in ~50-100; one that takes longer is slept for.
_REPLY_SPIN_SECONDS = 200e-6
_RESULT_SPIN_SECONDS = 200e-6


class _Current:
    """The program running: its run id and channel, its run (set when it starts), whether it
    was stopped, how many calls it made (posted; answered at once), and how many results it
    was given (read off the results socket into its channel, by the main thread)."""

    def __init__(self, run_id: int, channel: _qjs.Channel) -> None:
        self.run_id = run_id
        self.channel = channel
        self.guest: GuestRun | None = None
        self.stopped = False
        self.ended = False
        self.posted = 0
        self.called = 0
        self.results = 0

    def settled(self) -> int:
        """How many of its results it has taken (the host holds the rest: `_wire.CALLS`). The
        main thread counts a result after posting it, so a count read meanwhile is short of it,
        never ahead."""
        return self.results - self.channel.unread

    def made_calls(self) -> bool:
        """Whether it made a call that can have changed something: the prelude's report of the
        calls left pending or unread is read only then (it costs ~3% of a short program)."""
        return self.posted > 0 or self.called > 0


class Worker:
    """The worker's side of its three sockets."""

    def __init__(self, ctl: socket.socket, sync: socket.socket, results: socket.socket) -> None:
        self.ctl = ctl
        self.sync = sync
        self.results = results
        results.setblocking(False)
        self.results_in = _wire.FrameReader()
        # The main thread sleeps on the results socket while its program waits, and on this
        # eventfd, which the relay writes when it stops the program.
        self.main_wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.main_poller = select.epoll()
        self.main_poller.register(results.fileno(), select.EPOLLIN)
        self.main_poller.register(self.main_wake, select.EPOLLIN)
        self.calls_lock = threading.Lock()  # a take of calls and its CALLS frame (main or relay)
        self.ctl_out = _wire.Sender(ctl)
        self.sync_out = _wire.Sender(sync)
        self.reply_spin = _wire.Spin(sync, _REPLY_SPIN_SECONDS)
        self.result_spin = _wire.Spin(results, _RESULT_SPIN_SECONDS)
        # The program the relay serves, set by the main thread (under `lock`, with `stopped_early`:
        # the run of a STOP that came before its program, which is read from the other socket).
        self.current: _Current | None = None
        self.stopped_early: int | None = None
        self.lock = threading.Lock()
        self.poller = select.epoll()
        self.poller.register(ctl.fileno(), select.EPOLLIN)
        self.watched: int | None = None  # the channel fd the relay watches (set by the main thread)
        self.reader = _wire.FrameReader()
        # What the current program has printed (run id, characters), written by its thread, and
        # what the host was last told (progress reports; see _PRINTED_EVERY): by the relay, or
        # by the program's end, which says it all (so the relay does not wake to tell it after).
        self.printed = (0, 0)
        self.printed_told = (0, 0)
        # The program's thread wakes the relay through this when its program goes on with text
        # untold while the relay sleeps without a timeout (`timed`).
        self.wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.poller.register(self.wake, select.EPOLLIN)
        self.timed = False

    # -- the relay thread ---------------------------------------------------------------------

    def relay(self) -> None:
        """Move frames between the control socket and the current program's channel; exits the
        process when the host goes away."""
        ctl = self.ctl.fileno()
        told_at = time.monotonic()
        try:
            while True:
                running = self._running()
                # While a running program has printed text not yet told, look now and then
                # whether it printed more; else sleep until something comes: a program that
                # goes on (`_run`'s on_wait) with text untold wakes this thread itself.
                self.timed = running and self.printed != self.printed_told
                # Read again once `timed` is published: text handed over in between was seen
                # by a `going_on` that read the old value and did not wake this thread.
                untold = self.printed != self.printed_told
                if running and untold:
                    self.timed = True
                ready = self.poller.poll(_PRINTED_EVERY if self.timed else -1)
                for fd, _events in ready:
                    if fd == ctl:
                        self._from_host()
                    elif fd == self.watched:
                        self._send_calls()
                    elif fd == self.wake:
                        os.eventfd_read(self.wake)
                if untold and (not ready or time.monotonic() - told_at >= _PRINTED_EVERY):
                    told_at = time.monotonic()
                    self.printed_told = printed = self.printed
                    self.ctl_out.send(_wire.PRINTED, _wire.PRINTED_BODY.pack(*printed))
        except _wire.WireError:
            os._exit(0)  # the host closed the socket: nothing left to do
        except BaseException:
            os._exit(70)

    def _running(self) -> bool:
        # (No reference to the program is kept while the relay sleeps: its channel's eventfd
        # closes once the main thread drops it.)
        current = self.current
        return current is not None and not current.ended

    def _from_host(self) -> None:
        data = self.ctl.recv(_READ_SIZE)
        if not data:
            raise _wire.WireError("the host closed the socket")
        for kind, body in self.reader.feed(data):
            self._frame(kind, body)

    def _frame(self, kind: int, body: bytes) -> None:
        if kind == _wire.STOP:
            (run_id,) = _wire.RUN_ID.unpack_from(body)
            with self.lock:
                current = self.current
                if current is None or current.run_id != run_id:
                    self.stopped_early = run_id  # its program is not read yet: it starts stopped
                    return
                current.stopped = True
                guest = current.guest
            if guest is not None:
                guest.cancel()
            os.eventfd_write(self.main_wake, 1)  # (a program asleep in its wait sees it now)
        else:
            raise _wire.WireError(f"unexpected frame {kind} from the host")

    def _send_calls(self) -> None:
        current = self.current
        if current is not None:
            self._hand_over(current)

    def _hand_over(self, current: _Current) -> None:
        """Send the calls the program posted, if any (main thread or relay)."""
        with self.calls_lock:
            calls = current.channel.take_calls()
            if not calls:
                return
            current.posted += len(calls)
            body = json.dumps([current.run_id, current.settled(), calls], ensure_ascii=False)
            self.ctl_out.send(_wire.CALLS, body.encode("utf-8"))

    # -- the main thread, while its program waits ---------------------------------------------

    def _wait_for(self, current: _Current, until: float) -> None:
        """The program waits (`GuestRun`'s wait_for): its calls go to the host, then results
        are read, or slept for until they come, the program is stopped, or ``until``. Exits the
        process when the host goes away."""
        try:
            self._wait(current, until)
        except _wire.PeerClosed:
            os._exit(0)  # the host closed the socket: nothing left to do
        except (_wire.WireError, OSError):
            os._exit(70)

    def _wait(self, current: _Current, until: float) -> None:
        self._hand_over(current)
        if self._take_results(current):
            return
        left = until - time.monotonic()
        if left <= 0:
            return
        self.result_spin.wait()
        if self._take_results(current):
            return
        for fd, _events in self.main_poller.poll(-1 if math.isinf(left) else left):
            if fd == self.main_wake:
                os.eventfd_read(self.main_wake)
        self._take_results(current)

    def _take_results(self, current: _Current) -> bool:
        """Post the results the host has sent into the program's channel; whether any was its."""
        got = False
        while True:
            try:
                data = self.results.recv(_READ_SIZE)
            except BlockingIOError:
                return got
            if not data:
                raise _wire.PeerClosed("the host closed the socket")
            for kind, body in self.results_in.feed(data):
                if kind != _wire.RESULT:
                    raise _wire.WireError(f"unexpected frame {kind} on the results socket")
                run_id, call_id, ok, is_text = _wire.RESULT_HEAD.unpack_from(body)
                if run_id == current.run_id:  # (else a late result of an earlier program)
                    payload = body[_wire.RESULT_HEAD.size :].decode("utf-8")
                    current.channel.post(call_id, ok, payload, is_text)
                    current.results += 1
                    got = True
            if len(data) < _READ_SIZE:  # (the socket is empty: no read more to be told so)
                return got

    # -- the main thread ----------------------------------------------------------------------

    def serve(self) -> None:
        """Run programs as they come, one at a time (never returns; exits when the host goes)."""
        while True:
            try:
                kind, body = _wire.read_frame(self.sync)
            except _wire.WireError:
                os._exit(0)  # the host closed the socket: nothing left to do
            if kind != _wire.RUN:
                os._exit(70)
            message: _wire.RunMessage = json.loads(body)
            channel = _qjs.Channel(bool(message["immediate"]), hands_over=True)
            current = _Current(int(message["run"]), channel)
            with self.lock:
                previous, self.current = self.current, current
                current.stopped = self.stopped_early == current.run_id
            self._watch(current.channel.fileno())
            del previous  # (its channel's eventfd closes with it: after the relay stopped watching it)
            self._run(current, message)

    def _watch(self, fd: int) -> None:
        """Have the relay watch this channel's eventfd instead of the last one's (epoll: without
        waking it)."""
        if self.watched is not None:
            self.poller.unregister(self.watched)
        self.watched = fd
        self.poller.register(fd, select.EPOLLIN)

    def _run(self, current: _Current, message: _wire.RunMessage) -> None:
        spec_data = message["spec"]
        spec = GuestSpec(
            source=str(spec_data["source"]),
            limits=EngineLimits(**spec_data["limits"]),
            timeout_seconds=float(spec_data["timeout_seconds"]),
            effectful_json=str(spec_data["effectful_json"]),
            namespaces_json=str(spec_data["namespaces_json"]),
            inline_json=str(spec_data["inline_json"]),
        )
        run_id = current.run_id
        head = _wire.RUN_ID.pack(run_id)

        stream = bool(message.get("stream"))
        printed = 0

        def output(text: str) -> None:
            nonlocal printed
            if stream:
                self.ctl_out.send(_wire.OUTPUT, head + text.encode("utf-8", "surrogatepass"))
                return
            printed += len(text)  # progress reports need the count only: the relay tells it
            self.printed = (run_id, printed)

        def going_on() -> None:
            # The program goes on with text the host was not told of: a relay sleeping without
            # a timeout must tell it (a program that ends says it all in its end instead).
            if not self.timed and self.printed != self.printed_told:
                self.timed = True
                os.eventfd_write(self.wake, 1)

        guest = GuestRun(
            spec,
            current.channel,
            self._host_call,
            self._strip,
            current.made_calls,  # (the host knows which calls changed things; the worker does not)
            output,
            going_on,
            lambda until: self._wait_for(current, until),
        )
        with self.lock:
            current.guest = guest
            stopped = current.stopped
        if stopped:  # stopped before it started
            guest.cancel()
        ctx = _qjs.take_ready() or _qjs.Context()
        end = guest.run(ctx)
        current.ended = True
        # (It holds `current.made_calls`: no cycle is left to keep the channel's eventfd open.)
        current.guest = None
        self.printed_told = self.printed  # the end tells the host all it printed
        data: _wire.EndMessage = {**end.to_json(), "run": run_id}
        self.ctl_out.send(_wire.END, json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        ctx.hand_back()  # freed by the keeper thread, at idle priority (`_qjs.c`: the keeper)

    def _ask(self, kind: int, body: bytes) -> bytes:
        self.sync_out.send(kind, body)
        self.reply_spin.wait()
        reply_kind, reply = _wire.read_frame(self.sync)
        if reply_kind != _wire.REPLY:
            raise _wire.WireError(f"unexpected frame {reply_kind} on the sync socket")
        return reply

    def _host_call(self, kind: str, call_id: int, name: str, payload_json: str, size: int) -> str:
        current = self.current
        if kind != "sync" and current is not None:  # (the store's calls change no tool's state)
            current.called += 1
        try:
            return self._ask(
                _wire.HOST_CALL, _wire.host_call(kind, call_id, name, payload_json, size)
            ).decode("utf-8")
        except _wire.WireError:
            os._exit(0)  # the host went away mid-call

    def _strip(self, source: str) -> str | GuestError | None:
        try:
            reply = json.loads(self._ask(_wire.STRIP, source.encode("utf-8", "surrogatepass")))
        except _wire.WireError:
            os._exit(0)
        if "js" in reply:
            return str(reply["js"])
        if "error" in reply:
            message, line, column = reply["error"]
            return GuestError("syntax_error", "TypeScriptError", str(message), line, column)
        return None


def run_worker(ctl_fd: int, sync_fd: int, results_fd: int, limits: _wire.WorkerLimits) -> None:
    """The forked worker's life: limits, threads, seal, serve. Never returns."""
    try:
        ctl = socket.socket(fileno=ctl_fd)
        sync = socket.socket(fileno=sync_fd)
        results = socket.socket(fileno=results_fd)
        worker = Worker(ctl, sync, results)
        _confine.set_limits(limits["address_space_bytes"], limits["cpu_seconds"])
        # Starts the keeper thread (before the seal: no thread starts after), at idle priority:
        # it makes the next program's context ahead and frees the last one's when a CPU is idle.
        first = _qjs.Context()
        first.free()
        WATCHDOG.prestart()
        threading.Thread(target=worker.relay, name="codemode-relay", daemon=True).start()
        _confine.seal()
        worker.ctl_out.send(_wire.READY, b"")
    except BaseException:
        os._exit(71)
    try:
        worker.serve()
    finally:
        os._exit(70)
