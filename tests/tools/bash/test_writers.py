"""Writers one at a time (issue 31 item 4): within a session, a bash run that is not read-only,
``write_file`` and ``edit_file`` wait for the writers before it; read-only runs never wait; a
background run holds the turn only until it has started. A real Host, real commands.

Order is read from what the runs record themselves: writers append ``start K`` and ``end K`` to a
log; runs that must be running at the same moment each block reading a FIFO of their own, and
the test opens those FIFOs for writing only once every one of them has a reader (a run that
waited for another would never get there: the helper gives up after a while and the test fails).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from codemode import Host, RunResult
from codemode.policy import CommandPolicy

pytestmark = pytest.mark.anyio

WRITERS = """
await Promise.all([1, 2, 3].map((k) =>
  tools.bash({command: `sh -c 'echo start ${k} >> log; sleep 0.3; echo end ${k} >> log'`})));
"""


def make_host(tmp_path: Path, **kw: Any) -> Host:
    (tmp_path / "ws").mkdir(exist_ok=True)
    return Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", **kw)


async def run(host: Host, source: str, session_id: str | None = None) -> RunResult:
    with anyio.fail_after(60):
        result = await host.run_code(source, session_id=session_id)
    assert result.error is None, result
    return result


def fifos(workspace: Path, *names: str) -> list[Path]:
    workspace.mkdir(exist_ok=True)
    paths = [workspace / name for name in names]
    for path in paths:
        os.mkfifo(path)
    return paths


def feed_when_all_read(paths: Sequence[Path], give_up_after: float = 30.0) -> None:
    """Once every FIFO has a reader at the same moment, write its name into it and close it.

    Raises:
        AssertionError: They never all had a reader at once (one run waited for another).
    """
    fds: dict[Path, int] = {}
    deadline = time.monotonic() + give_up_after
    try:
        while len(fds) < len(paths):
            for path in paths:
                if path in fds:
                    continue
                try:
                    fds[path] = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as exc:
                    if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                        raise
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"only {sorted(p.name for p in fds)} of {len(paths)} had a reader at once"
                )
            time.sleep(0.01)
        for path, fd in fds.items():
            os.write(fd, f"{path.name}\n".encode())
    finally:
        for fd in fds.values():
            os.close(fd)


def log_lines(tmp_path: Path) -> list[str]:
    return (tmp_path / "ws" / "log").read_text().splitlines()


async def test_three_writers_run_one_at_a_time_in_the_order_they_were_called(tmp_path: Path) -> None:
    async with make_host(tmp_path) as host:
        await run(host, WRITERS)
    assert log_lines(tmp_path) == ["start 1", "end 1", "start 2", "end 2", "start 3", "end 3"]


async def test_three_readers_run_at_once(tmp_path: Path) -> None:
    paths = fifos(tmp_path / "ws", "r1", "r2", "r3")
    results: list[RunResult] = []

    async def program() -> None:
        results.append(
            await run(
                host,
                "const rs = await Promise.all([1, 2, 3].map((k) => tools.bash({command: `cat r${k}`})));\n"
                "print(rs.map((r) => r.stdout.excerpt.trim()).join(' '));",
            )
        )

    async with make_host(tmp_path) as host, anyio.create_task_group() as tg:
        tg.start_soon(program)
        await anyio.to_thread.run_sync(feed_when_all_read, paths)
    assert results[0].text.strip() == "r1 r2 r3"


async def test_a_reader_does_not_wait_for_a_running_writer(tmp_path: Path) -> None:
    paths = fifos(tmp_path / "ws", "gate", "data")
    results: list[RunResult] = []

    async def program() -> None:
        source = (
            "const writer = tools.bash({command: \"sh -c 'cat gate > copied'\"});\n"
            'const reader = await tools.bash({command: "cat data"});\n'
            "await writer;\n"
            "print(reader.stdout.excerpt.trim());"
        )
        results.append(await run(host, source))

    async with make_host(tmp_path) as host, anyio.create_task_group() as tg:
        tg.start_soon(program)
        await anyio.to_thread.run_sync(feed_when_all_read, paths)
    assert results[0].text.strip() == "data"
    assert (tmp_path / "ws" / "copied").read_text() == "gate\n"


async def test_write_file_and_edit_file_wait_for_the_writer_before_them(tmp_path: Path) -> None:
    source = """
await Promise.all([
  tools.bash({command: "sh -c 'sleep 0.3; echo A >> written; echo old > edited'"}),
  tools.write_file({path: "written", content: "B\\n"}),
  tools.edit_file({path: "edited", old_text: "old", new_text: "new"}),
]);
"""
    async with make_host(tmp_path) as host:
        await run(host, source)
    assert (tmp_path / "ws" / "written").read_text() == "B\n"  # written after the command's A
    assert (tmp_path / "ws" / "edited").read_text() == "new\n"  # the command made it first


async def test_a_background_run_holds_the_turn_only_until_it_has_started(tmp_path: Path) -> None:
    paths = fifos(tmp_path / "ws", "background", "after")
    results: list[RunResult] = []

    async def program() -> None:
        source = (
            "const bg = await tools.bash({command: \"sh -c 'cat background > bg.out'\", run_in_background: true});\n"
            "const after = await tools.bash({command: \"sh -c 'cat after'\"});\n"
            "const done = await tools.bash({action: 'wait', process_id: bg.process_id});\n"
            "print(after.stdout.excerpt.trim(), done.exit_code);"
        )
        results.append(await run(host, source))

    async with make_host(tmp_path) as host, anyio.create_task_group() as tg:
        tg.start_soon(program)
        await anyio.to_thread.run_sync(feed_when_all_read, paths)
    assert results[0].text.strip() == "after 0"


async def test_sessions_have_lines_of_their_own(tmp_path: Path) -> None:
    paths = fifos(tmp_path / "ws", "one", "two")

    async with make_host(tmp_path) as host, anyio.create_task_group() as tg:
        for name in ("one", "two"):
            tg.start_soon(run, host, f"await tools.bash({{command: \"sh -c 'cat {name}'\"}});", f"s-{name}")
        await anyio.to_thread.run_sync(feed_when_all_read, paths)


async def test_with_serialize_writers_off_writers_run_at_once(tmp_path: Path) -> None:
    # Each writer waits until all three have started: only runs side by side get past it.
    source = """
await Promise.all([1, 2, 3].map((k) => tools.bash({command:
  `sh -c 'echo start ${k} >> log; until [ $(grep -c start log) -ge 3 ]; do sleep 0.02; done; echo end ${k} >> log'`,
  timeout_seconds: 30})));
"""
    async with make_host(tmp_path, command_policy=CommandPolicy(serialize_writers=False)) as host:
        await run(host, source)
    assert [line.split()[0] for line in log_lines(tmp_path)] == ["start"] * 3 + ["end"] * 3


async def test_a_refused_writer_leaves_the_line(tmp_path: Path) -> None:
    source = """
const refused = await tools.bash({command: "sh -c 'echo x' [REDACTED:token]"}).catch((e) => e.code);
await tools.bash({command: "sh -c 'echo after >> log'"});
print(refused);
"""
    async with make_host(tmp_path) as host:
        result = await run(host, source)
    assert result.text.strip() == "redacted_value"
    assert log_lines(tmp_path) == ["after"]


@pytest.mark.parametrize("serialize", [True, False])
async def test_bash_guidance_says_so_only_when_on(tmp_path: Path, serialize: bool) -> None:
    async with make_host(tmp_path, command_policy=CommandPolicy(serialize_writers=serialize)) as host:
        result = await run(host, 'print(JSON.stringify(await describeTool("bash")));')
    assert ("one at a time, in call order" in result.text) is serialize
