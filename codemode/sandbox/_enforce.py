"""The one launch path: every process started under a policy goes through :func:`launch`.

How a caller starts a command::

    proc = launch(LaunchSpec(argv, cwd=..., env=..., policy=policy, stdio=(0_fd, 1_fd, 2_fd)))
    # raises SandboxUnavailable (a layer cannot be applied: nothing ran)

The host builds everything in its own process (the Landlock ruleset, the seccomp program, the
command's cgroup) and starts the launcher with ``posix_spawn`` (:mod:`._spawn`); the launcher
applies every layer in one place, in a fixed order, and executes the command (``launcher.c``):

1. cgroup: the command joins its own cgroup (with a pids limit), so ``stop`` ends every
   descendant and a fork bomb stops at ``pids.max``;
2. a mount namespace of its own in which ``/dev/shm`` is the session's directory
   (``SandboxPolicy.shm_dir``, inside its temp dir and so inside its disk quota): no other
   session sees its shared memory;
3. capabilities: bounding, ambient, effective, permitted and inheritable sets all emptied;
4. ``no_new_privs``: setuid binaries and file capabilities grant nothing;
   With a network allowlist also a network namespace of its own, loopback only, where the
   host's filtering proxy listens (:mod:`._netns`);
5. Landlock: the filesystem rules of the policy (reads everywhere but the protected state
   directory, writes beneath the writable roots only), TCP with the network off (with an
   allowlist: connect to the proxy's port only), and the signal / abstract-socket scopes;
6. seccomp: :mod:`._seccomp`'s filter (terminal injection, raw and packet sockets, ptrace,
   mounts, namespaces, host-wide settings, resource calls on other processes, ...).

A layer that cannot be applied refuses the command with a message naming it: the host raises
:class:`SandboxUnavailable` before starting anything, and the launcher exits 126 with one line
starting with :data:`ENFORCEMENT_FAILED_MARKER` on fd 2 before it executes anything. There is no
fallback with fewer layers. ``full-access`` starts through the same launcher with no layer but
the cgroup. The background supervisor starts its command with the same launcher and fds
(:meth:`Confinement.fds` gives them), through the same :func:`._spawn.spawn_helper`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import platform
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType

from codemode._host_secrets import without_host_secrets
from codemode.errors import SandboxUnavailable, UserError
from codemode.network import PROXY_PORT, proxy_env
from codemode.sandbox._denial import ENFORCEMENT_FAILED_MARKER, explain_denial
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
    SCOPES,
    LandlockStatus,
    RulesetAttr,
    add_path_rule,
    add_port_rule,
    create_ruleset,
    landlock_status,
    mask_for,
    ruleset_attr_size,
)
from codemode.sandbox._launcher import launcher_fd, launcher_unavailable_reason
from codemode.sandbox._netns import open_proxy_channel
from codemode.sandbox._policy import (
    WRITABLE_DEVICES,
    SandboxPolicy,
    check_policy,
    extra_writable,
)
from codemode.sandbox._seccomp import filter_fd
from codemode.sandbox._spawn import Layers, Process, spawn_helper
from codemode.sandbox._state_dirs import with_state_dirs

__all__ = [
    "ENFORCEMENT_FAILED_EXIT",
    "ENFORCEMENT_FAILED_MARKER",
    "Confinement",
    "LandlockStatus",
    "LaunchSpec",
    "explain_denial",
    "landlock_status",
    "launch",
    "prepare_confinement",
]

#: Exit status of a child whose confinement could not be enforced (it never ran the command).
ENFORCEMENT_FAILED_EXIT = 126

_DEVICE_RIGHTS = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
_MAKE_CHAR, _MAKE_BLOCK = 1 << 6, 1 << 11
#: Rights never granted anywhere: a device node made in the workspace would reach the device.
_NEVER = _MAKE_CHAR | _MAKE_BLOCK
#: What "readable" means: files may be read and executed (directories may be listed everywhere).
_READ = FS_READ_FILE | FS_EXECUTE
#: Machines the seccomp filter has a syscall table for (the launcher itself builds anywhere).
_SECCOMP_MACHINES = ("x86_64", "AMD64", "amd64")


@dataclass(frozen=True)
class LaunchSpec:
    """One process to start under a policy.

    Attributes:
        argv: The program and its arguments (a bare name is looked up on ``env``'s PATH).
        cwd: The working directory.
        env: The whole environment (the policy's own variables, ``TMPDIR``, are added).
        policy: The sandbox policy to apply.
        stdio: fds for the command's 0, 1 and 2; or None with ``terminal``.
        terminal: A terminal device to open as 0-2 and make the controlling terminal.
        cgroup: A cgroup directory for the command to join (``CgroupRoot.make``), or None.
    """

    argv: Sequence[str]
    cwd: str
    env: Mapping[str, str]
    policy: SandboxPolicy
    stdio: tuple[int, int, int] | None = None
    terminal: str | None = None
    cgroup: str | None = None


@dataclass
class Confinement:
    """The prepared layers of one policy, as fds the launcher applies in the child.

    Use it as a context manager (or call :meth:`close`): the ruleset fd is this Confinement's
    own; the launcher and seccomp memfds are shared per process and stay open.

    Attributes:
        env: Variables the policy adds to the command's environment (``TMPDIR``).
        description: One line saying what is enforced (for logs and ``doctor``).
        confined: Whether the layers are applied (False in full-access).
        network_refusals: With a network allowlist, the connections the proxy refused (it
            appends while the command runs); None otherwise.
    """

    env: dict[str, str]
    description: str
    confined: bool
    _helper: int
    _ruleset: int | None = None
    _seccomp: int | None = None
    _shm: int | None = None
    _net: int | None = None
    network_refusals: list[str] | None = None
    _closed: bool = field(default=False, repr=False)

    def fds(self) -> Layers:
        """``helper_fd``, ``ruleset_fd`` and ``seccomp_fd`` for :func:`._spawn.spawn_helper`.

        Raises:
            UserError: The confinement was closed already.
        """
        if self._closed:
            raise UserError("This Confinement was closed; prepare a new one to start a command.")
        return Layers(
            helper_fd=self._helper,
            ruleset_fd=self._ruleset,
            seccomp_fd=self._seccomp,
            shm_fd=self._shm,
            net_fd=self._net,
        )

    def close(self) -> None:
        """Close the ruleset, shm directory and proxy channel fds in this (parent) process."""
        if not self._closed:
            self._closed = True
            for fd in (self._ruleset, self._shm, self._net):
                if fd is not None:
                    os.close(fd)

    def __enter__(self) -> Confinement:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, AttributeError, TypeError):  # already closed elsewhere, or interpreter exit
            pass


def launch(spec: LaunchSpec) -> Process:
    """Start ``spec.argv`` under ``spec.policy``, every layer applied before it runs.

    Returns:
        The started process (in a new session; ``pid``, ``poll()``, ``wait(timeout)``, and the
        ``cgroup`` it joined).

    Raises:
        SandboxUnavailable: A layer of a confined mode cannot be applied here; nothing ran.
        UserError: The policy would make the state directory writable, or a root is missing.
        FileNotFoundError: The program was not found.
        OSError: The process could not be started.
    """
    with prepare_confinement(spec.policy) as conf:
        env = {**without_host_secrets(spec.env), **conf.env}  # the one launch path: never the host's secrets
        program = _program_path(spec.argv[0], env.get("PATH", os.defpath))
        procs_fd = None
        if spec.cgroup is not None:
            procs_fd = os.open(os.path.join(spec.cgroup, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            proc = spawn_helper(
                **conf.fds(),
                program=program,
                argv=spec.argv,
                env=env,
                cwd=spec.cwd,
                stdio=spec.stdio,
                terminal=spec.terminal,
                cgroup_procs_fd=procs_fd,
                cgroup=spec.cgroup,
            )
            proc.network_refusals = conf.network_refusals
            return proc
        finally:
            if procs_fd is not None:
                os.close(procs_fd)


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


def _unavailable_message(policy: SandboxPolicy, status: LandlockStatus) -> str:
    why = status.reason or f"this kernel has Landlock ABI {status.abi}, which lacks file truncation control"
    return (
        f"Sandbox mode '{policy.mode.value}' needs Linux Landlock ABI 3 or later, but {why}; the command "
        "was not run. Use a kernel with Landlock ABI >= 3 enabled (Linux 6.2 or later, 'landlock' in the "
        "lsm= boot parameter), or ask explicitly for sandbox mode 'full-access' (no confinement)."
    )


def _launcher_or_refuse(policy: SandboxPolicy) -> int:
    fd = launcher_fd()
    if fd is None:
        raise SandboxUnavailable(
            f"Commands start through codemode's launcher, which cannot run here "
            f"({launcher_unavailable_reason()}); the command was not run. Sandbox mode "
            f"'{policy.mode.value}' cannot be applied without it."
        )
    return fd


def prepare_confinement(policy: SandboxPolicy) -> Confinement:
    """Build every layer of ``policy`` in this process, as fds for the exec helper.

    Confined modes handle every filesystem right the running ABI knows. Files may be read and
    executed everywhere except beneath the protected directories (directories may be listed
    everywhere); beneath each writable root every right but making device nodes is granted;
    ``/dev/null``, ``/dev/zero``, ``/dev/full``, ``/dev/tty`` and ``/dev/ptmx`` may be written
    (the command's own terminal and pipes are its fds 0-2; other terminals in ``/dev/pts`` are
    out of reach); in ``workspace-write`` also ``/dev/shm``. ``network: false`` handles TCP
    bind and connect with no port allowed (the seccomp filter also refuses every socket but
    netlink route). On ABI 6 and later the command also cannot signal, or connect to abstract unix
    sockets of, processes outside its own sandbox.

    Args:
        policy: The sandbox policy.

    Returns:
        A Confinement; close it (or use ``with``) after spawning.

    Raises:
        SandboxUnavailable: The exec helper, Landlock (ABI >= 3), its network rules (ABI >= 4)
            when the network is off, or the seccomp filter is unavailable.
        UserError: A protected directory lies under a writable root, or a writable root does
            not exist.
    """
    env = {"TMPDIR": str(policy.temp_dir)} if policy.temp_dir is not None else {}
    helper = _launcher_or_refuse(policy)
    if not policy.confined:
        return Confinement(env, "full-access: unconfined", False, helper)
    status = landlock_status()
    if status.abi < 3:
        raise SandboxUnavailable(_unavailable_message(policy, status))
    if (not policy.network or policy.proxied) and not status.network_rules:
        what = "a network allowlist" if policy.proxied else "network: false"
        raise SandboxUnavailable(
            f"{what} needs Landlock network rules (ABI 4, Linux 6.7 or later), but this kernel has "
            f"Landlock ABI {status.abi}; the command was not run. Use a newer kernel, or turn the network "
            "on (network=True / --network on)."
        )
    policy = with_state_dirs(policy)  # no command reads any codemode state dir of this user
    if platform.machine() not in _SECCOMP_MACHINES:
        raise SandboxUnavailable(
            f"The seccomp filter's syscall table exists for x86_64 only, and this machine is "
            f"{platform.machine()}; the command was not run. Ask explicitly for sandbox mode "
            "'full-access' (no confinement) on this machine."
        )
    try:
        seccomp = filter_fd(policy.network, proxied=policy.proxied)
    except OSError as exc:
        raise SandboxUnavailable(
            f"The seccomp filter could not be prepared ({exc.strerror or exc}); the command was not run."
        ) from exc
    shm = _open_shm_dir(policy)
    try:
        fd = _cached_ruleset(policy, status.abi)
    except BaseException:
        if shm is not None:
            os.close(shm)
        raise
    net = "on" if policy.network else "off (every socket but netlink route refused, TCP denied by Landlock)"
    net_fd, refusals = None, None
    if policy.proxied:
        allow = policy.network_allow or ()
        net = f"only through the proxy to {', '.join(allow) or 'nothing'} (a network namespace of its own)"
        env.update(proxy_env())
        try:
            net_fd, refusals = open_proxy_channel(allow)
        except OSError as exc:
            for held in (fd, shm):
                if held is not None:
                    os.close(held)
            raise SandboxUnavailable(
                f"The channel to the network proxy could not be made ({exc}); the command was not run."
            ) from exc
    writable = [str(p) for p in policy.all_writable()]
    roots = ", ".join(writable) if writable else "none"
    description = (
        f"landlock ABI {status.abi}, {policy.mode.value}, writable: {roots}; network {net}; "
        f"/dev/shm: {policy.shm_dir or 'the host one (no session temp dir)'}; capabilities dropped, "
        "no_new_privs, seccomp"
    )
    return Confinement(env, description, True, helper, fd, seccomp, shm, net_fd, refusals)


def _open_shm_dir(policy: SandboxPolicy) -> int | None:
    """An O_PATH fd of the session's ``/dev/shm`` directory, made on the session's first command.

    It lies in the session's temp dir, which commands write: it is created without following
    a link and opened with ``O_NOFOLLOW``; anything there that is not a directory refuses the
    command (the launcher checks again that it binds this very inode).

    Raises:
        SandboxUnavailable: It cannot be created or is not a directory.
    """
    path = policy.shm_dir
    if path is None:
        return None
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxUnavailable(
            f"The session's /dev/shm directory {path} cannot be used ({exc.strerror}; it must be a "
            "directory, not a link or a file); the command was not run. Remove it and run the "
            "command again: it is made afresh."
        ) from exc


# Built rulesets, reused while the writable roots and protected directories are the same
# inodes (Landlock rules bind inodes, so a root deleted and re-created needs a new ruleset).
# The directories around the state dir were granted entry by entry: an entry made in one of
# them later gets its own rule added to the cached ruleset (rules only ever add access; a child
# already confined keeps the rules it got), so a busy /tmp beside the state dir costs one
# listing, not a new ruleset. Key: (policy, ABI, whether the shim dir exists).
_Identity = tuple[tuple[str, int, int], ...]


@dataclass
class _Cached:
    """One cached ruleset and what it was built from."""

    fd: int
    fixed: _Identity  # the writable roots and protected dirs
    targets: list[str]  # the protected dirs (real paths)
    listed: dict[str, int]  # each split directory -> its st_mtime_ns when last listed
    seen: dict[str, set[tuple[str, int]]]  # each split directory -> (name, inode) of its entries


_cache: OrderedDict[tuple[SandboxPolicy, int, bool], _Cached] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 16


def _identity(paths: Sequence[str]) -> _Identity | None:
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        stamps.append((path, st.st_dev, st.st_ino))
    return tuple(stamps)


def _refresh(cached: _Cached) -> bool:
    """Grant what appeared in the split directories since they were listed.

    Returns:
        False when the ruleset must be rebuilt (a root or protected dir is not the same inode,
        or a split directory is gone).
    """
    if _identity([p for p, _, _ in cached.fixed]) != cached.fixed:
        return False
    for directory, mtime in cached.listed.items():
        try:
            now = os.stat(directory).st_mtime_ns  # before listing: a later entry changes it again
            if now == mtime:
                continue
            entries = list(os.scandir(directory))
        except OSError:
            return False
        seen = cached.seen[directory]
        on_the_way = _on_the_way(cached.targets)
        for entry in entries:
            key = (entry.name, entry.inode())
            if key in seen:
                continue
            seen.add(key)
            if entry.is_symlink() or entry.path in on_the_way:
                continue
            try:
                add_path_rule(cached.fd, entry.path, _READ, follow=False)
            except FileNotFoundError:
                continue
            except OSError:
                return False
        cached.listed[directory] = now
    return True


def read_grants(protected: Sequence[str]) -> tuple[list[str], dict[str, set[tuple[str, int]]]]:
    """Where to grant reading so that everything but ``protected`` (real paths) is readable.

    Landlock grants by hierarchy, so a directory cannot be carved out of a readable tree. Instead
    each ancestor of a protected directory is split: every entry of it is granted on its own,
    except the one leading to the protected directory, which is split in turn. Symbolic links
    are not granted (their targets are, on their own paths).

    Returns:
        The paths to grant, and each split directory with the (name, inode) of the entries it
        held (a new entry in one of them needs a rule of its own).
    """
    targets = {p.rstrip("/") or "/" for p in protected}
    if not targets or "/" in targets:
        return ([] if "/" in targets else ["/"]), {}
    grants: list[str] = []
    split: dict[str, set[tuple[str, int]]] = {}
    # One set lookup per entry, not a scan of the targets: a split directory may hold thousands
    # of entries (a temp dir of many sessions' state dirs) and the registry names up to 64 targets.
    on_the_way = _on_the_way(targets)

    def walk(directory: str) -> None:
        seen = split.setdefault(directory, set())
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            seen.add((entry.name, entry.inode()))
            path = entry.path
            if path in targets or entry.is_symlink():
                continue
            if path in on_the_way:
                walk(path)
            else:
                grants.append(path)

    walk("/")
    return grants, split


def _cached_ruleset(policy: SandboxPolicy, abi: int) -> int:
    """A private O_CLOEXEC fd of a ruleset for ``policy`` (the caller owns and closes it)."""
    # Whether the shim dir exists is part of the key: one made after a ruleset was built needs
    # its rule.
    # The ruleset depends on whether the network is proxied, not on the allowlist itself.
    policy = replace(policy, network_allow=() if policy.network_allow is not None else None)
    key = (policy, abi, policy.shim_dir is not None and policy.shim_dir.is_dir())
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            if _refresh(hit):
                _cache.move_to_end(key)
                return fcntl.fcntl(hit.fd, fcntl.F_DUPFD_CLOEXEC, 0)
            del _cache[key]
            os.close(hit.fd)
    check_policy(policy)
    protected = [os.path.realpath(p) for p in policy.protected]
    shm = [str(policy.shm_dir)] if policy.shm_dir is not None else []
    shim = [str(policy.shim_dir)] if key[2] else []
    fixed_paths = [str(p) for p in policy.all_writable()] + protected + shm + shim
    before = _identity(fixed_paths)
    # Modification times before listing: an entry made while the ruleset is built is granted
    # at the next refresh.
    mtimes = {}
    with contextlib.suppress(OSError):
        mtimes = {d: os.stat(d).st_mtime_ns for d in _split_dirs(protected)}
    grants, split = read_grants(protected)
    fd = _build_ruleset(policy, abi, grants)
    with _cache_lock:
        if before is not None and key not in _cache and set(mtimes) == set(split):
            _cache[key] = _Cached(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 0), before, protected, mtimes, split)
            while len(_cache) > _CACHE_SIZE:
                os.close(_cache.popitem(last=False)[1].fd)
    return fd


def _on_the_way(targets: Iterable[str]) -> frozenset[str]:
    """Every target (a real path without a trailing slash) and every directory above one."""
    found: set[str] = set()
    for target in targets:
        path = target.rstrip("/") or "/"
        while path not in found:
            found.add(path)
            if path == "/":
                break
            path = os.path.dirname(path)
    return frozenset(found)


def _split_dirs(protected: Sequence[str]) -> list[str]:
    """The directories `read_grants` lists: every ancestor of a protected directory."""
    found = {"/"}
    for target in protected:
        path = target.rstrip("/")
        while path not in ("", "/"):
            path = os.path.dirname(path)
            found.add(path or "/")
    return sorted(found) if protected and "/" not in protected else []


def _build_ruleset(policy: SandboxPolicy, abi: int, read_paths: Sequence[str]) -> int:
    abi = min(abi, KNOWN_ABI)
    fs_all = mask_for(FS_RIGHTS, abi)
    attr = RulesetAttr(
        handled_access_fs=fs_all,
        handled_access_net=0 if policy.network and not policy.proxied else mask_for(NET_RIGHTS, abi),
        scoped=mask_for(SCOPES, abi),
    )
    try:
        fd = create_ruleset(attr, ruleset_attr_size(abi), 0)
    except OSError as exc:
        raise SandboxUnavailable(
            f"Creating the Landlock ruleset failed ({exc.strerror}); the command was not run. "
            "Run `codemode doctor` to see what this kernel supports, or ask explicitly for full-access."
        ) from exc
    writable = fs_all & ~_NEVER
    try:
        if policy.proxied:  # the proxy's port in the command's own network namespace, nothing else
            add_port_rule(fd, PROXY_PORT, mask_for((NET_RIGHTS[1],), abi))
        add_path_rule(fd, "/", FS_READ_DIR)
        for path in read_paths:
            try:
                add_path_rule(fd, path, _READ, follow=False)
            except FileNotFoundError:  # removed since it was listed: nothing to grant
                continue
        for path in (*WRITABLE_DEVICES, *extra_writable(policy)):
            if os.path.exists(path):
                add_path_rule(fd, path, (_DEVICE_RIGHTS if path != "/dev/shm" else writable) & fs_all)
        if policy.shim_dir is not None and os.path.isdir(policy.shim_dir):
            # Beneath the protected state dir: the host's shims, readable and executable only.
            add_path_rule(fd, str(policy.shim_dir), _READ | FS_READ_DIR, follow=False)
        if policy.shm_dir is not None:
            # Seen as /dev/shm, the bind mount's root is this directory: its own rule applies
            # (the walk up from a file stops there, not at the temp dir's rule).
            shm_rights = writable if extra_writable(policy) else (_READ | FS_READ_DIR)
            add_path_rule(fd, str(policy.shm_dir), shm_rights, follow=False)
        for root in policy.all_writable():
            try:
                add_path_rule(fd, str(root), writable)
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
