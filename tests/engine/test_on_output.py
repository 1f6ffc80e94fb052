"""`on_output`: a program's printed text handed to the caller as the host collects it, on the
event loop's thread, in order, once (a first stretch that starts over is not streamed twice)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from codemode import Host
from codemode.engine import _qjs
from codemode.engine._text import prepare_context

pytestmark = pytest.mark.anyio


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    (tmp_path / "ws").mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state") as opened:
        yield opened


async def _ready() -> None:
    """Wait until the keeper has a context ready (the first stretch runs only on one)."""
    prepare_context()
    with anyio.fail_after(30):
        while not _qjs.keeper_stats()["ready"]:
            await anyio.sleep(0.001)


async def test_pieces_come_in_order_on_the_loop_thread_before_the_end(host: Host) -> None:
    pieces: list[str] = []
    threads: set[int] = set()
    streamed_a = anyio.Event()

    def hook(text: str) -> None:
        pieces.append(text)
        threads.add(threading.get_ident())
        if "a\n" in "".join(pieces):
            streamed_a.set()

    @host.tool(name="wait_for_a")
    async def wait_for_a() -> str:
        """Return once the first line was streamed."""
        with anyio.fail_after(30):
            await streamed_a.wait()
        return "seen"

    result = await host.run_code(
        "print('a'); print(await tools.wait_for_a()); await sleep(0); print('b')", on_output=hook
    )
    assert result.ok, result.text
    assert "".join(pieces) == result.text == "a\nseen\nb\n"
    assert threads == {threading.get_ident()}


async def test_a_first_stretch_that_starts_over_is_streamed_once(host: Host) -> None:
    pieces: list[str] = []
    await _ready()  # the first stretch runs on a ready context; the store call starts it over
    result = await host.run_code(
        "print('before'); await store.set('k', 1); print('after')", on_output=pieces.append
    )
    assert result.ok, result.text
    assert "".join(pieces) == "before\nafter\n"


async def test_a_hook_that_raises_changes_nothing(host: Host) -> None:
    def hook(text: str) -> None:
        raise RuntimeError("display broke")

    result = await host.run_code("print('x'); await sleep(0); print('y')", on_output=hook)
    assert result.ok and result.text == "x\ny\n"
