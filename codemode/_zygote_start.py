"""Starting the engine's zygote process (engine mode ``process``, `codemode.engine._zygote_client`).

A leaf, stdlib-only, so that ``codemode run`` can start the zygote before it imports the host:
the zygote's interpreter then boots on another CPU while this one imports (~30 ms of a cold
run that it no longer waits for), and the engine adopts it at the first program.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

WORKER_DIR = Path(__file__).parent / "engine" / "worker"

Started = tuple["subprocess.Popen[bytes]", socket.socket]

_early: Started | None = None
_taken = False  # the engine took one: it starts (and restarts) its zygote itself from then on
_lock = threading.Lock()


def launch() -> Started:
    """A new zygote process and the host's end of its socket (the zygote says hello on it
    once it is ready).

    Raises:
        OSError: It could not be started.
    """
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = {"PATH": os.defpath, "LANG": "C.UTF-8"}  # nothing of the host's environment
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WORKER_DIR), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
    return process, mine


def launch_early() -> None:
    """Start a zygote now for the engine to adopt at its first program (once, and only before
    the engine took one; a failure is left for that program's own start to report)."""
    global _early
    with _lock:
        if _early is None and not _taken:
            try:
                _early = launch()
            except OSError:
                pass


def take() -> Started:
    """The zygote `launch_early` started, when it still runs, else a new one.

    Raises:
        OSError: A new one could not be started.
    """
    global _early, _taken
    with _lock:
        early, _early = _early, None
        _taken = True
    if early is not None:
        if early[0].poll() is None:
            return early
        early[1].close()
    return launch()
