"""Starting confined foreground commands quickly: a spawner thread per sandbox policy.

Landlock confines the calling *thread* and everything it starts afterwards. Confining a child
with ``preexec_fn`` forces CPython to ``fork()`` (no ``vfork`` fast path) and to run Python in
the child, which made a sandboxed ``true`` about 4x slower than an unconfined one. Instead, one
dedicated thread per policy confines itself once (``prctl(PR_SET_NO_NEW_PRIVS)`` and
``landlock_restrict_self`` with the ruleset :func:`codemode.sandbox.prepare_confinement`
built) and then does nothing but start processes; they inherit its Landlock domain from the
moment they exist, and the fast spawn path stays. The host's other threads are unaffected
(Landlock domains and ``no_new_privs`` are per thread). The thread never touches the file
system beyond what ``posix_spawn``/``vfork`` needs, so its own confinement costs nothing.

Fails closed: if the thread cannot confine itself, no command is started through it.
"""

from __future__ import annotations

import ctypes
import queue
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from codemode.errors import SandboxUnavailable, ToolError
from codemode.sandbox import LandlockStatus, SandboxPolicy, landlock_status, prepare_confinement

_PR_SET_NO_NEW_PRIVS = 38
_SYS_LANDLOCK_RESTRICT_SELF = 446
_MAX_SPAWNERS = 8


def _restrict_this_thread(ruleset_fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxUnavailable(
            f"prctl(PR_SET_NO_NEW_PRIVS) failed (errno {ctypes.get_errno()}); the command was not run"
        )
    if libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_long(ruleset_fd), ctypes.c_uint32(0)
    ):
        raise SandboxUnavailable(
            f"landlock_restrict_self failed (errno {ctypes.get_errno()}); the command was not run. "
            "Run `codemode doctor`."
        )


class ConfinedSpawner:
    """A thread confined by one policy that starts processes on request.

    Args:
        policy: A confined sandbox policy.

    Raises:
        ToolError: The policy cannot be enforced here (Landlock missing or the ruleset cannot
            be built or applied); nothing is started.
    """

    def __init__(self, policy: SandboxPolicy) -> None:
        self.env: dict[str, str] = {}
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event] | None] = (
            queue.SimpleQueue()
        )
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(policy,), name="codemode-spawner", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            error = self._error
            if isinstance(error, SandboxUnavailable):
                raise ToolError(str(error), {"error": "sandbox_unavailable"}) from error
            raise error

    def _run(self, policy: SandboxPolicy) -> None:
        try:
            with prepare_confinement(policy) as conf:
                if conf.ruleset_fd is None:
                    raise SandboxUnavailable(
                        "the policy produced no Landlock ruleset; the command was not run"
                    )
                _restrict_this_thread(conf.ruleset_fd)
                self.env = dict(conf.env)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append(("ok", fn()))
            except BaseException as exc:
                box.append(("error", exc))
            done.set()

    def popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        """``subprocess.Popen(*args, **kwargs)``, started from the confined thread.

        Raises:
            OSError: As ``Popen`` does.
        """
        box: list[Any] = []
        done = threading.Event()
        self._jobs.put((lambda: subprocess.Popen(*args, **kwargs), box, done))
        done.wait()
        kind, value = box[0]
        if kind == "error":
            raise value
        proc: subprocess.Popen[bytes] = value
        return proc

    def close(self) -> None:
        """Let the thread end."""
        self._jobs.put(None)


class Spawners:
    """Spawner threads by (policy, Landlock status), the few most recent kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spawners: OrderedDict[tuple[SandboxPolicy, LandlockStatus], ConfinedSpawner] = OrderedDict()

    def get(self, policy: SandboxPolicy) -> ConfinedSpawner:
        """The spawner for a confined policy (created on first use).

        Raises:
            ToolError: The policy cannot be enforced (fail closed).
        """
        # Keyed by the Landlock status too, so a changed (or simulated) kernel capability is
        # seen at once: an unavailable Landlock makes prepare_confinement refuse.
        key = (policy, landlock_status())
        with self._lock:
            spawner = self._spawners.get(key)
            if spawner is not None:
                self._spawners.move_to_end(key)
                return spawner
        spawner = ConfinedSpawner(policy)
        with self._lock:
            self._spawners[key] = spawner
            while len(self._spawners) > _MAX_SPAWNERS:
                _, old = self._spawners.popitem(last=False)
                old.close()
        return spawner

    def close(self) -> None:
        """End every spawner thread."""
        with self._lock:
            spawners = list(self._spawners.values())
            self._spawners.clear()
        for spawner in spawners:
            spawner.close()
