"""Kernel resources a command could share with, or take from, other sessions and the host:
``/dev/shm``, the number of tasks (a fork bomb), packet and netlink sockets. Real confined
processes started through the one launch path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from codemode.sandbox import (
    LaunchSpec,
    SandboxMode,
    SandboxPolicy,
    cgroup_kill,
    cgroup_remove,
    cgroup_root,
    launch,
)
from codemode.sandbox._cgroup import PIDS_MAX_ENV, pids_limit_path
from codemode.sandbox._landlock import landlock_status

pytestmark = pytest.mark.skipif(
    landlock_status().abi < 4, reason="confined commands need Landlock ABI >= 4 (network off)"
)


def _policy(root: Path, session: str, network: bool = True) -> SandboxPolicy:
    ws, tmp, state = root / f"ws-{session}", root / "state" / f"tmp-{session}", root / "state"
    ws.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    return SandboxPolicy(
        mode=SandboxMode.WORKSPACE_WRITE,
        writable_roots=(ws,),
        network=network,
        temp_dir=tmp,
        protected=(state / "db",),
    )


def _run(policy: SandboxPolicy, argv: list[str], cgroup: str | None = None) -> tuple[int, str]:
    """Run ``argv`` confined; its exit status and its stdout + stderr."""
    read, write = os.pipe2(os.O_CLOEXEC)
    devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        ws = str(policy.writable_roots[0])
        proc = launch(
            LaunchSpec(argv, ws, dict(os.environ), policy, stdio=(devnull, write, write), cgroup=cgroup)
        )
    finally:
        os.close(write)
        os.close(devnull)
    chunks = []
    try:
        while chunk := os.read(read, 65536):
            chunks.append(chunk)
    finally:
        os.close(read)
    return proc.wait(timeout=120), b"".join(chunks).decode(errors="replace")


def test_sessions_do_not_see_each_others_shared_memory(tmp_path: Path) -> None:
    name = f"codemode-test-{uuid.uuid4().hex}"
    first, second = _policy(tmp_path, "a"), _policy(tmp_path, "b")
    code, out = _run(first, ["sh", "-c", f"echo secret > /dev/shm/{name} && ls /dev/shm"])
    assert code == 0 and name in out, out
    # The same session's next command sees it; another session's does not, nor does the host.
    code, out = _run(first, ["cat", f"/dev/shm/{name}"])
    assert code == 0 and out == "secret\n", out
    code, out = _run(second, ["sh", "-c", f"ls -a /dev/shm; cat /dev/shm/{name}"])
    assert code != 0 and name not in out.split(), out
    assert not os.path.exists(f"/dev/shm/{name}")
    # It lives in the session's temp dir, so it goes with the session and counts where it does.
    assert first.shm_dir is not None and (first.shm_dir / name).read_text() == "secret\n"


def test_a_host_shared_memory_file_is_out_of_a_commands_reach(tmp_path: Path) -> None:
    name = f"codemode-host-{uuid.uuid4().hex}"
    host_file = Path("/dev/shm") / name
    host_file.write_text("host only\n")
    try:
        _code, out = _run(
            _policy(tmp_path, "a"), ["sh", "-c", f"cat /dev/shm/{name}; echo > /dev/shm/{name}"]
        )
    finally:
        text = host_file.read_text()
        host_file.unlink()
    assert "host only" not in out and text == "host only\n", out


def test_posix_semaphores_still_work_in_the_private_shm(tmp_path: Path) -> None:
    script = "import multiprocessing as m; lock = m.Lock(); lock.acquire(); lock.release(); print('ok')"
    code, out = _run(_policy(tmp_path, "a"), [sys.executable, "-c", script])
    assert code == 0 and out.strip() == "ok", out


_FORK_BOMB = """
import os, time
count = 0
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        print("stopped", count, exc.errno, flush=True)
        time.sleep(600)  # ended only by the test's cgroup kill (exiting by itself raced it: code 0)
        os._exit(0)
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    count += 1
"""


@pytest.mark.skipif(cgroup_root().path is None, reason=f"no cgroups: {cgroup_root().reason}")
def test_a_fork_bomb_stops_at_the_pids_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PIDS_MAX_ENV, "64")
    path = cgroup_root().make("test-pids", f"bomb-{os.getpid()}")
    limit = pids_limit_path(path)
    if limit is None:
        cgroup_remove(path)
        pytest.skip("no pids controller on this host")
    try:
        assert Path(limit).read_text().strip() == "64"
        policy = _policy(tmp_path, "a")
        read, write = os.pipe2(os.O_CLOEXEC)
        devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            ws = str(policy.writable_roots[0])
            argv = [sys.executable, "-c", _FORK_BOMB]
            proc = launch(
                LaunchSpec(argv, ws, dict(os.environ), policy, stdio=(devnull, write, write), cgroup=path)
            )
        finally:
            os.close(write)
            os.close(devnull)
        with os.fdopen(read, "rb") as out:
            line = out.readline().decode()  # the parent prints once fork fails; children hold the pipe
        words = line.split()
        assert words[:1] == ["stopped"] and int(words[2]) == 11, line  # EAGAIN
        assert int(words[1]) < 64
        events = Path(limit).with_name("pids.events").read_text()
        assert "max 0" not in events and "max" in events, events
        # The host is fine: the whole tree ends at once, and the next command starts.
        assert cgroup_kill(path) > 0
        assert proc.wait(timeout=60) != 0
        code, text = _run(policy, ["echo", "still here"])
        assert code == 0 and text == "still here\n"
    finally:
        cgroup_kill(path)
        cgroup_remove(path)
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(limit))


_SOCKETS = """
import errno, socket
cases = {
    "packet": (socket.AF_PACKET, socket.SOCK_RAW, 0),
    "packet-dgram": (socket.AF_PACKET, socket.SOCK_DGRAM, 0),
    "inet-sock-packet": (socket.AF_INET, 10, 0),  # the kernel makes this a packet socket
    "netlink-sock-diag": (socket.AF_NETLINK, socket.SOCK_RAW, 4),
    "netlink-audit": (socket.AF_NETLINK, socket.SOCK_RAW, 9),
    "netlink-uevent": (socket.AF_NETLINK, socket.SOCK_DGRAM, 15),
    "netlink-generic": (socket.AF_NETLINK, socket.SOCK_RAW, 16),
    "netlink-netfilter": (socket.AF_NETLINK, socket.SOCK_RAW, 12),
    "netlink-route": (socket.AF_NETLINK, socket.SOCK_RAW, 0),
}
for name, args in cases.items():
    try:
        socket.socket(*args).close()
        print(name, "open")
    except OSError as exc:
        print(name, errno.errorcode.get(exc.errno, exc.errno))
"""


@pytest.mark.parametrize("network", [True, False], ids=["network-on", "network-off"])
def test_packet_and_netlink_sockets_are_refused(tmp_path: Path, network: bool) -> None:
    code, out = _run(_policy(tmp_path, "a", network), [sys.executable, "-c", _SOCKETS])
    assert code == 0, out
    seen = dict(line.split() for line in out.splitlines())
    for name, result in seen.items():
        if name == "netlink-route":
            # Kept: getaddrinfo and `ip addr` read interfaces through it; it changes nothing
            # without CAP_NET_ADMIN.
            assert result == "open", out
        else:
            assert result in ("EPERM", "EACCES"), (name, out)
    assert len(seen) == 9


@pytest.mark.skipif(shutil.which("perl") is None, reason="no perl")
def test_a_perl_packet_socket_is_refused(tmp_path: Path) -> None:
    script = (
        "socket(my $s, 17, 3, 0) or print qq(refused $!\\n); socket(my $n, 16, 3, 4) or print qq(nl $!\\n)"
    )
    code, out = _run(_policy(tmp_path, "a"), ["perl", "-e", script])
    assert code == 0, out
    assert "refused Operation not permitted" in out and "nl Operation not permitted" in out, out


def test_ip_and_ss_still_read_what_they_may(tmp_path: Path) -> None:
    ip = shutil.which("ip")
    if ip is None:
        pytest.skip("no iproute2")
    code, out = _run(_policy(tmp_path, "a"), [ip, "-o", "link", "show", "lo"])
    assert code == 0 and "lo" in out, out
    assert subprocess.run([ip, "-o", "link", "show", "lo"], capture_output=True, check=False).returncode == 0
