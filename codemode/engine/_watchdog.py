"""CPU and wall-clock limits on the program's own clocks, kept by one watchdog thread.

The binding's own time limit (``set_time_limit``) is measured with ``clock()``, the CPU time
of the whole process: other busy threads make it trip early, and on a loaded machine, where
the program's thread gets less than a whole CPU, it trips late as a wall-clock limit. Its
interrupt handler cannot be reached from another thread either. So the limits are kept here:

* The watchdog thread reads the CPU clock of the program's own thread
  (``pthread_getcpuclockid``) and the monotonic clock, and stops the program when either
  limit is reached, or when the host cancels the run.
* To stop a program that is running JavaScript, it installs an interrupt handler on the
  context's runtime with the engine's own ``JS_SetInterruptHandler`` (exported by the
  binding's shared object, called through ctypes in `_native`). Until then the runtime has no handler at
  all, so running JavaScript pays nothing for the limits, and the binding's own time limit
  stays off, which is what lets the program call into Python directly (the binding refuses
  Python callables while its time limit is set; see `_program._HostCall`). The handler is
  the engine's ``JS_GetRuntimeOpaque``: called as ``handler(runtime, opaque)`` it returns
  the binding's context object's address, which is never zero in its low 32 bits (checked),
  so the engine's next check (about every 10,000 bytecodes) stops the program. The context
  object's layout (where the runtime pointer is) and the symbols are checked once per
  process (`interrupts_supported`); where they do not match (another binding version,
  another interpreter, a platform without per-thread CPU clocks), programs fall back to the
  binding's own process-CPU limit.

An interrupt raises QuickJS's uncatchable ``InternalError: interrupted``; `Watch.reason` says
which limit it stands for.
"""

from __future__ import annotations

import math
import os
import threading
import time

import quickjs

from codemode.engine._native import Native, view
from codemode.engine._native import load as load_native

# Once a limit is reached, the watchdog looks again this often until the program's thread
# has stopped (it installs the handler again, harmlessly).
_REPOKE_SECONDS = 0.02
# The watchdog looks at a program's CPU clock when its limit could first be reached (a thread
# uses at most one CPU second per second), and at least this long after the last look.
_MIN_CPU_CHECK_SECONDS = 0.002


_SUPPORTED: bool | None = None
_ENGINE: Native | None = None


def interrupts_supported() -> bool:
    """Whether this process can interrupt a running context from another thread (checked once).

    True on CPython when the context object has the expected size and type pointer, the
    binding's shared object exports the two engine functions, the runtime pointer is where
    expected (the runtime's opaque is the context object), an installed handler interrupts a
    running loop, and thread CPU clocks can be read across threads.
    """
    global _SUPPORTED, _ENGINE
    if _SUPPORTED is None:
        _ENGINE = _check_engine()
        _SUPPORTED = _ENGINE is not None
    return _SUPPORTED


def _check_engine() -> Native | None:
    if not hasattr(time, "pthread_getcpuclockid"):
        return None
    try:
        time.clock_gettime(time.pthread_getcpuclockid(threading.get_ident()))
    except (OSError, OverflowError):
        return None
    engine = load_native()
    if engine is None:
        return None
    ctx = quickjs.Context()
    data = view(ctx)
    if id(ctx) & 0xFFFFFFFF == 0:  # the handler's return value is read as an int
        return None
    engine.interrupt(data.runtime)
    try:
        ctx.eval("let i = 0; for (; i < 1e6; i++) {} i")
        return None  # the handler did not stop the loop
    except quickjs.JSException as exc:
        if "interrupted" not in str(exc):
            return None
    finally:
        engine.clear(data.runtime)
    return engine if ctx.eval("1 + 1") == 2 else None


class Watch:
    """The limits of one running program, kept by the watchdog.

    Made on the program's thread (its CPU clock is that thread's). Attributes the program's
    thread reads: `reason` (None, or ``cpu_limit``, ``timeout`` or ``cancelled`` once the
    watchdog stopped the program) and `interrupts` (whether the watchdog can interrupt running
    JavaScript; otherwise the program arms the binding's own limit).
    """

    def __init__(self, ctx: quickjs.Context | None, cpu_seconds: float, deadline: float) -> None:
        self.interrupts = ctx is not None
        self.reason: str | None = None
        # Only the address: the watchdog must never own (and so never free) the context.
        self._data = view(ctx) if ctx is not None else None
        # The CPU clock of this (the program's) thread, readable from the watchdog's.
        self._clock = time.pthread_getcpuclockid(threading.get_ident()) if ctx is not None else None
        self._cpu_start = self._cpu_now()
        self._cpu_limit = cpu_seconds
        self._deadline = deadline
        self._cpu_due = time.monotonic() + cpu_seconds

    @property
    def first_look(self) -> float:
        """When the watchdog must first look at this watch (time.monotonic)."""
        return min(self._deadline, self._cpu_due)

    def _cpu_now(self) -> float:
        return time.thread_time() if self._clock is None else time.clock_gettime(self._clock)

    def cpu_used(self) -> float:
        """CPU seconds the program's thread used since the watch began.

        Any thread may ask when the watchdog keeps this watch; otherwise only the program's.
        """
        return self._cpu_now() - self._cpu_start

    def _check(self, now: float) -> float:
        """Stop the program if a limit is reached; returns when to look again (watchdog lock held)."""
        if self.reason is None:
            if now >= self._deadline:
                self._stop("timeout")
            elif now >= self._cpu_due:
                left = self._cpu_limit - self.cpu_used()
                if left <= 0:
                    self._stop("cpu_limit")
                else:
                    self._cpu_due = now + max(left, _MIN_CPU_CHECK_SECONDS)
        if self.reason is not None:
            self._interrupt()
            return now + _REPOKE_SECONDS
        return min(self._deadline, self._cpu_due)

    def _stop(self, reason: str) -> None:
        self.reason = reason  # set before the interrupt, so the program reads why it stopped

    def _interrupt(self) -> None:
        """Make the engine's next interrupt check stop the program (watchdog lock held, and
        only while the watch is kept: the context is alive)."""
        data = self._data
        if data is not None and _ENGINE is not None:
            _ENGINE.interrupt(data.runtime)


class Watchdog:
    """One daemon thread that keeps the limits of every running program (started on first use)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watches: set[Watch] = set()
        self._thread: threading.Thread | None = None
        self._wake_at = math.inf  # when the watchdog thread looks next (time.monotonic)

    def _reset_in_child(self) -> None:
        """After fork: the child has no watchdog thread (nor the parent's programs)."""
        self._cond = threading.Condition()
        self._watches = set()
        self._thread = None
        self._wake_at = math.inf

    def start(self, ctx: quickjs.Context, cpu_seconds: float, deadline: float) -> Watch:
        """Begin keeping the limits of the program about to run on ``ctx``.

        Call on the program's thread; ``deadline`` is on `time.monotonic`. Where
        `interrupts_supported` is False, the watch is not kept here (``interrupts`` is False):
        the program arms the binding's limit itself.
        """
        if not interrupts_supported():
            return Watch(None, cpu_seconds, deadline)
        watch = Watch(ctx, cpu_seconds, deadline)
        with self._cond:
            self._watches.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="codemode-watchdog", daemon=True)
                self._thread.start()
            if watch.first_look < self._wake_at:
                self._cond.notify()
        return watch

    def cancel(self, watch: Watch) -> None:
        """Stop that program as soon as possible (any thread)."""
        with self._cond:
            if watch.reason is None:
                watch._stop("cancelled")
            if watch in self._watches:
                watch._interrupt()
                self._cond.notify()

    def release(self, watch: Watch, ctx: quickjs.Context) -> None:
        """Stop keeping that program's limits and disarm its context (on the program's thread).

        After this returns the watchdog never touches the context again, so it may be freed, and
        entries into JavaScript (collecting the output of a stopped program) are not interrupted.
        """
        with self._cond:
            self._watches.discard(watch)
            if watch.interrupts and _ENGINE is not None:
                _ENGINE.clear(view(ctx).runtime)
            else:
                ctx.set_time_limit(-1)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                wake = math.inf
                for watch in self._watches:
                    wake = min(wake, watch._check(now))
                self._wake_at = wake
                self._cond.wait(None if wake == math.inf else max(0.0, wake - now))


WATCHDOG = Watchdog()
os.register_at_fork(after_in_child=WATCHDOG._reset_in_child)
