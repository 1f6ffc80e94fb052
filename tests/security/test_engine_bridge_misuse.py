"""The engine bridge (codemode/engine/_qjs.c) raises on misuse, never crashes the interpreter.

Each class of misuse that once segfaulted the host runs in its own interpreter, so a crash fails
the test (a signal as the return code) instead of killing pytest: a context used after its
runtime was freed, one context driven from two threads at once (run, eval, start, free, ...),
the context's own host function calling back into it, results posted from another thread while
the program runs (unknown ids, twice, bad JSON), interrupts from another thread, and a stack
limit larger than the calling thread's stack.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

_COMMON = """
import math, threading, time
from codemode.engine import _qjs
from codemode.engine._text import prepare_context

def expect(kind, match, call):
    try:
        call()
    except kind as exc:
        assert match in str(exc), (match, str(exc))
        return
    raise AssertionError(f"no {kind.__name__} ({match!r})")
"""


def _isolated(script: str) -> str:
    """Run ``script`` in a fresh interpreter; its stdout. A crash (a signal) fails here."""
    done = subprocess.run(
        [sys.executable, "-c", _COMMON + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


def test_a_freed_context_raises_on_every_method() -> None:
    out = _isolated(
        """
        for ctx in (prepare_context(), _qjs.Context(prelude=False)):
            ctx.free()
            ch = _qjs.Channel()
            for call in (
                lambda: ctx.eval("1"),
                lambda: ctx.set_limits(1 << 20, 1 << 20),
                lambda: ctx.start(ch, "(async function __cm_main() {})", 1, 1, "[]", "[]", "[]"),
                lambda: ctx.run(time.monotonic() + 1, math.inf),
                lambda: ctx.fire(1),
                lambda: ctx.take_output(),
                lambda: ctx.take_chunk(),
                lambda: ctx.report(),
                lambda: ctx.set_slice(1.0),
            ):
                expect(RuntimeError, "freed", call)
            ctx.free()  # twice: nothing to do
            ctx.set_host(None)
            ctx.disarm()
            assert ctx.outstanding == 0 and ctx.slice_end is None
        # freed while a program was started on it: the channel lives on, the context refuses
        ctx = prepare_context()
        ch = _qjs.Channel()
        ctx.start(ch, "(async function __cm_main() { await tools.x({}) })", 1 << 20, 10, "[]", "[]", "[]")
        ctx.free()
        ch.post(1, True, "late", True)
        ch.interrupt()
        expect(RuntimeError, "freed", lambda: ctx.run(time.monotonic() + 1, math.inf))
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_a_context_in_use_on_one_thread_refuses_every_other_use() -> None:
    # The program calls an inline tool; its host function (on the program's thread, inside run)
    # holds there while this thread tries everything, and calls back into its own context.
    out = _isolated(
        """
        ctx = prepare_context()
        ch = _qjs.Channel()
        inside = threading.Event()
        release = threading.Event()
        reentry = []

        def host(kind, call_id, name, payload, size):
            inside.set()
            for call in (lambda: ctx.eval("1"), lambda: ctx.free(), lambda: ctx.report(),
                         lambda: ctx.set_host(None)):
                try:
                    call()
                    reentry.append("no error")
                except RuntimeError as exc:
                    reentry.append("in use" in str(exc))
            assert release.wait(60)
            return "tprobed"

        ctx.set_host(host)
        ctx.set_limits(64 << 20, 1 << 20)
        ctx.start(ch, "(async function __cm_main() { await 0; print(await tools.probe({})) })",
                  1 << 20, 10, "[]", "[]", '["probe"]')
        ended = []

        def program():
            while True:
                event, text = ctx.run(time.monotonic() + 60, math.inf)
                if event != "drain" or '"done"' in text:
                    ended.append(event)
                    return

        worker = threading.Thread(target=program)
        worker.start()
        assert inside.wait(60)
        for call in (
            lambda: ctx.eval("1"),
            lambda: ctx.run(time.monotonic() + 1, math.inf),
            lambda: ctx.start(_qjs.Channel(), "(async function __cm_main() {})", 1, 1, "[]", "[]", "[]"),
            lambda: ctx.fire(1),
            lambda: ctx.take_output(),
            lambda: ctx.take_chunk(),
            lambda: ctx.report(),
            lambda: ctx.free(),
            lambda: ctx.set_limits(1 << 20, 1 << 20),
            lambda: ctx.set_slice(1.0),
            lambda: ctx.set_host(None),
        ):
            expect(RuntimeError, "in use", call)
        # What any thread may do while it runs: answer, interrupt-free reads, disarm's flag.
        ch.post(999, True, "nobody asked", True)
        assert ctx.outstanding >= 0 and not ch.interrupted
        release.set()
        worker.join(60)
        assert not worker.is_alive() and ended == ["drain"], ended
        assert reentry == [True, True, True, True], reentry
        assert ctx.take_output() == "probed\\n"
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_two_threads_racing_on_one_context_never_share_it() -> None:
    # One thread runs a program that computes between its calls; two others call run() and
    # eval() on the same context all the while; the loop's side answers (also unknown ids, and
    # twice) and interrupts at the end. Each use has the context alone or raises "in use".
    out = _isolated(
        """
        ctx = prepare_context()
        ch = _qjs.Channel()
        ctx.set_limits(64 << 20, 1 << 20)
        ctx.start(ch, "(async function __cm_main() { let s = []; for (let i = 0; i < 200; i++) {"
                  " await tools.x({i}); for (let j = 0; j < 3000; j++) s.push({j}); s = []; } })",
                  1 << 20, 1000, "[]", "[]", "[]")
        refused = []
        finished = threading.Event()

        def owner():
            end = time.monotonic() + 3  # three seconds of racing; the program need not finish
            while time.monotonic() < end:
                try:
                    if ctx.run(end, math.inf)[0] != "drain":
                        break
                except RuntimeError as exc:  # another thread had it at that moment: again
                    assert "in use" in str(exc)
                    refused.append("owner")
                except _qjs.JSError:
                    break
            finished.set()

        def intruder(kind):
            while not finished.is_set():
                try:
                    if kind == "eval":
                        ctx.eval("[1, 2, 3].map((x) => ({x})).length")
                    else:
                        ctx.run(time.monotonic() + 0.001, math.inf)
                except RuntimeError as exc:
                    assert "in use" in str(exc)
                    refused.append(kind)
                except _qjs.JSError:
                    pass

        def loop_side():
            while not finished.is_set():
                for call_id, _, _, _ in ch.take_calls():
                    ch.post(call_id, True, "1", False)
                    ch.post(call_id, True, "again", True)  # answered twice: the second is ignored
                    ch.post(call_id + 100000, False, "{}", False)  # an id never used
                if finished.wait(0.001):
                    break
            ch.interrupt()

        threads = [threading.Thread(target=owner), threading.Thread(target=intruder, args=("eval",)),
                   threading.Thread(target=intruder, args=("run",)), threading.Thread(target=loop_side)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        print("ok", len(refused) > 0)
        """
    )
    assert out.strip() == "ok True"


def test_interrupts_and_disarms_from_other_threads_at_any_point() -> None:
    out = _isolated(
        """
        import random
        rng = random.Random(7)
        for i in range(40):
            ctx = prepare_context()
            ch = _qjs.Channel()
            stop = threading.Event()

            def meddle():
                while not stop.is_set():
                    if rng.random() < 0.5:
                        ch.interrupt()
                    else:
                        ctx.disarm()
                    time.sleep(0)

            t = threading.Thread(target=meddle)
            t.start()
            try:
                ctx.start(ch, "(async function __cm_main() { let s = 0; for (let i = 0; i < 1e5; i++) s += i;"
                          " await tools.x({}) })", 1 << 20, 10, "[]", "[]", "[]")
                ctx.run(time.monotonic() + 0.05, math.inf)
            except _qjs.JSError as exc:
                assert "interrupted" in str(exc)
            stop.set()
            t.join(60)
            ctx.disarm()
            ctx.take_output()
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_a_stack_limit_beyond_the_threads_stack_is_an_error_not_a_crash() -> None:
    # 64 MiB of JS stack asked for on a thread with 512 KiB: unbounded recursion must end in
    # JS's own RangeError, within the stack this thread has.
    out = _isolated(
        """
        results = []

        def deep():
            ctx = _qjs.Context(prelude=False)
            ctx.set_limits(64 << 20, 64 << 20)
            try:
                ctx.eval("function f(n) { return f(n + 1) + 1 } f(0)")
                results.append("returned")
            except _qjs.JSError as exc:
                results.append(str(exc).split("\\n")[0])

        threading.stack_size(512 * 1024)
        t = threading.Thread(target=deep)
        t.start()
        t.join(60)
        print(results)
        """
    )
    assert "RangeError" in out and "stack" in out
