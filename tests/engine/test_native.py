"""The engine functions called through ctypes (`codemode.engine._native`): the prelude as bytecode."""

from __future__ import annotations

from typing import Any

import pytest
import quickjs

from codemode.engine import _native, _program
from codemode.engine._program import PreparedContext

pytestmark = pytest.mark.anyio


def test_the_engine_functions_load_here() -> None:
    # CI runs the PyPI wheel on CPython: the fast paths must be the ones tested.
    assert _native.load() is not None


def test_compiled_script_runs_in_a_fresh_context() -> None:
    native = _native.load()
    assert native is not None
    code = native.compile("globalThis.answer = [1, 2, 3].reduce((a, b) => a + b, 36);", "<test>")
    assert code is not None
    ctx = quickjs.Context()
    assert native.run(ctx, code)
    assert ctx.eval("answer") == 42


def test_a_script_that_does_not_compile_gives_none_and_one_that_throws_gives_false() -> None:
    native = _native.load()
    assert native is not None
    assert native.compile("let = ;", "<test>") is None
    throws = native.compile("throw new Error('boom')", "<test>")
    assert throws is not None
    assert not native.run(quickjs.Context(), throws)


def test_prepared_context_loads_the_prelude_as_bytecode() -> None:
    prepared = PreparedContext.create()
    # Compiled without its source: a prelude function shows none, like a built-in one.
    assert prepared.ctx.eval("String(print)") == "function __cm_print() {\n    [native code]\n}"
    native, code = _program._prelude_bytecode()
    assert native is not None and code is not None


def test_prepared_context_falls_back_to_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    native = _native.load()
    assert native is not None
    monkeypatch.setattr(_program, "_PRELUDE_BYTECODE", (native, native.compile("throw 1", "<bad>")))
    assert _program.PreparedContext.create().ctx.eval("typeof tools") == "object"
    monkeypatch.setattr(_program, "_PRELUDE_BYTECODE", (None, None))
    assert _program.PreparedContext.create().ctx.eval("typeof tools") == "object"


async def test_programs_run_the_same_from_the_source(monkeypatch: pytest.MonkeyPatch, make_host: Any) -> None:
    async def results() -> list[str]:
        async with make_host() as (host, _probe):
            out = []
            for source in (
                "print(1 + 1)",
                "const r = await tools.read_file({path: 'nope.txt'}).catch((e) => e.code); print(r)",
                "null.x",
            ):
                result = await host.run_code(source)
                out.append(result.text)
            return out

    compiled = await results()
    assert compiled[0].startswith("2") and "not_found" in compiled[1] and "TypeError" in compiled[2]
    monkeypatch.setattr(_program, "_PRELUDE_BYTECODE", (None, None))
    assert await results() == compiled
