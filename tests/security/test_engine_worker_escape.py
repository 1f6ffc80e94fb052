"""A compromised engine holds nothing: what a worker process can still do once it is confined.

An exploit of QuickJS runs with the worker's rights. The worker holds itself with the steps in
`codemode.engine.worker._confine`, applied here in a fresh interpreter in the same order a worker
applies them; then the attacker's moves are tried: open a file, list a directory, open a socket,
execute a program, fork, start a thread, signal the host. Each must fail. A real worker's
``/proc`` status is checked in ``tests/engine/test_processes.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import codemode

_ROOT = Path(codemode.__file__).resolve().parent

_ATTACK = r"""
import json, os, socket, sys, threading, types
root = sys.argv[1]
for name, path in (("codemode", root), ("codemode.engine", root + "/engine"),
                   ("codemode.engine.worker", root + "/engine/worker"), ("codemode.sandbox", root + "/sandbox")):
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
from codemode.engine.worker import _confine
host = int(sys.argv[2])
_confine.drop_identity()
landlock = _confine.landlock_nothing()
_confine.set_limits(1 << 30, 60)
_confine.seal()
tried = {"landlock": landlock}
def attempt(name, move):
    try:
        move()
        tried[name] = "done"
    except BaseException as exc:
        tried[name] = type(exc).__name__
attempt("open", lambda: open("/etc/hostname").read())
attempt("open_own_source", lambda: open(root + "/engine/_guest.py").read())
attempt("listdir", lambda: os.listdir("/"))
attempt("socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
attempt("exec", lambda: os.execv("/bin/true", ["true"]))
attempt("fork", lambda: os.fork())
attempt("thread", lambda: threading.Thread(target=lambda: None).start())
attempt("signal_host", lambda: os.kill(host, 0))
attempt("mkdir", lambda: os.mkdir("/tmp/codemode-worker-escape"))
os.write(1, json.dumps(tried).encode())
"""


def test_a_confined_worker_can_open_nothing_run_nothing_reach_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _ATTACK, str(_ROOT), str(os.getpid())],
        capture_output=True,
        timeout=60,
        env={"PATH": os.defpath},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    tried = json.loads(proc.stdout)
    assert tried.pop("landlock") is None  # Landlock applied (this machine has it)
    for move, outcome in tried.items():
        assert outcome != "done", (move, tried)
    # A refused syscall fails with EPERM; a thread that cannot be made is RuntimeError.
    assert tried["thread"] == "RuntimeError"
    assert tried["open"] == "PermissionError" and tried["socket"] == "PermissionError"
    assert not Path("/tmp/codemode-worker-escape").exists()
