"""One engine worker: runs the programs the host sends, one at a time, each on a fresh context.

Two threads: the main one takes each program from the sync socket and runs its JavaScript
(`GuestRun`), answered at once by the host over that socket for its inline calls; the relay moves
the program's posted calls to the host and their results back into its channel, over the control
socket. Every frame names the run it belongs to, so that a late result of an earlier program
never reaches a later one. The worker ends when the host closes its sockets (or kills it).

A program comes on the sync socket, where the idle main thread waits, so that a program that
calls nothing never wakes the relay: it sleeps in epoll, to which the main thread adds each
program's channel without waking it. Through the relay, each program cost a wake-up of ~0.15 ms
of CPU in a worker gone cold: a print(1) took 0.80 ms of its worker's CPU, 0.74 ms now (64
sessions' workers in turn, /proc/<pid>/task/*/schedstat; a program that makes calls wakes the
relay for them, and costs the same as before).
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import threading
import time

from codemode.engine import _qjs, _wire
from codemode.engine._guest import EngineLimits, GuestError, GuestRun, GuestSpec
from codemode.engine._watchdog import WATCHDOG
from codemode.engine.worker import _confine

_RUN_ID = struct.Struct(">I")
_PRINTED = struct.Struct(">IQ")
# How long after a program printed the relay tells the host how much (progress reports tick in
# seconds; a frame per print would wake the host's loop for nothing, and a program that ends
# sooner says it all in its end). The relay polls with that timeout only while the running
# program has text untold; a program that goes on after handing text over (it waits for a call
# or a timer) wakes it. Before, a timer per program woke it ~250 ms after every short one had
# ended, ~0.3 ms of CPU each in a worker idle meanwhile (cold caches: /proc/<pid>/task/*/schedstat,
# one program every 0.3 s).
_PRINTED_EVERY = 0.25
# How long the main thread looks for the reply to its call before it sleeps (`_wire.Spin`): an
# inline tool answers in ~10-30 us; one that takes longer is slept for.
_REPLY_SPIN_SECONDS = 200e-6


class _Current:
    """The program the relay serves: its run id and channel, its run (set when it starts),
    whether it was stopped, and how many calls it made (posted, by the relay; answered at once,
    by the main thread)."""

    def __init__(self, run_id: int, channel: _qjs.Channel) -> None:
        self.run_id = run_id
        self.channel = channel
        self.guest: GuestRun | None = None
        self.stopped = False
        self.ended = False
        self.posted = 0
        self.called = 0

    def made_calls(self) -> bool:
        """Whether it made a call that can have changed something: the prelude's report of the
        calls left pending or unread is read only then (it costs ~3% of a short program)."""
        return self.posted > 0 or self.called > 0


class Worker:
    """The worker's side of its two sockets."""

    def __init__(self, ctl: socket.socket, sync: socket.socket) -> None:
        self.ctl = ctl
        self.sync = sync
        self.ctl_out = _wire.Sender(ctl)
        self.sync_out = _wire.Sender(sync)
        self.reply_spin = _wire.Spin(sync, _REPLY_SPIN_SECONDS)
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
                    self.ctl_out.send(_wire.PRINTED, _PRINTED.pack(*printed))
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
        data = self.ctl.recv(1 << 20)
        if not data:
            raise _wire.WireError("the host closed the socket")
        for kind, body in self.reader.feed(data):
            self._frame(kind, body)

    def _frame(self, kind: int, body: bytes) -> None:
        if kind == _wire.RESULT:
            run_id, call_id, ok, is_text = _wire.RESULT_HEAD.unpack_from(body)
            current = self.current
            if current is not None and current.run_id == run_id:
                current.channel.post(call_id, ok, body[_wire.RESULT_HEAD.size :].decode("utf-8"), is_text)
        elif kind == _wire.STOP:
            (run_id,) = _RUN_ID.unpack_from(body)
            with self.lock:
                current = self.current
                if current is None or current.run_id != run_id:
                    self.stopped_early = run_id  # its program is not read yet: it starts stopped
                    return
                current.stopped = True
                guest = current.guest
            if guest is not None:
                guest.cancel()
        else:
            raise _wire.WireError(f"unexpected frame {kind} from the host")

    def _send_calls(self) -> None:
        current = self.current
        if current is None:
            return
        calls = current.channel.take_calls()
        current.posted += len(calls)
        body = json.dumps([current.run_id, current.channel.unread, calls], ensure_ascii=False)
        self.ctl_out.send(_wire.CALLS, body.encode("utf-8"))

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
            current = _Current(int(message["run"]), _qjs.Channel(bool(message["immediate"])))
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
        head = _RUN_ID.pack(run_id)

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
        ctx.free()  # after the end is sent: the host has its outcome meanwhile

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
        body = json.dumps([kind, call_id, name, payload_json, size], ensure_ascii=False)
        try:
            return self._ask(_wire.HOST_CALL, body.encode("utf-8", "surrogatepass")).decode("utf-8")
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


def run_worker(ctl_fd: int, sync_fd: int, limits: _wire.WorkerLimits) -> None:
    """The forked worker's life: limits, threads, seal, serve. Never returns."""
    try:
        ctl = socket.socket(fileno=ctl_fd)
        sync = socket.socket(fileno=sync_fd)
        worker = Worker(ctl, sync)
        _confine.set_limits(limits["address_space_bytes"], limits["cpu_seconds"])
        first = _qjs.Context()  # starts the keeper thread, which makes the next one ahead
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
