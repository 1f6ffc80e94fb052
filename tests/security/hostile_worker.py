"""A hostile engine worker for the attack tests: QuickJS exploited, the worker process in the
attacker's hands (engine mode ``process``).

No exploit is needed to play one: the test holds the worker's ends of a `WorkerProcess`'s three
sockets and writes what it likes there, from a thread of its own. The pool hands that worker to
the next program (`HostileWorker.install`), as if the zygote had forked it; the pid it carries is
a live process the zygote never forked (``bystander``), which must outlive every attack: the
host may ask the zygote to kill its worker, and the zygote must refuse any pid but its own.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

import pytest

from codemode import Host
from codemode.engine import _wire
from codemode.engine._processes import ProcessPool, WorkerProcess
from tests.host_support import alive

Attack = Callable[["HostileWorker"], None]


class HostileWorker:
    """The worker's ends of its three sockets, and the thread that runs the attack on them."""

    def __init__(self) -> None:
        self.host_ctl, self.ctl = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.host_sync, self.sync = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.host_results, self.results = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.bystander = subprocess.Popen(["sleep", "600"])
        self.process: WorkerProcess | None = None
        self.run: _wire.RunMessage | None = None
        self.failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> HostileWorker:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process is None:  # never handed out: the host's ends are the test's to close
            self.host_ctl.close()
            self.host_sync.close()
            self.host_results.close()
        for sock in (self.ctl, self.sync, self.results):  # the worker is gone (its thread's reads end)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self._thread is not None:
            self._thread.join(30)
        self.bystander.kill()
        self.bystander.wait()

    def install(self, host: Host, monkeypatch: pytest.MonkeyPatch, attack: Attack) -> None:
        """The next worker ``host``'s pool starts is this one, of the session that asks, and
        ``attack`` runs on a thread once it is handed out (the workers after it are real)."""
        pool = host.engine.processes
        assert pool is not None
        real_start = pool._start

        async def start(session_id: str) -> WorkerProcess:
            monkeypatch.setattr(pool, "_start", real_start)
            self.host_ctl.setblocking(False)
            self.process = WorkerProcess(
                self.bystander.pid, self.host_ctl, self.host_sync, self.host_results, session_id
            )
            self._thread = threading.Thread(target=self._attack, args=(attack,), daemon=True)
            self._thread.start()
            return self.process

        monkeypatch.setattr(pool, "_start", start)

    def _attack(self, attack: Attack) -> None:
        try:
            attack(self)
        except (OSError, _wire.WireError):
            pass  # the host closed the worker's sockets: the attack is over
        except BaseException as exc:
            self.failure = exc

    # -- what the attack does ---------------------------------------------------------------

    def take_run(self) -> _wire.RunMessage:
        """Wait for the program the host sends (on the sync socket)."""
        kind, body = _wire.read_frame(self.sync)
        assert kind == _wire.RUN, kind
        message: _wire.RunMessage = json.loads(body)
        self.run = message
        return message

    def send(self, kind: int, body: bytes = b"") -> None:
        """One frame on the control socket."""
        self.ctl.sendall(_wire.frame(kind, body))

    def send_json(self, kind: int, value: Any) -> None:
        self.send(kind, json.dumps(value).encode())

    def ask(self, kind: int, body: bytes) -> tuple[int, bytes]:
        """One call on the sync socket, and its answer."""
        self.sync.sendall(_wire.frame(kind, body))
        return _wire.read_frame(self.sync)

    def end(self, run_id: int, **fields: Any) -> None:
        """An END: a program that printed nothing and ended well, with ``fields`` changed."""
        message = {
            "run": run_id,
            "output": "",
            "error": None,
            "cpu_seconds": 0.0,
            "output_dropped_bytes": 0,
            "dropped_timers": 0,
            "pending": [],
            "unobserved": [],
            "images": [],
            **fields,
        }
        self.send_json(_wire.END, message)

    def wait_closed(self) -> None:
        """Read the control socket until the host closes it (the worker retired or killed)."""
        while self.ctl.recv(1 << 20):
            pass

    # -- what the test checks after --------------------------------------------------------

    def check(self) -> None:
        """The attack ran as written (its own asserts held), and the host killed no stranger."""
        if self.failure is not None:
            raise self.failure
        assert alive(self.bystander.pid), "the host had a process killed that is not its worker"


def worker_of(pool: ProcessPool, pid: int) -> bool:
    """Whether the pool still holds a worker of this pid (idle or busy)."""
    return pid in pool.worker_pids() or pid in pool.busy_pids()
