"""launch(): the one launch path, through the launcher (real processes, real fds, real cgroups)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode.errors import SandboxUnavailable
from codemode.sandbox import (
    LaunchSpec,
    Process,
    SandboxMode,
    SandboxPolicy,
    cgroup_kill,
    cgroup_members,
    cgroup_remove,
    cgroup_root,
    launch,
)
from tests.sandbox.sandbox_support import Dirs, needs_landlock

pytestmark = needs_landlock


@pytest.fixture
def devnull() -> Iterator[int]:
    fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    yield fd
    os.close(fd)


def _run(
    policy: SandboxPolicy, script: str, cwd: Path | str, devnull: int, cgroup: str | None = None
) -> tuple[int, str]:
    """``bash -c script`` through ``launch``; stdout and stderr together."""
    read, write = os.pipe2(os.O_CLOEXEC)
    try:
        proc = launch(
            LaunchSpec(
                ["/bin/bash", "-c", script],
                str(cwd),
                dict(os.environ),
                policy,
                stdio=(devnull, write, write),
                cgroup=cgroup,
            )
        )
    finally:
        os.close(write)
    out = b""
    while chunk := os.read(read, 65536):
        out += chunk
    os.close(read)
    return proc.wait(timeout=30), out.decode()


def test_launch_returns_a_process(dirs: Dirs, devnull: int) -> None:
    proc = launch(LaunchSpec(["true"], str(dirs.ws), dict(os.environ), dirs.policy(), stdio=(devnull,) * 3))
    assert isinstance(proc, Process)
    assert proc.wait(timeout=30) == 0 and proc.poll() == 0


def test_the_command_runs_in_cwd_confined_in_its_own_session(dirs: Dirs, devnull: int) -> None:
    code, out = _run(
        dirs.policy(),
        f"pwd; ps -o sid= -p $$; echo $$; touch {dirs.ws}/in && echo inside-ok; touch {dirs.out}/x || echo denied",
        dirs.ws,
        devnull,
    )
    lines = out.split()
    assert code == 0, out
    assert lines[0] == str(dirs.ws)
    assert lines[1] == lines[2]  # session id == its own pid: setsid
    assert "inside-ok" in out and "denied" in out
    assert not (dirs.out / "x").exists()


@pytest.mark.parametrize("mode", [SandboxMode.WORKSPACE_WRITE, SandboxMode.READ_ONLY])
def test_every_capability_set_is_empty(dirs: Dirs, devnull: int, mode: SandboxMode) -> None:
    code, out = _run(
        dirs.policy(mode), "grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status", dirs.ws, devnull
    )
    fields = dict(line.split(":\t") for line in out.strip().splitlines())
    assert code == 0, out
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert fields[name] == "0000000000000000", out
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2", out  # 2: filter mode


def test_full_access_keeps_the_hosts_capabilities(dirs: Dirs, devnull: int) -> None:
    code, out = _run(
        dirs.policy(SandboxMode.FULL_ACCESS),
        "grep -E '^(CapBnd|Seccomp):' /proc/self/status",
        dirs.ws,
        devnull,
    )
    mine = dict(
        line.split(":\t") for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line
    )
    theirs = dict(line.split(":\t") for line in out.strip().splitlines())
    assert code == 0 and theirs["CapBnd"] == mine["CapBnd"] and theirs["Seccomp"] == "0", out


def test_setuid_and_root_regain_nothing(dirs: Dirs, devnull: int) -> None:
    # A root shell started by the confined command: its bounding set stays empty (no_new_privs
    # plus an empty bounding set: execve grants nothing back).
    _code, out = _run(
        dirs.policy(),
        "bash -c 'grep CapEff /proc/self/status'; su -c id root 2>&1; echo su=$?",
        dirs.ws,
        devnull,
    )
    assert "CapEff:\t0000000000000000" in out
    assert "su=0" not in out, out


def test_the_command_gets_only_fds_0_to_2(dirs: Dirs, devnull: int) -> None:
    inheritable = os.open(os.devnull, os.O_RDONLY)  # not close-on-exec: would leak without the launcher
    os.set_inheritable(inheritable, True)
    try:
        script = "exec python3 -c 'import os; print(*sorted(map(int, os.listdir(\"/proc/self/fd\"))))'"
        code, out = _run(dirs.policy(), script, dirs.ws, devnull)
    finally:
        os.close(inheritable)
    assert code == 0 and out.split() == ["0", "1", "2", "3"], out  # 3: listdir's own


def test_sigpipe_is_back_to_its_default(dirs: Dirs, devnull: int) -> None:
    code, out = _run(dirs.policy(), "yes | head -n 1; echo ${PIPESTATUS[0]}", dirs.ws, devnull)
    assert code == 0 and out.split() == ["y", "141"]  # yes was killed by SIGPIPE (128 + 13)


def test_a_directory_that_has_gone_is_named(dirs: Dirs, devnull: int) -> None:
    code, out = _run(dirs.policy(), "echo ran", dirs.ws / "missing", devnull)
    assert code == 126
    assert out == f"codemode sandbox: cannot change to directory {dirs.ws / 'missing'}\n"


def test_wait_with_a_timeout(dirs: Dirs, devnull: int) -> None:
    proc = launch(
        LaunchSpec(["sleep", "30"], str(dirs.ws), dict(os.environ), dirs.policy(), stdio=(devnull,) * 3)
    )
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.05)
    os.kill(proc.pid, 9)
    assert proc.wait(timeout=30) == -9


def test_unconfined_runs_through_the_same_launcher(dirs: Dirs, devnull: int) -> None:
    code, out = _run(
        dirs.policy(SandboxMode.FULL_ACCESS), f"touch {dirs.out}/x && echo wrote", dirs.ws, devnull
    )
    assert code == 0 and "wrote" in out and (dirs.out / "x").exists()


def test_a_missing_program_is_file_not_found(dirs: Dirs, devnull: int) -> None:
    with pytest.raises(FileNotFoundError):
        launch(
            LaunchSpec(
                ["no-such-program-xyz"], str(dirs.ws), dict(os.environ), dirs.policy(), stdio=(devnull,) * 3
            )
        )


def test_without_the_launcher_confined_commands_are_refused(
    dirs: Dirs, devnull: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The launcher cannot run on this machine (simulated): no confined command starts, none
    # starts with fewer layers.
    import codemode.sandbox._enforce as enforce

    monkeypatch.setattr(enforce, "launcher_fd", lambda: None)
    with pytest.raises(SandboxUnavailable, match="launcher"):
        launch(LaunchSpec(["true"], str(dirs.ws), dict(os.environ), dirs.policy(), stdio=(devnull,) * 3))


needs_cgroups = pytest.mark.skipif(cgroup_root().path is None, reason=f"no cgroups: {cgroup_root().reason}")


def _is_sleep(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"/bin/sleep\0")
    except OSError:
        return False


@needs_cgroups
def test_the_command_joins_its_cgroup_and_cgroup_kill_ends_escapees(dirs: Dirs, devnull: int) -> None:
    root = cgroup_root()
    path = root.make("test-owner", f"t{os.getpid()}")
    try:
        # A grandchild that leaves the session and clears its environment: no marker, no group.
        code, out = _run(
            dirs.policy(),
            "cat /proc/self/cgroup; setsid env -i /bin/sleep 333 </dev/null >/dev/null 2>&1 & echo started",
            dirs.ws,
            devnull,
            cgroup=path,
        )
        assert code == 0 and out.strip().endswith("started"), out
        own = next(line[3:] for line in out.splitlines() if line.startswith("0::"))
        assert own.endswith(os.path.basename(path)), out
        # The background job is a forked shell, then setsid, then env before it is sleep: wait
        # until every member has become the sleep (or the deadline passes and the test fails).
        deadline = time.monotonic() + 10
        escapees = cgroup_members(path)
        while not (escapees and all(_is_sleep(p) for p in escapees)) and time.monotonic() < deadline:
            time.sleep(0.01)
            escapees = cgroup_members(path)
        assert escapees and all(_is_sleep(p) for p in escapees), escapees
        assert cgroup_kill(path) == len(escapees)
        assert cgroup_members(path) == []
        assert not any(
            os.path.exists(f"/proc/{p}") and b"sleep" in Path(f"/proc/{p}/cmdline").read_bytes()
            for p in escapees
        )
    finally:
        cgroup_kill(path)
        assert cgroup_remove(path)


@needs_cgroups
def test_a_confined_command_cannot_leave_its_cgroup(dirs: Dirs, devnull: int) -> None:
    root = cgroup_root()
    assert root.path is not None
    path = root.make("test-owner", f"leave{os.getpid()}")
    try:
        _code, out = _run(
            dirs.policy(),
            f"echo $$ > {root.path}/cgroup.procs; echo rc=$?; echo $$ > /sys/fs/cgroup/cgroup.procs 2>&1; cat /proc/self/cgroup",
            dirs.ws,
            devnull,
            cgroup=path,
        )
        assert "rc=0" not in out, out
        assert os.path.basename(path) in out, out
    finally:
        cgroup_kill(path)
        cgroup_remove(path)
