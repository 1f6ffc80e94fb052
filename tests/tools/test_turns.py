"""The session's line of writers (`WriterTurn`): places in call order, a writer waits for every
place before it, leaving (also by cancellation) lets the ones behind go on."""

from __future__ import annotations

import anyio
import pytest

from codemode.tools import Place, WriterTurn

pytestmark = pytest.mark.anyio


async def test_a_writer_waits_for_every_place_before_it_in_order() -> None:
    turn = WriterTurn()
    order: list[str] = []
    first, second, third = turn.enter(), turn.enter(), turn.enter()

    async def write(name: str, place: Place) -> None:
        await place.wait()
        order.append(name)
        place.leave()

    async with anyio.create_task_group() as tg:
        tg.start_soon(write, "third", third)
        tg.start_soon(write, "second", second)
        await anyio.wait_all_tasks_blocked()
        assert order == [] and len(turn) == 3
        first.leave()
    assert order == ["second", "third"] and len(turn) == 0


async def test_a_cancelled_wait_leaves_the_line() -> None:
    turn = WriterTurn()
    running, cancelled, last = turn.enter(), turn.enter(), turn.enter()
    with anyio.move_on_after(0):
        try:
            await cancelled.wait()
        finally:
            cancelled.leave()
    running.leave()
    with anyio.fail_after(5):
        await last.wait()
    last.leave()
    cancelled.leave()  # idempotent
    assert len(turn) == 0
