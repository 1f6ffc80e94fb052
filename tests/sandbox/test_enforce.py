"""Black-box tests of Landlock confinement: real child processes, real files, real sockets.

Every process starts through the one launch path (``codemode.sandbox.launch``), as bash does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode.errors import SandboxUnavailable, UserError
from codemode.sandbox import (
    SandboxMode,
    SandboxPolicy,
    check_policy,
    explain_denial,
    landlock_status,
    prepare_confinement,
)
from tests.sandbox.sandbox_support import (
    REAL_ABI,
    Dirs,
    bash,
    needs_landlock,
    probe,
    run_confined,
    run_on_pty,
)

# Every test here runs real confined processes unless it says it simulates a missing Landlock.
pytestmark = needs_landlock


READ_ONLY = SandboxMode.READ_ONLY
FULL = SandboxMode.FULL_ACCESS


def _ops(base: Path, other: Path) -> list[tuple[str, list[str | Path]]]:
    """Every write operation, aimed at ``base`` (``other`` is the far side of renames/links)."""
    return [
        ("create", [base / "new"]),
        ("write", [base / "existing"]),
        ("o_trunc", [base / "existing"]),
        ("truncate", [base / "existing"]),
        ("unlink", [base / "existing"]),
        ("mkdir", [base / "newdir"]),
        ("rmdir", [base / "emptydir"]),
        ("mkfifo", [base / "fifo"]),
        ("symlink", [base / "link"]),
        ("rename", [base / "existing", base / "renamed"]),
        ("link", [base / "existing", base / "hardlink"]),
    ]


#: The names of every write operation in _ops.
_WRITE_OPS = [name for name, _ in _ops(Path("/base"), Path("/other"))]


# --- workspace-write: outside the roots every write is refused, with the errno Landlock gives ---


@pytest.mark.parametrize("op", _WRITE_OPS)
def test_outside_write_operations_get_eacces(dirs: Dirs, op: str) -> None:
    args = dict(_ops(dirs.out, dirs.ws))[op]
    assert probe(dirs.policy(), op, *args) == "EACCES"
    assert (dirs.out / "existing").read_text() == "outside\n"
    assert sorted(p.name for p in dirs.out.iterdir()) == ["emptydir", "existing"]


@pytest.mark.parametrize("op", _WRITE_OPS)
def test_inside_write_operations_succeed(dirs: Dirs, op: str) -> None:
    args = dict(_ops(dirs.ws, dirs.out))[op]
    assert probe(dirs.policy(), op, *args) == "OK"


@pytest.mark.parametrize(
    ("op", "src", "dst", "expected"),
    [
        # rename/link need MAKE_REG on the destination (EACCES), renames also REMOVE_FILE on the
        # source (EACCES); a link from outside into a root fails on the REFER right (EXDEV).
        ("rename", "ws", "out", "EACCES"),
        ("rename", "out", "ws", "EACCES"),
        ("link", "ws", "out", "EACCES"),
        ("link", "out", "ws", "EXDEV"),
    ],
)
def test_rename_and_link_across_the_boundary_refused(
    dirs: Dirs, op: str, src: str, dst: str, expected: str
) -> None:
    source = getattr(dirs, src) / "existing"
    target = getattr(dirs, dst) / "moved"
    assert probe(dirs.policy(), op, source, target) == expected
    assert source.exists()
    assert not target.exists()


def test_shell_messages_for_outside_writes(dirs: Dirs) -> None:
    out = dirs.out
    cases = {
        f"touch {out}/new": f"touch: cannot touch '{out}/new': Permission denied",
        f"echo x >> {out}/existing": f"{out}/existing: Permission denied",
        f": > {out}/existing": f"{out}/existing: Permission denied",
        f"truncate -s 0 {out}/existing": f"cannot open '{out}/existing' for writing: Permission denied",
        f"rm {out}/existing": f"rm: cannot remove '{out}/existing': Permission denied",
        f"mkdir {out}/d": f"mkdir: cannot create directory '{out}/d': Permission denied",
        f"rmdir {out}/emptydir": f"rmdir: failed to remove '{out}/emptydir': Permission denied",
        f"mkfifo {out}/f": f"mkfifo: cannot create fifo '{out}/f': Permission denied",
        f"ln -s /etc/hostname {out}/l": f"ln: failed to create symbolic link '{out}/l': Permission denied",
        f"mv {dirs.ws}/existing {out}/": "Permission denied",
        f"ln {out}/existing {dirs.ws}/hl": "Invalid cross-device link",
    }
    for script, expected in cases.items():
        result = bash(dirs.policy(), script)
        assert result.returncode != 0, script
        # coreutils quote with ‘’ in UTF-8 locales and '' in C: accept both
        assert expected in result.stderr.replace("‘", "'").replace("’", "'"), (script, result.stderr)
        line = explain_denial(result.stderr, dirs.policy())
        assert line is not None and str(out) in line, (script, result.stderr, line)
    assert (out / "existing").read_text() == "outside\n"
    assert (dirs.ws / "existing").exists()


def test_writing_through_a_symlink_that_points_out_is_refused(dirs: Dirs) -> None:
    (dirs.ws / "escape").symlink_to(dirs.out / "existing")
    result = bash(dirs.policy(), "echo pwned > escape", cwd=dirs.ws)
    assert result.returncode == 1
    assert "escape: Permission denied" in result.stderr
    assert (dirs.out / "existing").read_text() == "outside\n"
    line = explain_denial(result.stderr, dirs.policy(), cwd=dirs.ws)
    assert line is not None and str(dirs.out / "existing") in line


def test_reopening_through_proc_self_fd_for_writing_is_refused(dirs: Dirs) -> None:
    assert probe(dirs.policy(), "procfd", dirs.out / "existing") == "EACCES"
    result = bash(dirs.policy(), f"exec 3< {dirs.out}/existing; echo pwned > /proc/self/fd/3")
    assert "/proc/self/fd/3: Permission denied" in result.stderr
    assert (dirs.out / "existing").read_text() == "outside\n"
    assert explain_denial(result.stderr, dirs.policy()) is not None


def test_state_directory_is_not_writable(dirs: Dirs) -> None:
    result = bash(dirs.policy(), f"echo x >> {dirs.state}/db; touch {dirs.state}/new; rm -f {dirs.state}/db")
    assert result.stderr.count("Permission denied") == 3
    assert (dirs.state / "db").read_text() == "state\n"
    assert not (dirs.state / "new").exists()
    line = explain_denial(result.stderr, dirs.policy())
    assert line is not None and "state directory" in line


def test_temp_dir_is_writable_and_tmpdir_points_at_it(dirs: Dirs) -> None:
    result = bash(dirs.policy(), 'f=$(mktemp) && echo hi > "$f" && echo "$f"')
    assert result.returncode == 0, result.stderr
    created = Path(result.stdout.strip())
    assert created.parent == dirs.tmp and created.read_text() == "hi\n"


def test_devices_and_terminal_paths_stay_usable(dirs: Dirs) -> None:
    for mode in (SandboxMode.WORKSPACE_WRITE, READ_ONLY):
        result = bash(
            dirs.policy(mode),
            "echo x > /dev/null && : > /dev/null && head -c 4 /dev/zero | wc -c && cat /etc/hostname",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[0] == "4"


# --- confinement is inherited by children and grandchildren ---


def test_child_and_grandchild_are_confined(dirs: Dirs) -> None:
    script = f"""
    bash -c 'touch {dirs.out}/child' ; echo "child=$?"
    bash -c "bash -c 'touch {dirs.out}/grandchild'" ; echo "grandchild=$?"
    python3 -c "import os
pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        os.setsid()
        try:
            open('{dirs.out}/daemon', 'w')
            print('daemon=0')
        except PermissionError:
            print('daemon=denied')
        os._exit(0)
    os._exit(0)
os.waitpid(pid, 0)"
    """
    # communicate() reads to EOF, so the detached grandchild (holding stdout) has finished too.
    result = bash(dirs.policy(), script)
    assert "child=1" in result.stdout and "grandchild=1" in result.stdout, result
    assert "daemon=denied" in result.stdout, result
    assert sorted(p.name for p in dirs.out.iterdir()) == ["emptydir", "existing"]


def test_detached_grandchild_is_confined(dirs: Dirs) -> None:
    marker = dirs.ws / "result"
    bash(
        dirs.policy(),
        f"setsid nohup sh -c 'touch {dirs.out}/escaped; echo $? > {marker}.part; mv {marker}.part {marker}' "
        ">/dev/null 2>&1 &",
    )
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "detached grandchild never reported"
        time.sleep(0.02)
    assert marker.read_text().strip() == "1"
    assert not (dirs.out / "escaped").exists()


# --- read-only refuses every write, everywhere ---


@pytest.mark.parametrize("op", _WRITE_OPS)
@pytest.mark.parametrize("where", ["ws", "out", "tmp"])
def test_read_only_refuses_every_write(dirs: Dirs, op: str, where: str) -> None:
    base = getattr(dirs, where)
    (base / "existing").write_text("keep\n")
    (base / "emptydir").mkdir(exist_ok=True)
    args = dict(_ops(base, dirs.out))[op]
    assert probe(dirs.policy(READ_ONLY), op, *args) == "EACCES"
    assert (base / "existing").read_text() == "keep\n"


def test_read_only_still_reads_and_explains(dirs: Dirs) -> None:
    policy = dirs.policy(READ_ONLY)
    assert probe(policy, "read", dirs.ws / "existing") == "OK"
    result = bash(policy, "touch new", cwd=dirs.ws)
    assert "Permission denied" in result.stderr
    line = explain_denial(result.stderr, policy, cwd=dirs.ws)
    assert line is not None and "read-only" in line and str(dirs.ws / "new") in line


# --- network ---


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(30)
    yield server
    server.close()


def test_network_off_denies_tcp_connect_and_explains(dirs: Dirs, listener: socket.socket) -> None:
    if not landlock_status().network_rules:
        pytest.skip("needs Landlock ABI >= 4 for network rules")
    port = listener.getsockname()[1]
    policy = dirs.policy(network=False)
    # The seccomp filter refuses the socket itself (EPERM); Landlock's TCP rules stand behind it.
    assert probe(policy, "connect", port) == "EPERM"
    assert probe(policy, "bind") == "EPERM"
    result = bash(policy, f"exec 3<>/dev/tcp/127.0.0.1/{port}")
    assert "socket: Operation not permitted" in result.stderr
    line = explain_denial(result.stderr, policy)
    assert line is not None and f"127.0.0.1 port {port}" in line and "network" in line
    result = run_confined(
        policy, [sys.executable, "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}))"]
    )
    assert "PermissionError: [Errno 1] Operation not permitted" in result.stderr
    line = explain_denial(result.stderr, policy)
    assert line is not None and "TCP connection" in line and "network on" in line


def test_network_on_allows_tcp_connect(dirs: Dirs, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert probe(dirs.policy(network=True), "connect", port) == "OK"
    conn, _ = listener.accept()
    conn.close()


# --- the host stays unconfined; the ruleset fd never reaches the command ---


def test_host_process_stays_unconfined(dirs: Dirs) -> None:
    result = bash(dirs.policy(READ_ONLY, network=False), f"touch {dirs.out}/x")
    assert result.returncode == 1
    (dirs.out / "host-wrote").write_text("ok")  # this process can still write anywhere
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # ... and still use TCP
    s.close()
    child = subprocess.run(["touch", str(dirs.out / "unconfined-child")], check=False)
    assert child.returncode == 0  # a child started without preexec is unconfined too


def test_ruleset_fd_does_not_leak_into_the_command(dirs: Dirs) -> None:
    script = (
        "import os\n"
        "fds = [f for f in os.listdir('/proc/self/fd') if os.path.exists(f'/proc/self/fd/{f}')]\n"
        "print('\\n'.join(f + ' ' + os.readlink(f'/proc/self/fd/{f}') for f in fds))\n"
    )
    policy = dirs.policy()
    with prepare_confinement(policy) as conf:
        fd = conf.fds()["ruleset_fd"]
        assert fd is not None and os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[landlock-ruleset]"
    result = run_confined(policy, ["python3", "-c", script])
    assert result.returncode == 0, result.stderr
    assert "landlock" not in result.stdout and "memfd" not in result.stdout and "cgroup" not in result.stdout
    assert len(result.stdout.splitlines()) <= 4, result.stdout  # 0-2 and the listing's own fd
    with pytest.raises(OSError):
        os.fstat(fd)  # closed in the parent once the Confinement is closed (fd number not reused yet)


def test_a_closed_confinement_starts_nothing(dirs: Dirs) -> None:
    conf = prepare_confinement(dirs.policy())
    conf.close()
    with pytest.raises(UserError, match="closed"):
        conf.fds()


def test_rulesets_are_rebuilt_when_a_root_is_recreated(dirs: Dirs) -> None:
    policy = dirs.policy()
    assert bash(policy, f"touch {dirs.ws}/one").returncode == 0
    os.rename(dirs.ws, dirs.out / "old-ws")  # the cached ruleset names the old inode
    dirs.ws.mkdir()
    result = bash(policy, f"touch {dirs.ws}/two && touch {dirs.out}/old-ws/three")
    assert (dirs.ws / "two").exists(), result.stderr
    assert "Permission denied" in result.stderr and not (dirs.out / "old-ws" / "three").exists()


# --- terminals (background processes run in a PTY) ---


def test_pty_terminal_works_confined(dirs: Dirs) -> None:
    script = (
        "tty; stty size; stty -echo && stty echo && echo stty-ok; "
        "python3 -c \"import os,sys; f=open('/dev/tty','w'); f.write('devtty-ok\\n'); f.flush(); "
        "print('isatty', os.isatty(0), os.get_terminal_size(f.fileno()).columns)\"; "
        f"touch {dirs.out}/pty-escape"
    )
    for mode in (SandboxMode.WORKSPACE_WRITE, READ_ONLY):
        status, output = run_on_pty(dirs.policy(mode), ["bash", "-c", script])
        assert "/dev/pts/" in output, output
        assert "24 80" in output and "stty-ok" in output and "devtty-ok" in output, output
        assert "isatty True 80" in output, output
        assert "Permission denied" in output and status == 1, output
    assert not (dirs.out / "pty-escape").exists()


def test_other_terminals_are_out_of_reach(dirs: Dirs) -> None:
    # Another terminal (here one the test holds, standing for the user's own shell): a command
    # can neither open it nor, on its own terminal, type into it with TIOCSTI.
    master, slave = os.openpty()
    try:
        other = os.ttyname(slave)
        script = (
            f"echo hi > {other}; echo open=$?; "
            "python3 -c 'import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b\"x\")' 2>&1 | tail -1"
        )
        _status, output = run_on_pty(dirs.policy(), ["bash", "-c", script])
        assert "open=1" in output and "Permission denied" in output, output
        assert "Operation not permitted" in output, output
        os.set_blocking(master, False)
        with pytest.raises(BlockingIOError):
            os.read(master, 100)  # nothing reached the other terminal
    finally:
        os.close(master)
        os.close(slave)


# --- fail closed ---


@pytest.mark.parametrize(("abi", "network", "needle"), [(2, True, "ABI 3"), (3, False, "network rules")])
def test_older_abi_refuses_what_it_cannot_enforce(
    dirs: Dirs, monkeypatch: pytest.MonkeyPatch, abi: int, network: bool, needle: str
) -> None:
    monkeypatch.setenv("CODEMODE_SIMULATE_LANDLOCK_ABI", str(abi))
    landlock_status.cache_clear()  # type: ignore[attr-defined]
    with pytest.raises(SandboxUnavailable, match=needle):
        prepare_confinement(dirs.policy(network=network))


@pytest.mark.parametrize("abi", [3, 4, 5, 6])
def test_every_supported_abi_confines(dirs: Dirs, monkeypatch: pytest.MonkeyPatch, abi: int) -> None:
    if abi > REAL_ABI:
        pytest.skip(f"kernel has ABI {REAL_ABI}")
    monkeypatch.setenv("CODEMODE_SIMULATE_LANDLOCK_ABI", str(abi))
    landlock_status.cache_clear()  # type: ignore[attr-defined]
    policy = dirs.policy(network=abi < 4)
    result = bash(policy, f"touch {dirs.ws}/in && : > {dirs.ws}/existing && truncate -s0 {dirs.out}/existing")
    assert result.returncode == 1 and "Permission denied" in result.stderr, result
    assert (dirs.ws / "in").exists() and (dirs.out / "existing").read_text() == "outside\n"


# --- policy checks ---


def test_state_dir_under_a_writable_root_is_refused(dirs: Dirs) -> None:
    inside = dirs.ws / ".codemode"
    inside.mkdir()
    policy = SandboxPolicy(writable_roots=(dirs.ws,), protected=(inside,))
    with pytest.raises(UserError, match="CODEMODE_HOME"):
        check_policy(policy)
    with pytest.raises(UserError):
        prepare_confinement(policy)
    check_policy(policy.with_mode(READ_ONLY))  # nothing writable: fine
    check_policy(policy.with_mode(FULL))  # explicit opt-in: not confined at all
    # a writable root inside the state dir (per-session temp dir) exposes only that subtree
    check_policy(
        SandboxPolicy(writable_roots=(dirs.ws,), temp_dir=dirs.state / "tmp", protected=(dirs.state,))
    )


def test_missing_writable_root_is_a_clear_error(dirs: Dirs) -> None:
    policy = SandboxPolicy(writable_roots=(dirs.ws / "missing",))
    with pytest.raises(UserError, match="does not exist"):
        prepare_confinement(policy)


# --- scoping (ABI 6): a command cannot signal processes outside its own sandbox ---


def test_command_cannot_signal_the_host_but_can_signal_its_children(dirs: Dirs) -> None:
    if "signal" not in landlock_status().scopes:
        pytest.skip("needs Landlock ABI >= 6 for signal scoping")
    result = bash(
        dirs.policy(), f"kill -0 {os.getpid()}; echo host=$?; sleep 30 & kill $!; wait $!; echo child=$?"
    )
    assert "host=1" in result.stdout and "child=143" in result.stdout, result
    line = explain_denial(result.stderr, dirs.policy())
    assert line is not None and str(os.getpid()) in line and "stop" in line


def test_an_entry_made_beside_the_state_dir_later_is_readable_and_the_state_dir_is_not(
    dirs: Dirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The directories around the state dir are granted entry by entry; the cached ruleset
    # must pick up what appears there later, and nothing that leads into the state dir.
    from codemode.sandbox import _enforce

    # No other codemode state dir to protect (a registry of its own): the launch's policy is this one.
    monkeypatch.setenv("XDG_STATE_HOME", str(dirs.state.parent / "xdg"))
    monkeypatch.delenv("CODEMODE_HOME", raising=False)

    policy = dirs.policy()
    assert bash(policy, "true").returncode == 0  # built and cached
    cached_fd = next(c.fd for (p, *_), c in _enforce._cache.items() if p == policy)
    parent = dirs.state.parent
    (parent / "late-file").write_text("late\n")
    (parent / "late-dir").mkdir()
    (parent / "late-dir" / "inner").write_text("inner\n")
    (parent / "late-link").symlink_to(dirs.state)
    (dirs.state / "secret").write_text("secret\n")
    result = bash(
        policy,
        f"cat {parent}/late-file {parent}/late-dir/inner; cat {parent}/late-link/secret; cat {dirs.state}/secret",
    )
    assert result.stdout.splitlines() == ["late", "inner"], result
    assert result.stderr.count("Permission denied") == 2, result.stderr
    assert next(c.fd for (p, *_), c in _enforce._cache.items() if p == policy) == cached_fd  # not rebuilt
