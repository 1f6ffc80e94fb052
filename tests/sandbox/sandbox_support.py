"""Helpers for the sandbox tests: real directories and confined processes started like the bash tool."""

from __future__ import annotations

import fcntl
import os
import selectors
import struct
import subprocess
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from codemode.sandbox import LaunchSpec, SandboxMode, SandboxPolicy, launch
from codemode.sandbox._landlock import CREATE_RULESET_VERSION, create_ruleset


def _real_abi() -> int:
    """The running kernel's Landlock ABI, asked directly (no codemode simulation switches)."""
    try:
        return create_ruleset(None, 0, CREATE_RULESET_VERSION)
    except OSError:
        return 0


REAL_ABI = _real_abi()
#: Skip a test only when the real kernel cannot enforce confined modes.
needs_landlock = pytest.mark.skipif(
    REAL_ABI < 3, reason=f"needs Landlock ABI >= 3; this kernel has ABI {REAL_ABI}"
)


@dataclass
class Dirs:
    """A workspace root, a private temp dir, a state dir and an outside dir, all real."""

    ws: Path
    tmp: Path
    state: Path
    out: Path

    def policy(self, mode: SandboxMode = SandboxMode.WORKSPACE_WRITE, network: bool = True) -> SandboxPolicy:
        return SandboxPolicy(
            mode=mode,
            writable_roots=(self.ws,),
            network=network,
            temp_dir=self.tmp,
            protected=(self.state,),
        )


def run_confined(
    policy: SandboxPolicy, argv: list[str], cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Start ``argv`` the way the bash tool does (``launch``, with pipes), wait, return its output."""
    out_read, out_write = os.pipe2(os.O_CLOEXEC)
    err_read, err_write = os.pipe2(os.O_CLOEXEC)
    devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        proc = launch(
            LaunchSpec(
                argv, str(cwd or os.getcwd()), dict(os.environ), policy, stdio=(devnull, out_write, err_write)
            )
        )
    finally:
        for fd in (out_write, err_write, devnull):
            os.close(fd)
    chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select(max(deadline - time.monotonic(), 0.01)):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(argv, timeout)
    code = proc.wait(timeout=timeout)
    out, err = (b"".join(chunks[fd]).decode(errors="replace") for fd in (out_read, err_read))
    return subprocess.CompletedProcess(argv, code, out, err)


def run_on_pty(policy: SandboxPolicy, argv: list[str], timeout: float = 60) -> tuple[int, str]:
    """Start ``argv`` on a new PTY (its controlling terminal), as background runs are; read it all."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    terminal = os.ttyname(slave)
    os.close(slave)
    try:
        proc = launch(LaunchSpec(argv, os.getcwd(), dict(os.environ), policy, terminal=terminal))
        chunks: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the command and everything holding the terminal are gone
                break
            if not data:
                break
            chunks.append(data)
        return proc.wait(timeout=timeout), b"".join(chunks).decode(errors="replace")
    finally:
        os.close(master)


def bash(policy: SandboxPolicy, script: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``bash -c script`` under ``policy``."""
    return run_confined(policy, ["bash", "-c", script], cwd=cwd)


# A tiny probe run inside the sandbox: performs one operation, prints OK or the errno name.
PROBE = r"""
import errno, os, socket, sys
op, args = sys.argv[1], sys.argv[2:]
def do():
    if op == "create": os.close(os.open(args[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    elif op == "write": os.close(os.open(args[0], os.O_WRONLY | os.O_APPEND))
    elif op == "o_trunc": os.close(os.open(args[0], os.O_WRONLY | os.O_TRUNC))
    elif op == "truncate": os.truncate(args[0], 0)
    elif op == "unlink": os.unlink(args[0])
    elif op == "mkdir": os.mkdir(args[0])
    elif op == "rmdir": os.rmdir(args[0])
    elif op == "mkfifo": os.mkfifo(args[0])
    elif op == "symlink": os.symlink("/etc/hostname", args[0])
    elif op == "rename": os.rename(args[0], args[1])
    elif op == "link": os.link(args[0], args[1])
    elif op == "read": open(args[0]).read()
    elif op == "procfd":
        fd = os.open(args[0], os.O_RDONLY)
        os.close(os.open(f"/proc/self/fd/{fd}", os.O_WRONLY))
    elif op == "connect": socket.create_connection(("127.0.0.1", int(args[0])), timeout=10).close()
    elif op == "bind":
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.close()
    else: raise SystemExit("unknown op " + op)
try:
    do()
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
"""


def probe(policy: SandboxPolicy, op: str, *args: str | Path) -> str:
    """Run one operation in a confined Python child; return ``OK`` or the errno name."""
    result = run_confined(policy, ["python3", "-c", PROBE, op, *map(str, args)])
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()
