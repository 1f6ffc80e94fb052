"""Huge or deep trees where the host cleans up: a session's ``$TMPDIR`` and its trash inbox are
command-writable, and the host removes both when the session closes or the host does. A command
can leave there hundreds of thousands of names or a directory thousands of levels deep: removal
runs in a worker thread (the event loop keeps serving), by a loop over directory fds (no Python
recursion), and one session's failed cleanup never skips the rest of the host's close."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from codemode.sandbox import remove_tree_at, session_inbox
from codemode.sandbox._landlock import landlock_status
from tests.host_support import MakeHost

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(landlock_status().abi < 4, reason="confined commands need Landlock ABI >= 4"),
]

_FILES = 60_000
_DEPTH = 3_000

_MANY = f"""python3 -c "
import os
os.chdir(os.environ['CODEMODE_TRASH_INBOX'])
os.mkdir('.junk'); os.chdir('.junk')
for i in range({_FILES}): open(str(i), 'w').close()
print('made')" """

_DEEP = f"""python3 -c "
import os
os.chdir(os.environ['CODEMODE_TRASH_INBOX'])
for i in range({_DEPTH}): os.mkdir('a'); os.chdir('a')
open('f', 'w').close(); os.symlink('/etc', 'out')
print('made')" """


async def test_closing_a_session_with_many_files_in_its_inbox_keeps_the_loop_serving(
    make_host: MakeHost,
) -> None:
    async with make_host(handoff_seconds=None) as (host, _probe):
        result = await host.call_tool("bash", {"command": _MANY, "timeout_seconds": 300}, session_id="s1")
        assert "made" in result.text, result.text
        temp = Path(host._sessions.temp_dirs["s1"])
        inbox = session_inbox(temp)
        assert len(os.listdir(inbox / ".junk")) == _FILES
        # The temp dir goes first, then the inbox: a tick of the loop that sees the one gone and
        # the other still there ran while the inbox was being removed.
        seen_mid_removal = anyio.Event()
        closed = anyio.Event()

        async def tick() -> None:
            while not closed.is_set():
                if not temp.exists() and inbox.exists():
                    seen_mid_removal.set()
                await anyio.sleep(0)

        async with anyio.create_task_group() as group:
            group.start_soon(tick)
            await host.close_session("s1")
            closed.set()
        assert seen_mid_removal.is_set(), "the loop did not run while the inbox was removed"
        assert not temp.exists() and not inbox.exists()


async def test_a_tree_thousands_deep_in_an_inbox_does_not_break_the_host_close(
    make_host: MakeHost,
) -> None:
    async with make_host(handoff_seconds=None) as (host, _probe):
        result = await host.call_tool("bash", {"command": _DEEP, "timeout_seconds": 300}, session_id="s1")
        assert "made" in result.text, result.text
        other = await host.call_tool("bash", {"command": "echo other > $TMPDIR/x"}, session_id="s2")
        assert not other.is_error, other.text
        temps = [Path(host._sessions.temp_dirs[s]) for s in ("s1", "s2")]
    # __aexit__ raised no RecursionError, and every session's dirs are gone, the deep one too.
    for temp in temps:
        assert not temp.exists() and not session_inbox(temp).exists()
    assert Path("/etc/passwd").exists()


def test_remove_tree_at_removes_deep_and_wide_trees_without_following_links(tmp_path: Path) -> None:
    top = tmp_path / "t"
    deep = top / "d"
    deep.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept\n")
    level = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(_DEPTH):  # deeper than PATH_MAX: made by dir fds
        os.mkdir("a", dir_fd=level)
        inner = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=level)
        os.close(level)
        level = inner
    os.symlink(outside, "link", dir_fd=level)
    os.mkfifo("fifo", dir_fd=level)
    os.close(level)
    (top / "wide").mkdir()
    for i in range(2_000):
        (top / "wide" / str(i)).write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree_at(fd, "t")
        remove_tree_at(fd, "t")  # missing is fine
    finally:
        os.close(fd)
    assert not top.exists()
    assert (outside / "keep").read_text() == "kept\n"
