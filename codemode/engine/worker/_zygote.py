"""The engine's zygote: one small process per host that forks a worker for each use.

Started once (``python -I -S codemode/engine/worker FD``, FD its socket to the host), it
imports what a worker needs and compiles the prelude, then holds itself (`_confine`: no root,
no capability, no_new_privs, Landlock granting nothing) and says hello. For each ``fork`` the
host sends (with the worker's three sockets as SCM_RIGHTS) it forks a worker (~2 ms, instead of
~60 ms for a fresh interpreter) and answers with its pid; it reaps its workers and reports how
each ended (``died``: the wait status, so that the host can name a crash's signal); ``kill``
kills one of its own live workers, by the pid it gave (no other process can be named).

Messages are JSON objects, one per SOCK_SEQPACKET datagram.
"""

from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import sys

from codemode.engine import _qjs, _text, _wire
from codemode.engine.worker import _confine
from codemode.engine.worker._serve import run_worker

_MAX_MESSAGE = 65536


def _send(sock: socket.socket, message: _wire.ZygoteHello | _wire.ZygoteReport) -> None:
    try:
        sock.send(json.dumps(message).encode("utf-8"))
    except OSError:  # the host went away (a `codemode run` that started it early and failed)
        os._exit(0)


def _receive(sock: socket.socket) -> tuple[_wire.ZygoteOrder | None, list[int]]:
    """The next message and the descriptors it carried; (None, []) when the host went away."""
    fds = array.array("i")
    try:
        data, ancillary, _flags, _address = sock.recvmsg(_MAX_MESSAGE, socket.CMSG_SPACE(3 * fds.itemsize))
    except ConnectionResetError:  # it went away without reading what this sent (its hello)
        return None, []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        return None, list(fds)
    order: _wire.ZygoteOrder = json.loads(data)
    return order, list(fds)


def main() -> None:
    """The zygote's life: prepare, hold itself, fork workers until the host goes away."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    _text._set_prelude(1, idle=True)
    # The main thread's stack bounds, while /proc is still readable: glibc reads
    # /proc/self/maps for them, which a confined worker cannot (each of its programs tried).
    _qjs.prime_stack()
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # a worker's stdio: nothing of the host's
    problem: str | None = None
    try:
        _confine.drop_identity()
    except OSError as exc:
        problem = f"cannot drop privileges: {exc}"
    landlock = _confine.landlock_nothing() if problem is None else None
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    _send(sock, {"hello": os.getpid(), "problem": problem, "landlock": landlock})
    children: set[int] = set()
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        for fd, _events in poller.poll():
            if fd == wake_r:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass
                _reap(sock, children)
                continue
            message, fds = _receive(sock)
            if message is None:
                os._exit(0)  # the host went away; its workers end when their sockets close
            if "fork" in message and len(fds) == 3:
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    sock.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    for stdio in (0, 1, 2):
                        os.dup2(devnull, stdio)
                    os.close(devnull)
                    run_worker(fds[0], fds[1], fds[2], message["fork"])
                children.add(pid)
                for received in fds:
                    os.close(received)
                _send(sock, {"forked": pid})
            else:
                for received in fds:
                    os.close(received)
                pid = int(message.get("kill", 0))
                if pid in children:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, {"died": pid, "status": status})
