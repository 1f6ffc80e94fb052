"""The engine functions the binding does not wrap, called through ctypes: the one place that does.

The quickjs-ng binding exports the whole engine from its shared object. Two things need
functions it does not wrap:

* the watchdog stops a running program from another thread with ``JS_SetInterruptHandler``
  (see `_watchdog`);
* a fresh context loads the prelude as bytecode compiled once per process
  (``JS_Eval`` with ``JS_EVAL_FLAG_COMPILE_ONLY``, ``JS_WriteObject``, then per context
  ``JS_ReadObject`` and ``JS_EvalFunction``) instead of parsing its source again. Measured on
  the reference machine (bench/bench_engine.py): preparing a context 1.14 ms from source,
  0.22 ms from bytecode; a fresh context is made for every program, so that was most of a
  short program's run.

Both need the binding's ``_quickjs.Context`` layout (`RuntimeData`) to find the engine's
runtime and context pointers. `load` checks that layout, the symbols and a round trip once
per process; where anything does not match (another binding version, another interpreter),
`load` returns None and callers take the binding's own paths.

The bytecode is trusted input by construction: this process compiles it from the packaged
prelude and only this process reads it (the engine warns against reading bytecode from
anyone else). The bytecode calls go through ``ctypes.PyDLL``, which keeps the GIL: the
binding's finalizers of Python callables expect to hold it whenever its own entry points
are not running JavaScript.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import quickjs

_EVAL_FLAG_COMPILE_ONLY = 1 << 5
_WRITE_OBJ_BYTECODE = 1 << 0
_WRITE_OBJ_STRIP_SOURCE = 1 << 4  # function.toString() of a prelude function shows no source
_READ_OBJ_BYTECODE = 1 << 0
_TAG_EXCEPTION = 6


class RuntimeData(ctypes.Structure):
    """The binding's ``_quickjs.Context`` object (``RuntimeData`` in its module.c)."""

    _fields_ = [
        ("ob_refcnt", ctypes.c_ssize_t),
        ("ob_type", ctypes.c_void_p),
        ("runtime", ctypes.c_void_p),
        ("context", ctypes.c_void_p),
        ("has_time_limit", ctypes.c_int),
        ("time_limit", ctypes.c_long),  # clock_t: copied into interrupt_limit at each entry
        ("thread_state", ctypes.c_void_p),
        ("interrupt_start", ctypes.c_long),
        ("interrupt_limit", ctypes.c_long),  # what the running entry's handler compares with
        ("python_callables", ctypes.c_void_p),
    ]


class _Value(ctypes.Structure):
    """``JSValue`` on 64-bit platforms (no NaN boxing): a 64-bit payload and a tag."""

    _fields_ = [("u", ctypes.c_int64), ("tag", ctypes.c_int64)]


def view(ctx: quickjs.Context) -> RuntimeData:
    """The binding's data of ``ctx``, read in place (only valid while ``ctx`` lives)."""
    return RuntimeData.from_address(id(ctx))


class Native:
    """The engine functions, bound from the binding's shared object."""

    def __init__(self, path: str) -> None:
        free_threads = ctypes.CDLL(path)  # calls that may run while other threads hold the GIL
        set_handler = free_threads.JS_SetInterruptHandler
        set_handler.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        set_handler.restype = None
        self._set_interrupt_handler = set_handler
        get_opaque = free_threads.JS_GetRuntimeOpaque
        get_opaque.argtypes = [ctypes.c_void_p]
        get_opaque.restype = ctypes.c_void_p
        self.get_runtime_opaque = get_opaque
        self._stop_handler = ctypes.cast(get_opaque, ctypes.c_void_p).value

        holding_gil = ctypes.PyDLL(path)
        self._eval = holding_gil.JS_Eval
        self._eval.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_char_p,
            ctypes.c_int,
        ]
        self._eval.restype = _Value
        self._write = holding_gil.JS_WriteObject
        self._write.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), _Value, ctypes.c_int]
        self._write.restype = ctypes.c_void_p
        self._read = holding_gil.JS_ReadObject
        self._read.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
        self._read.restype = _Value
        self._eval_function = holding_gil.JS_EvalFunction
        self._eval_function.argtypes = [ctypes.c_void_p, _Value]
        self._eval_function.restype = _Value
        self._free_value = holding_gil.JS_FreeValue
        self._free_value.argtypes = [ctypes.c_void_p, _Value]
        self._free_value.restype = None
        self._free = holding_gil.js_free
        self._free.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._free.restype = None

    def interrupt(self, runtime: int) -> None:
        """Make the runtime's next interrupt check stop what it runs (any thread)."""
        self._set_interrupt_handler(runtime, self._stop_handler, None)

    def clear(self, runtime: int) -> None:
        """Remove the runtime's interrupt handler."""
        self._set_interrupt_handler(runtime, None, None)

    def compile(self, source: str, filename: str) -> bytes | None:
        """Compile a script in a scratch context; its bytecode, or None if it does not compile."""
        scratch = quickjs.Context()
        ctx = view(scratch).context
        encoded = source.encode("utf-8")
        function = self._eval(ctx, encoded, len(encoded), filename.encode(), _EVAL_FLAG_COMPILE_ONLY)
        if function.tag == _TAG_EXCEPTION:
            return None
        try:
            size = ctypes.c_size_t()
            buffer = self._write(
                ctx, ctypes.byref(size), function, _WRITE_OBJ_BYTECODE | _WRITE_OBJ_STRIP_SOURCE
            )
            if not buffer:
                return None
            try:
                return ctypes.string_at(buffer, size.value)
            finally:
                self._free(ctx, buffer)
        finally:
            self._free_value(ctx, function)

    def run(self, target: quickjs.Context, code: bytes) -> bool:
        """Run compiled script ``code`` in ``target``; False if it threw (the context is then spoilt).

        The script must not call into Python at its top level: the binding's entry point
        bookkeeping is not done for this call.
        """
        ctx = view(target).context
        function = self._read(ctx, code, len(code), _READ_OBJ_BYTECODE)
        if function.tag == _TAG_EXCEPTION:
            return False
        result = self._eval_function(ctx, function)  # takes the function's reference
        if result.tag == _TAG_EXCEPTION:
            return False
        self._free_value(ctx, result)
        return True


_LOCK = threading.Lock()
_CHECKED = False
_NATIVE: Native | None = None


def load() -> Native | None:
    """The engine functions, or None where this binding's layout or symbols differ (checked once)."""
    global _CHECKED, _NATIVE
    with _LOCK:
        if not _CHECKED:
            _NATIVE = _check()
            _CHECKED = True
    return _NATIVE


def _check() -> Native | None:
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    if quickjs.Context.__basicsize__ != ctypes.sizeof(RuntimeData):
        return None
    try:
        import _quickjs  # the binding's C module

        native = Native(_quickjs.__file__)
    except (ImportError, OSError, AttributeError):  # symbols hidden (a build without exports)
        return None
    ctx = quickjs.Context()
    data = view(ctx)
    if data.ob_type != id(quickjs.Context) or not data.runtime or not data.context or data.has_time_limit:
        return None
    if native.get_runtime_opaque(data.runtime) != id(ctx):
        return None
    code = native.compile("globalThis.__cm_check = [1, 2].map((x) => x * 21)[1];", "<check>")
    if code is None or not native.run(ctx, code) or ctx.eval("__cm_check") != 42:
        return None
    return native
