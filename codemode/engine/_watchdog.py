"""CPU and wall-clock limits on the program's own clocks, kept by one watchdog thread.

The watchdog thread reads the CPU clock of each program's own thread
(``pthread_getcpuclockid``: other busy threads do not count, a program that gets less than a
whole CPU is not cut short) and the monotonic clock, and stops the program when either limit
is reached, or when the host cancels the run. It stops it through the program's channel
(``_qjs.Channel.interrupt``): the engine's next interrupt check (about every 10,000 bytecodes)
throws QuickJS's uncatchable ``InternalError: interrupted``, and a program waiting for a tool
wakes at once. `Watch.reason` says which limit it stands for.
"""

from __future__ import annotations

import math
import os
import threading
import time

from codemode.engine import _qjs

# Once a limit is reached, the watchdog looks again this often until the program's thread
# has stopped (it interrupts again, harmlessly).
_REPOKE_SECONDS = 0.02
# The watchdog looks at a program's CPU clock when its limit could first be reached (a thread
# uses at most one CPU second per second), and at least this long after the last look.
_MIN_CPU_CHECK_SECONDS = 0.002


class Watch:
    """The limits of one running program, kept by the watchdog.

    Made on the program's thread (its CPU clock is that thread's). `reason` is None, or
    ``cpu_limit``, ``timeout`` or ``cancelled`` once the watchdog stopped the program.
    """

    def __init__(self, channel: _qjs.Channel, cpu_seconds: float, deadline: float) -> None:
        self.reason: str | None = None
        self._channel = channel
        # The CPU clock of this (the program's) thread, readable from the watchdog's.
        self._clock = time.pthread_getcpuclockid(threading.get_ident())
        self._cpu_start = self._cpu_now()
        self._cpu_limit = cpu_seconds
        self._deadline = deadline
        self._cpu_due = time.monotonic() + cpu_seconds

    @property
    def first_look(self) -> float:
        """When the watchdog must first look at this watch (time.monotonic)."""
        return min(self._deadline, self._cpu_due)

    def _cpu_now(self) -> float:
        return time.clock_gettime(self._clock)

    def cpu_used(self) -> float:
        """CPU seconds the program's thread used since the watch began (any thread, while kept)."""
        return self._cpu_now() - self._cpu_start

    def _check(self, now: float) -> float:
        """Stop the program if a limit is reached; returns when to look again (watchdog lock held)."""
        if self.reason is None:
            if now >= self._deadline:
                self.reason = "timeout"
            elif now >= self._cpu_due:
                left = self._cpu_limit - self.cpu_used()
                if left <= 0:
                    self.reason = "cpu_limit"
                else:
                    self._cpu_due = now + max(left, _MIN_CPU_CHECK_SECONDS)
        if self.reason is not None:
            self._channel.interrupt()  # after the reason: the program reads why it stopped
            return now + _REPOKE_SECONDS
        return min(self._deadline, self._cpu_due)


class Watchdog:
    """One daemon thread that keeps the limits of every running program (started on first use)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())  # (an RLock's is slower, and not needed)
        self._watches: set[Watch] = set()
        self._thread: threading.Thread | None = None
        self._wake_at = math.inf  # when the watchdog thread looks next (time.monotonic)

    def _reset_in_child(self) -> None:
        """After fork: the child has no watchdog thread (nor the parent's programs)."""
        self._cond = threading.Condition(threading.Lock())
        self._watches = set()
        self._thread = None
        self._wake_at = math.inf

    def start(self, channel: _qjs.Channel, cpu_seconds: float, deadline: float) -> Watch:
        """Begin keeping the limits of the program about to run (call on the program's thread;
        ``deadline`` is on `time.monotonic`)."""
        watch = Watch(channel, cpu_seconds, deadline)
        with self._cond:
            self._watches.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="codemode-watchdog", daemon=True)
                self._thread.start()
            if watch.first_look < self._wake_at:
                self._cond.notify()
        return watch

    def prestart(self) -> None:
        """Start the watchdog's thread now (an engine worker, before it forbids new threads)."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="codemode-watchdog", daemon=True)
                self._thread.start()

    def cancel(self, watch: Watch) -> None:
        """Stop that program as soon as possible (any thread)."""
        with self._cond:
            if watch.reason is None:
                watch.reason = "cancelled"
            if watch in self._watches:
                watch._channel.interrupt()
                self._cond.notify()

    def release(self, watch: Watch) -> None:
        """Stop keeping that program's limits (on the program's thread): after this returns the
        watchdog never interrupts it again."""
        with self._cond:
            self._watches.discard(watch)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                # (No loop variable: it would hold the last program's watch, and so its channel
                # and that channel's eventfd, while this thread sleeps.)
                wake = min((watch._check(now) for watch in self._watches), default=math.inf)
                self._wake_at = wake
                self._cond.wait(None if wake == math.inf else max(0.0, wake - now))


WATCHDOG = Watchdog()
os.register_at_fork(after_in_child=WATCHDOG._reset_in_child)
