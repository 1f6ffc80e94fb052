"""Landlock enforcement of a :class:`SandboxPolicy` for one child process, fail closed.

How a caller starts a confined command::

    with prepare_confinement(policy) as conf:       # raises SandboxUnavailable: do not run
        env.update(conf.env)
        proc = conf.spawn(argv, env=env, cwd=..., stdin=fd, stdout=fd, stderr=fd)  # fastest
        # or: conf.popen(argv, env=env, ...)         # fast (subprocess.Popen arguments)
        # or: subprocess.Popen(argv, env=env, preexec_fn=conf.preexec)
        # or: ptyprocess.PtyProcess.spawn(argv, env=env, preexec_fn=conf.preexec,
        #                                 pass_fds=conf.pass_fds)   # pass_fds REQUIRED here

The ruleset is built in the parent; the child only sets ``no_new_privs``, calls
``landlock_restrict_self`` and closes the ruleset fd — either in ``preexec`` (Python, which
forces a full ``fork()`` of the host) or, with :meth:`Confinement.spawn` and
:meth:`Confinement.popen`, in a tiny exec helper started with ``posix_spawn`` or ``vfork``
(see ``_exec_helper``). If that fails, the child writes one line starting
with :data:`ENFORCEMENT_FAILED_MARKER` to fd 2 and exits with status
:data:`ENFORCEMENT_FAILED_EXIT` before exec, so the command never runs unconfined;
:func:`explain_denial` turns that output into a clear line.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import select
import shutil
import signal
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from codemode.errors import SandboxUnavailable, UserError
from codemode.sandbox._denial import ENFORCEMENT_FAILED_MARKER, explain_denial
from codemode.sandbox._exec_helper import helper_fd
from codemode.sandbox._landlock import (
    FS_EXECUTE,
    FS_IOCTL_DEV,
    FS_READ_DIR,
    FS_READ_FILE,
    FS_RIGHTS,
    FS_TRUNCATE,
    FS_WRITE_FILE,
    KNOWN_ABI,
    NET_RIGHTS,
    PR_SET_NO_NEW_PRIVS,
    SCOPES,
    SYS_RESTRICT_SELF,
    LandlockStatus,
    RulesetAttr,
    add_path_rule,
    create_ruleset,
    landlock_status,
    mask_for,
    prctl_fn,
    ruleset_attr_size,
    syscall_fn,
)
from codemode.sandbox._policy import (
    WRITABLE_DEVICES,
    SandboxPolicy,
    extra_writable,
    is_within,
)

__all__ = [
    "ENFORCEMENT_FAILED_EXIT",
    "ENFORCEMENT_FAILED_MARKER",
    "Confinement",
    "LandlockStatus",
    "check_policy",
    "explain_denial",
    "landlock_status",
    "prepare_confinement",
]

#: Exit status of a child whose confinement could not be enforced (it never ran the command).
ENFORCEMENT_FAILED_EXIT = 126

_DEVICE_RIGHTS = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV


class Confinement:
    """How to start one child process under a policy; owns the Landlock ruleset fd.

    Use it as a context manager (or call :meth:`close`) so the ruleset fd is closed in the
    parent once the child has been spawned; one Confinement may start several children
    before it is closed. The fd is ``O_CLOEXEC`` and closed by the child itself after
    ``landlock_restrict_self``, so it never reaches the command.

    Start commands with :meth:`spawn` (fastest: ``posix_spawn`` of a tiny exec helper that
    changes directory, confines itself and executes the command), :meth:`popen` (the same
    helper under ``subprocess.Popen``, for its full set of arguments) or pass ``preexec`` as
    ``preexec_fn`` (works everywhere, including ptyprocess, but makes subprocess ``fork()``
    the whole host: several times slower for short commands).

    Attributes:
        preexec: Pass as ``preexec_fn``; ``None`` means unconfined (full-access).
        env: Variables to add to the child's environment (``TMPDIR``).
        description: One line saying what is enforced (for logs and ``doctor``).
        pass_fds: Pass as ``pass_fds``. Required with ptyprocess, which closes every other fd
            before ``preexec_fn`` runs; harmless with subprocess.
    """

    def __init__(
        self, env: dict[str, str] | None = None, description: str = "", ruleset_fd: int | None = None
    ) -> None:
        self.env: dict[str, str] = dict(env or {})
        self.description = description
        self._fd = ruleset_fd  # None: unconfined
        self._preexec: Callable[[], None] | None = None  # built on first use: spawn/popen never need it
        self.closed = False

    @property
    def preexec(self) -> Callable[[], None] | None:
        """Pass as ``preexec_fn``; ``None`` means unconfined (full-access)."""
        if self._preexec is None and self._fd is not None:
            self._preexec = _make_preexec(self, self._fd)
        return self._preexec

    @property
    def confined(self) -> bool:
        """Whether children started through this Confinement are confined."""
        return self._fd is not None

    @property
    def ruleset_fd(self) -> int | None:
        """The Landlock ruleset fd (``None`` when unconfined or closed)."""
        return None if self.closed else self._fd

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """File descriptors the child needs until ``preexec`` has run."""
        return () if self._fd is None or self.closed else (self._fd,)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` confined: ``subprocess.Popen(argv, **kwargs)`` plus this confinement.

        The fast path: the command is started through the exec helper with ``vfork``, so a
        confined start costs about what an unconfined one does. Where the helper is unavailable
        (or ``shell``/``executable`` are given) it falls back to ``preexec_fn=self.preexec``.
        Unconfined (full-access) it is plain ``subprocess.Popen``. ``env`` is used as given
        (add :attr:`env` to it yourself). ``proc.args`` shows the helper's argv.

        Args:
            argv: The program and its arguments (a bare name is looked up in ``env``'s PATH).
            **kwargs: Any ``subprocess.Popen`` argument but ``preexec_fn``.

        Returns:
            The started process.

        Raises:
            TypeError: ``preexec_fn`` was given.
            UserError: The confinement was closed already.
            FileNotFoundError: The program was not found (as ``subprocess.Popen`` raises).
        """
        if "preexec_fn" in kwargs:
            raise TypeError("Confinement.popen sets preexec_fn itself")
        if not self.confined:
            return subprocess.Popen(argv, **kwargs)
        if self.closed or self._fd is None:
            raise UserError("This Confinement was closed; prepare a new one to start a command.")
        hfd = helper_fd()
        if (
            hfd is None
            or kwargs.get("shell")
            or kwargs.get("executable") is not None
            or kwargs.get("pass_fds")
        ):
            # The helper hands the command fds 0-2 only: extra pass_fds need the preexec path.
            return subprocess.Popen(argv, preexec_fn=self.preexec, **kwargs)
        env = kwargs.get("env")
        program = _program_path(argv[0], (env if env is not None else os.environ).get("PATH", os.defpath))
        kwargs.pop("pass_fds", None)
        pass_fds = (self._fd, hfd)  # the helper closes every fd from 3 up before exec
        wrapped = [f"/proc/self/fd/{hfd}", str(self._fd), "", program, *argv]
        return subprocess.Popen(wrapped, pass_fds=pass_fds, **kwargs)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        stdin: int,
        stdout: int,
        stderr: int,
    ) -> SpawnedProcess | subprocess.Popen[bytes]:
        """Start ``argv`` confined in a new session, with ``posix_spawn`` and the exec helper.

        ``subprocess.Popen`` spends ~65 µs of Python per start that ``posix_spawn`` does not;
        the helper changes directory (which ``posix_spawn`` cannot on Python 3.11) before it
        confines itself and executes the command. The command gets ``stdin``, ``stdout``
        and ``stderr`` as fds 0-2 and no other fd; SIGPIPE and SIGXFSZ are reset to their
        defaults, as ``subprocess`` does. Where this path cannot be used (unconfined, no
        helper, one of the fds below 3) it is :meth:`popen` with the same meaning.

        Returns:
            The started process (``pid``, ``returncode``, ``poll()``, ``wait(timeout)``).

        Raises:
            UserError: The confinement was closed already.
            OSError: The command could not be started.
        """
        hfd = helper_fd() if self.confined else None
        fd = self._fd
        if self.closed and self.confined:
            raise UserError("This Confinement was closed; prepare a new one to start a command.")
        if hfd is None or fd is None or min(stdin, stdout, stderr, hfd, fd) < 3:
            return self.popen(
                argv, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True
            )
        program = _program_path(argv[0], env.get("PATH", os.defpath))
        target = next(n for n in (3, 4, 5) if n not in (hfd, fd))  # where the child finds the ruleset
        helper = f"/proc/self/fd/{hfd}"
        pid = os.posix_spawn(
            helper,
            [helper, str(target), os.fspath(cwd), program, *argv],
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, stdin, 0),
                (os.POSIX_SPAWN_DUP2, stdout, 1),
                (os.POSIX_SPAWN_DUP2, stderr, 2),
                (os.POSIX_SPAWN_DUP2, fd, target),
            ],
            setsid=True,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
        return SpawnedProcess(pid, list(argv))

    def close(self) -> None:
        """Close the ruleset fd in this (parent) process; later spawns fail closed."""
        if not self.closed:
            self.closed = True
            if self._fd is not None:
                os.close(self._fd)

    def __enter__(self) -> Confinement:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, AttributeError, TypeError):  # already closed elsewhere, or interpreter exit
            pass

    def __repr__(self) -> str:
        return f"Confinement({self.description!r}, fd={self.ruleset_fd})"


class SpawnedProcess:
    """A child started by :meth:`Confinement.spawn`: the part of ``subprocess.Popen`` callers use.

    Attributes:
        pid: The process id.
        args: The command's argv.
        returncode: None while it runs; its exit status, or ``-signal`` when a signal ended it.
    """

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """Reap the process if it has exited; return ``returncode``."""
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere, as subprocess assumes success
                    self.returncode = 0
                else:
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to exit and return ``returncode``.

        Raises:
            subprocess.TimeoutExpired: It is still running after ``timeout`` seconds.
        """
        if self.poll() is not None:
            assert self.returncode is not None
            return self.returncode
        if timeout is not None:
            try:
                pidfd = os.pidfd_open(self.pid)
            except ProcessLookupError:
                pidfd = None
            if pidfd is not None:
                try:
                    poller = select.poll()
                    poller.register(pidfd, select.POLLIN)
                    ready = poller.poll(max(timeout, 0.0) * 1000)
                finally:
                    os.close(pidfd)
                if not ready:
                    raise subprocess.TimeoutExpired(self.args, timeout)
        with self._lock:
            if self.returncode is None:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    self.returncode = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    self.returncode = 0
            return self.returncode


def _program_path(program: str, search: str) -> str:
    """``program``'s path: as given when it has a ``/``, else found on ``search`` (a PATH).

    Raises:
        FileNotFoundError: Not found, as ``subprocess.Popen`` raises it.
    """
    if "/" in program:
        return program
    found = _which(program, search)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return found


_which_cache: dict[tuple[str, str], str] = {}


def _which(program: str, search: str) -> str | None:
    """``shutil.which`` remembered per (name, PATH) while the found file stays executable."""
    key = (program, search)
    found = _which_cache.get(key)
    if found is not None and os.access(found, os.X_OK):
        return found
    found = shutil.which(program, path=search)
    if found is not None:
        if len(_which_cache) > 256:
            _which_cache.clear()
        _which_cache[key] = found
    return found


def check_policy(policy: SandboxPolicy) -> None:
    """Refuse a policy that would let commands write a protected directory (the state dir).

    Landlock grants by hierarchy and cannot carve a subtree out of a writable root, so a
    protected directory at or under a writable root cannot be kept unwritable. A writable root
    *inside* a protected directory (e.g. a per-session temp dir under the state dir) is fine.

    Args:
        policy: The policy the host is about to use.

    Raises:
        UserError: A protected directory lies at or under a writable root.
    """
    if not policy.confined:
        return
    roots = [os.path.realpath(p) for p in policy.all_writable()]
    roots.extend(extra_writable(policy))
    for protected in policy.protected:
        real = os.path.realpath(protected)
        for root in roots:
            if is_within(real, root):
                raise UserError(
                    f"The protected directory {real} (codemode's state directory) lies inside the "
                    f"writable root {root}, so sandboxed commands could change the archive, logs and "
                    "database. Move the state directory outside every writable root (set "
                    "CODEMODE_HOME) or do not make that directory writable."
                )


def _unavailable_message(policy: SandboxPolicy, status: LandlockStatus) -> str:
    why = status.reason or f"this kernel has Landlock ABI {status.abi}, which lacks file truncation control"
    return (
        f"Sandbox mode '{policy.mode.value}' needs Linux Landlock ABI 3 or later, but {why}; the command "
        "was not run. Use a kernel with Landlock ABI >= 3 enabled (Linux 6.2 or later, 'landlock' in the "
        "lsm= boot parameter), or ask explicitly for sandbox mode 'full-access' (no confinement)."
    )


def _base_env(policy: SandboxPolicy) -> dict[str, str]:
    return {"TMPDIR": str(policy.temp_dir)} if policy.temp_dir is not None else {}


def prepare_confinement(policy: SandboxPolicy) -> Confinement:
    """Build the Landlock ruleset for ``policy`` in this process and return how to apply it.

    ``full-access`` returns an unconfined Confinement (``preexec`` is ``None``). Confined modes
    handle every filesystem right the running ABI knows, allow read and execute everywhere,
    all rights beneath each writable root, and writes (and ioctls) on ``/dev/null``, ``/dev/zero``,
    ``/dev/full``, ``/dev/tty``, ``/dev/ptmx`` and ``/dev/pts`` so terminals work; in
    ``workspace-write`` also ``/dev/shm`` (POSIX semaphores, multiprocessing). ``network:
    false`` handles TCP bind and connect with no port allowed. On ABI 6 and later the command
    also cannot signal, or connect to abstract unix sockets of, processes outside its own
    sandbox (it can still signal its own children).

    Args:
        policy: The sandbox policy.

    Returns:
        A Confinement; close it (or use ``with``) after spawning.

    Raises:
        SandboxUnavailable: Landlock (ABI >= 3), or its network rules (ABI >= 4) when the
            network is off, is unavailable, or the ruleset cannot be built.
        UserError: A protected directory lies under a writable root, or a writable root does
            not exist.
    """
    env = _base_env(policy)
    if not policy.confined:
        return Confinement(env, "full-access: unconfined")
    status = landlock_status()
    if status.abi < 3:
        raise SandboxUnavailable(_unavailable_message(policy, status))
    if not policy.network and not status.network_rules:
        raise SandboxUnavailable(
            f"network: false needs Landlock network rules (ABI 4, Linux 6.7 or later), but this kernel has "
            f"Landlock ABI {status.abi}; the command was not run. Use a newer kernel, or turn the network "
            "on (network=True / --network on)."
        )
    fd = _cached_ruleset(policy, status.abi)
    net = "on" if policy.network else "off (TCP bind/connect denied)"
    writable = [str(p) for p in policy.all_writable()]
    roots = ", ".join(writable) if writable else "none"
    description = f"landlock ABI {status.abi}, {policy.mode.value}, writable: {roots}; network {net}"
    return Confinement(env, description, ruleset_fd=fd)


# Built rulesets, reused while every path they name still is the same inode (Landlock rules
# bind inodes, so a root deleted and re-created needs a new ruleset). Key: (policy, ABI).
_Stamp = tuple[tuple[str, int, int], ...]
_cache: OrderedDict[tuple[SandboxPolicy, int], tuple[int, _Stamp]] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 16


def _stamp(paths: Sequence[str]) -> _Stamp | None:
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        stamps.append((path, st.st_dev, st.st_ino))
    return tuple(stamps)


def _rule_paths(policy: SandboxPolicy) -> list[str]:
    """The directories a ruleset's rules bind, to check it is still current (device nodes,
    which are not replaced while the host runs, are left out)."""
    return [str(p) for p in (*policy.all_writable(), *policy.protected)]


def _cached_ruleset(policy: SandboxPolicy, abi: int) -> int:
    """A private O_CLOEXEC fd of a ruleset for ``policy`` (the caller owns and closes it)."""
    key = (policy, abi)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            fd, stamp = hit
            if _stamp([s[0] for s in stamp]) == stamp:
                _cache.move_to_end(key)
                return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 0)
            del _cache[key]
            os.close(fd)
    check_policy(policy)
    paths = _rule_paths(policy)
    before = _stamp(paths)
    fd = _build_ruleset(policy, abi)
    with _cache_lock:
        if before is not None and _stamp(paths) == before and key not in _cache:
            _cache[key] = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 0), before)
            while len(_cache) > _CACHE_SIZE:
                old_fd, _ = _cache.popitem(last=False)[1]
                os.close(old_fd)
    return fd


def _build_ruleset(policy: SandboxPolicy, abi: int) -> int:
    abi = min(abi, KNOWN_ABI)
    fs_all = mask_for(FS_RIGHTS, abi)
    attr = RulesetAttr(
        handled_access_fs=fs_all,
        handled_access_net=0 if policy.network else mask_for(NET_RIGHTS, abi),
        scoped=mask_for(SCOPES, abi),
    )
    try:
        fd = create_ruleset(attr, ruleset_attr_size(abi), 0)
    except OSError as exc:
        raise SandboxUnavailable(
            f"Creating the Landlock ruleset failed ({exc.strerror}); the command was not run. "
            "Run `codemode doctor` to see what this kernel supports, or ask explicitly for full-access."
        ) from exc
    try:
        add_path_rule(fd, "/", FS_READ_FILE | FS_READ_DIR | FS_EXECUTE)
        for path in (*WRITABLE_DEVICES, *extra_writable(policy)):
            if os.path.exists(path):
                add_path_rule(fd, path, (_DEVICE_RIGHTS if path != "/dev/shm" else fs_all) & fs_all)
        for root in policy.all_writable():
            try:
                add_path_rule(fd, str(root), fs_all)
            except FileNotFoundError as exc:
                raise UserError(
                    f"The writable root {root} does not exist; create it or remove it from the sandbox "
                    "policy."
                ) from exc
    except UserError:
        os.close(fd)
        raise
    except OSError as exc:
        os.close(fd)
        raise SandboxUnavailable(
            f"Adding a Landlock rule failed ({exc}); the command was not run. Check the writable roots, "
            "or ask explicitly for full-access."
        ) from exc
    return fd


def _make_preexec(conf: Confinement, fd: int) -> Callable[[], None]:
    """The child side: prctl + restrict_self + close, everything bound in the parent."""
    prctl = prctl_fn()
    syscall = syscall_fn()
    get_errno = ctypes.get_errno
    write, exit_, close = os.write, os._exit, os.close
    args = (ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_long(fd), ctypes.c_uint32(0))
    marker = ENFORCEMENT_FAILED_MARKER.encode()
    tail = b"; the command was not run.\n"
    ebadf_hint = (
        b" (the ruleset fd was closed before preexec ran: with ptyprocess pass "
        b"pass_fds=conf.pass_fds, and spawn before conf.close())"
    )

    def fail(what: bytes) -> None:
        err = get_errno()
        hint = ebadf_hint if err in (9, 77) else b""  # EBADF, EBADFD
        write(2, marker + b" " + what + b" failed with errno " + str(err).encode() + hint + tail)
        exit_(ENFORCEMENT_FAILED_EXIT)

    def preexec() -> None:
        if conf.closed:
            write(2, marker + b" the confinement was closed before the command was spawned" + tail)
            exit_(ENFORCEMENT_FAILED_EXIT)
        if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            fail(b"prctl(PR_SET_NO_NEW_PRIVS)")
        if syscall(*args) != 0:
            fail(b"landlock_restrict_self")
        close(fd)

    return preexec
