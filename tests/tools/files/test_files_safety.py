"""The file tools under attack: swapped components, pseudo-files, links into the state dir.

Real files, real threads racing the tools, no mocks. Every test runs with openat2 and with the
O_NOFOLLOW openat walk. A background loop flips a path component while a tool runs many times;
whatever the interleaving, nothing may appear or change outside the roots, nothing of the state
dir may be read, and no host thread may be left blocked.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest

import codemode.tools.files._located as files_module
from codemode.errors import SandboxDenied, ToolError
from codemode.sandbox._paths import locate_readable, locate_writable
from codemode.sandbox._policy import SandboxMode, SandboxPolicy
from codemode.tools._model import ToolContext, ToolResult
from codemode.tools.files import EditFileArgs, ReadFileArgs, WriteFileArgs, edit_file, read_file, write_file

ROUNDS = 400


# Every test runs with openat2 (where the kernel has it) and with the O_NOFOLLOW openat walk.
pytestmark = pytest.mark.usefixtures("resolver")


@pytest.fixture(autouse=True)
def tight_switching() -> Iterator[None]:
    """Switch threads often, so the flipping loop lands between the tool's steps."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


@dataclass
class Env:
    workspace: Path
    outside: Path
    state: Path
    ctx: ToolContext

    def mode(self, mode: SandboxMode) -> ToolContext:
        policy = self.ctx.policy.with_mode(mode)
        return ToolContext(session_id="s", workspace=self.workspace, policy=policy, archive=cast(Any, None))


@pytest.fixture
def env(tmp_path: Path) -> Env:
    workspace, outside, state = tmp_path / "ws", tmp_path / "outside", tmp_path / "state"
    for directory in (workspace, outside, state):
        directory.mkdir()
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, writable_roots=(workspace,), protected=(state,))
    ctx = ToolContext(session_id="s", workspace=workspace, policy=policy, archive=cast(Any, None))
    return Env(workspace, outside, state, ctx)


def everything_under(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


class Flipper:
    """A thread that keeps swapping one path between two states until stopped."""

    def __init__(self, *states: Callable[[], None]) -> None:
        self.states = states
        self.flips = 0
        self.first = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for make in self.states:
                try:
                    make()
                except OSError:
                    pass  # a tool's directory or temp file is in the way: try the next state
                self.flips += 1
                self.first.set()

    def __enter__(self) -> Flipper:
        self.thread.start()
        self.first.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def as_dir(path: Path) -> Callable[[], None]:
    def make() -> None:
        remove(path)
        path.mkdir()

    return make


def as_symlink(path: Path, target: Path) -> Callable[[], None]:
    def make() -> None:
        remove(path)
        path.symlink_to(target)

    return make


def as_file(path: Path, text: str) -> Callable[[], None]:
    def make() -> None:
        tmp = path.with_name(path.name + ".flip")
        tmp.write_text(text)
        os.replace(tmp, path)

    return make


def attempt(call: Callable[[], ToolResult]) -> ToolResult | ToolError:
    try:
        return call()
    except ToolError as exc:
        return exc


# ---------------------------------------------------------------------------- races


def test_directory_swapped_for_a_symlink_never_creates_anything_outside(env: Env) -> None:
    a = env.workspace / "a"
    outcomes: list[ToolResult | ToolError] = []
    with Flipper(as_dir(a), as_symlink(a, env.outside)) as flipper:
        for _ in range(ROUNDS):
            outcomes.append(
                attempt(lambda: write_file(WriteFileArgs(path="a/b/c.txt", content="x"), env.ctx))
            )
    assert flipper.flips > 0
    assert everything_under(env.outside) == []
    for outcome in outcomes:
        assert isinstance(outcome, ToolResult | SandboxDenied) or "a/b/c.txt" in outcome.message


def test_deeper_component_swapped_never_creates_anything_outside(env: Env) -> None:
    (env.workspace / "a").mkdir()
    b = env.workspace / "a" / "b"
    with Flipper(as_dir(b), as_symlink(b, env.outside)):
        for _ in range(ROUNDS):
            attempt(lambda: write_file(WriteFileArgs(path="a/b/c/d.txt", content="x"), env.ctx))
    assert everything_under(env.outside) == []


def test_final_file_swapped_for_a_symlink_never_changes_the_target_outside(env: Env) -> None:
    victim = env.outside / "victim.txt"
    victim.write_text("safe\n")
    f = env.workspace / "f.txt"
    with Flipper(as_file(f, "safe\n"), as_symlink(f, victim)):
        for i in range(ROUNDS):
            if i % 2:
                attempt(lambda: write_file(WriteFileArgs(path="f.txt", content="pwned\n"), env.ctx))
            else:
                attempt(
                    lambda: edit_file(EditFileArgs(path="f.txt", old_text="safe", new_text="pwned"), env.ctx)
                )
    assert victim.read_text() == "safe\n"
    assert everything_under(env.outside) == ["victim.txt"]


def test_final_file_swapped_for_a_link_into_the_state_dir_is_never_read(env: Env) -> None:
    secret = env.state / "secret.txt"
    secret.write_text("SECRET\n")
    f = env.workspace / "f.txt"
    reads = 0
    with Flipper(as_file(f, "public\n"), as_symlink(f, secret)):
        for _ in range(ROUNDS):
            outcome = attempt(lambda: read_file(ReadFileArgs(path="f.txt"), env.ctx))
            if isinstance(outcome, ToolResult):
                reads += 1
                assert outcome.structured_content["content"] == "public\n"
            else:
                assert "SECRET" not in outcome.message
    assert secret.read_text() == "SECRET\n"


def test_file_swapped_for_a_fifo_never_blocks_a_thread(env: Env) -> None:
    f = env.workspace / "f.txt"

    def as_fifo() -> None:
        tmp = env.workspace / "f.fifo"
        os.mkfifo(tmp)
        os.replace(tmp, f)

    threads = threading.active_count()
    done = threading.Event()

    def reader() -> None:
        for _ in range(3 * ROUNDS):  # the old stat-then-open blocked within a few hundred
            outcome = attempt(lambda: read_file(ReadFileArgs(path="f.txt"), env.ctx))
            assert isinstance(outcome, ToolResult | ToolError)
        done.set()

    with Flipper(as_file(f, "text\n"), as_fifo):
        worker = threading.Thread(target=reader, daemon=True)
        worker.start()
        worker.join(timeout=120)  # a hang guard only: the reads take milliseconds
    assert done.is_set(), "read_file blocked on a FIFO"
    assert threading.active_count() == threads


def test_file_replaced_by_a_symlink_after_resolution_is_not_followed(env: Env) -> None:
    # The deterministic TOCTOU: resolve, then swap, then open.
    secret = env.state / "secret.txt"
    secret.write_text("SECRET\n")
    victim = env.outside / "victim.txt"
    victim.write_text("safe\n")
    f = env.workspace / "f.txt"
    f.write_text("public\n")
    with locate_readable(env.ctx.policy, env.workspace, "f.txt") as found:
        f.unlink()
        f.symlink_to(secret)
        with pytest.raises(ToolError) as info:
            files_module._open_located(found, "f.txt", "read")
        assert "changed while it was being opened" in info.value.message and "Try again" in info.value.message
    f.unlink()
    f.write_text("public\n")
    with locate_writable(env.ctx.policy, env.workspace, "f.txt") as found:
        assert found.st is not None
        f.unlink()
        f.symlink_to(victim)
        with pytest.raises(ToolError) as info:
            files_module._atomic_write(found, b"pwned\n", "f.txt", found.st)
        assert "changed while writing" in info.value.message and "Nothing was written" in info.value.message
    assert victim.read_text() == "safe\n"
    assert f.is_symlink()
    assert [name for name in os.listdir(env.workspace) if "codemode-tmp" in name] == []


def test_directory_replaced_by_a_symlink_after_resolution_is_not_followed(env: Env) -> None:
    a = env.workspace / "a"
    a.mkdir()
    with locate_writable(env.ctx.policy, env.workspace, "a/b/c.txt") as found:
        assert found.missing_dirs == ("b",)
        a.rename(env.workspace / "old-a")
        a.symlink_to(env.outside)
        files_module._atomic_write(found, b"x", "a/b/c.txt", None)
    # Written into the directory that was checked (now named old-a), nothing outside.
    assert (env.workspace / "old-a" / "b" / "c.txt").read_text() == "x"
    assert everything_under(env.outside) == []
    with locate_writable(env.ctx.policy, env.workspace, "old-a/n/c.txt") as found:
        (env.workspace / "old-a" / "n").symlink_to(env.outside)  # appears after the check
        with pytest.raises(ToolError) as info:
            files_module._atomic_write(found, b"x", "old-a/n/c.txt", None)
        assert "changed while writing" in info.value.message
    assert everything_under(env.outside) == []


def test_a_file_created_meanwhile_is_not_overwritten(env: Env) -> None:
    with locate_writable(env.ctx.policy, env.workspace, "new.txt") as found:
        (env.workspace / "new.txt").write_text("theirs\n")
        with pytest.raises(ToolError) as info:
            files_module._atomic_write(found, b"mine\n", "new.txt", None)
    assert "something else created it" in info.value.message
    assert (env.workspace / "new.txt").read_text() == "theirs\n"


# ---------------------------------------------------------------------------- pseudo-files


def special_paths(env: Env) -> list[str]:
    fifo = env.workspace / "pipe"
    os.mkfifo(fifo)
    paths = [str(fifo), "/dev/zero", "/dev/urandom", "/proc/self/status", "/proc/self/environ"]
    if os.path.exists("/proc/kmsg"):
        paths.append("/proc/kmsg")
    sys_file = next(
        (p for p in ("/sys/kernel/uevent_seqnum", "/sys/devices/system/cpu/online") if os.path.isfile(p)),
        None,
    )
    if sys_file is not None:
        paths.append(sys_file)
    return paths


def test_pseudo_files_devices_and_fifos_fail_promptly_without_blocking(env: Env) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(env.workspace / "s.sock"))
    paths = [*special_paths(env), str(env.workspace / "s.sock")]
    full = env.mode(SandboxMode.FULL_ACCESS)
    threads = threading.active_count()
    tasks = set(os.listdir("/proc/self/task"))
    native: list[int] = []
    errors: dict[str, list[str]] = {}

    def run() -> None:
        native.append(threading.get_native_id())
        for path in paths:
            for outcome in (
                attempt(partial(read_file, ReadFileArgs(path=path), env.ctx)),
                attempt(partial(edit_file, EditFileArgs(path=path, old_text="a", new_text="b"), full)),
                attempt(partial(write_file, WriteFileArgs(path=path, content="x"), full)),
            ):
                assert isinstance(outcome, ToolError), path
                errors.setdefault(path, []).append(outcome.message)

    try:
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(timeout=120)  # a hang guard only
        assert not worker.is_alive(), "a file tool blocked on a special file"
    finally:
        sock.close()
    assert threading.active_count() == threads
    # No kernel thread was left behind either (the worker's own may still be exiting after join).
    assert set(os.listdir("/proc/self/task")) - {str(native[0])} <= tasks
    assert set(errors) == set(paths)
    for path, messages in errors.items():
        for message in messages:
            assert "bash" in message, message
            if path.startswith(("/proc", "/sys")):
                assert "pseudo file system" in message
            else:
                assert "not a regular file" in message
        shown = os.path.relpath(path, env.workspace) if path.startswith(str(env.workspace)) else path
        assert shown in messages[0] or "/proc/" in messages[0]
    assert "a FIFO (named pipe)" in errors[str(env.workspace / "pipe")][0]
    assert "a character device" in errors["/dev/zero"][0]
    assert "a socket" in errors[str(env.workspace / "s.sock")][0]


def test_kmsg_is_refused_and_keeps_the_kernel_log(env: Env) -> None:
    if not os.path.exists("/proc/kmsg"):
        pytest.skip("no /proc/kmsg")
    with pytest.raises(ToolError) as info:
        read_file(ReadFileArgs(path="/proc/kmsg"), env.ctx)
    error = info.value
    assert error.message.startswith("/proc/kmsg is a file of procfs, a kernel pseudo file system")
    assert error.data == {"path": "/proc/kmsg", "kind": "pseudo", "file_system": "procfs"}


def test_a_symlink_to_a_device_is_refused_by_what_it_points_to(env: Env) -> None:
    (env.workspace / "zero").symlink_to("/dev/zero")
    (env.workspace / "proc").symlink_to("/proc/self")
    with pytest.raises(ToolError, match="a character device"):
        read_file(ReadFileArgs(path="zero"), env.ctx)
    with pytest.raises(ToolError, match="procfs"):
        read_file(ReadFileArgs(path="proc/status"), env.ctx)


# ---------------------------------------------------------------------------- the state directory


@pytest.mark.parametrize("how", ["file link", "dir link", "relative dir link", "dangling"])
def test_links_into_the_state_dir_are_refused_for_every_tool(env: Env, how: str) -> None:
    secret = env.state / "secret.txt"
    secret.write_text("SECRET\n")
    if how == "file link":
        (env.workspace / "s").symlink_to(secret)
        path = "s"
    elif how == "dir link":
        (env.workspace / "s").symlink_to(env.state)
        path = "s/secret.txt"
    elif how == "relative dir link":
        (env.workspace / "s").symlink_to("../state")
        path = "s/secret.txt"
    else:
        (env.workspace / "s").symlink_to(env.state / "new.txt")
        path = "s"
    other = path + "-sibling" if how == "dir link" else "s/../state/x"
    for mode in SandboxMode:
        ctx = env.mode(mode)
        for outcome in (
            attempt(partial(read_file, ReadFileArgs(path=path), ctx)),
            attempt(partial(write_file, WriteFileArgs(path=path, content="pwned"), ctx)),
            attempt(partial(write_file, WriteFileArgs(path=other, content="pwned"), ctx)),
            attempt(partial(edit_file, EditFileArgs(path=path, old_text="SECRET", new_text="pwned"), ctx)),
        ):
            assert isinstance(outcome, ToolError)
            assert "SECRET" not in outcome.message
            if isinstance(outcome, SandboxDenied) and outcome.data["reason"] == "protected":
                assert "state directory" in outcome.message
    assert everything_under(env.state) == ["secret.txt"]
    assert secret.read_text() == "SECRET\n"


def test_reading_through_links_that_stay_inside_still_works(env: Env) -> None:
    (env.workspace / "src" / "pkg").mkdir(parents=True)
    (env.workspace / "src" / "pkg" / "m.py").write_text("x = 1\n")
    (env.workspace / "lib").symlink_to("src/pkg")
    (env.workspace / "abs").symlink_to(env.workspace / "src")
    (env.outside / "back").symlink_to(env.workspace / "src")
    (env.workspace / "out-and-back").symlink_to(env.outside / "back")
    for path in ("lib/m.py", "abs/pkg/m.py", "out-and-back/pkg/m.py", "lib/../pkg/m.py"):
        data = read_file(ReadFileArgs(path=path), env.ctx).structured_content
        assert data["content"] == "x = 1\n" and data["path"] == str(env.workspace / "src" / "pkg" / "m.py")
    edit_file(EditFileArgs(path="out-and-back/pkg/m.py", old_text="1", new_text="2"), env.ctx)
    write_file(WriteFileArgs(path="lib/new/n.py", content="y\n"), env.ctx)
    assert (env.workspace / "src" / "pkg" / "m.py").read_text() == "x = 2\n"
    assert (env.workspace / "src" / "pkg" / "new" / "n.py").read_text() == "y\n"
    assert (env.workspace / "lib").is_symlink()
