"""Every codemode state directory of this user, so that no host's commands read another's.

Landlock protects the state directories a policy names. A host's own is named by its config;
the others are: the default one (``$CODEMODE_HOME``, and ``$XDG_STATE_HOME/codemode`` or
``~/.local/state/codemode``), and every state dir a host opened, listed in a per-user registry
(``$XDG_STATE_HOME/codemode-hosts/state-dirs``, one absolute path a line). Each host adds its
own at open; the registry directory is protected too, so commands can neither read nor rewrite
it. The file is written whole to a fresh name and renamed into place under a lock, read with a
size cap; entries whose directory is gone are dropped, and only the newest `_KEEP` are kept.

`with_state_dirs` adds these to a policy at every launch (the registry is re-read only when it
changed), leaving out any that a writable root of the policy contains or lies inside (those
could not be kept unreadable; the host's own session temp dirs lie in its own state dir).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
from dataclasses import replace
from pathlib import Path

from codemode.sandbox._policy import SandboxPolicy, extra_writable, is_within

#: The most state dirs the registry keeps (the newest); each costs the launch a few rules.
_KEEP = 64
#: The most of the registry file read.
_CAP = 256 * 1024

_lock = threading.Lock()
_read: tuple[tuple[int, int, int], tuple[str, ...]] | None = None  # (ino, size, mtime) -> paths


def _xdg_base() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    return Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"


def registry_dir() -> Path:
    """The directory of the per-user registry of state dirs."""
    return _xdg_base() / "codemode-hosts"


def default_state_dirs() -> list[str]:
    """The default state dirs (``$CODEMODE_HOME`` when set, and the XDG one) and the registry's
    directory, as real paths."""
    found = [_xdg_base() / "codemode", registry_dir()]
    explicit = os.environ.get("CODEMODE_HOME")
    if explicit:
        found.append(Path(explicit).expanduser())
    return [os.path.realpath(p) for p in found]


def _parse(data: bytes) -> list[str]:
    lines = data.decode("utf-8", "surrogateescape").splitlines()
    return [line for line in lines if line.startswith("/") and "\0" not in line]


def registered_state_dirs() -> tuple[str, ...]:
    """The state dirs in the registry (empty when there is none or it cannot be read)."""
    global _read
    path = registry_dir() / "state-dirs"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ()
    try:
        st = os.fstat(fd)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        with _lock:
            if _read is not None and _read[0] == stamp:
                return _read[1]
        if not (st.st_mode & 0o170000 == 0o100000):
            return ()
        paths = tuple(_parse(os.read(fd, _CAP)))
    except OSError:
        return ()
    finally:
        os.close(fd)
    with _lock:
        _read = (stamp, paths)
    return paths


def register_state_dir(state_dir: Path) -> None:
    """Add ``state_dir`` to the registry (newest last), dropping entries that no longer exist.

    Best effort: a registry that cannot be written leaves this host's state dir protected only
    from its own commands and from hosts that use the default state dir.
    """
    real = os.path.realpath(state_dir)
    folder = registry_dir()
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            lock_fd = os.open(
                "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
            )
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                _rewrite(dir_fd, real)
            finally:
                os.close(lock_fd)
        finally:
            os.close(dir_fd)


def _rewrite(dir_fd: int, real: str) -> None:
    try:
        fd = os.open("state-dirs", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        old: list[str] = []
    else:
        try:
            regular = os.fstat(fd).st_mode & 0o170000 == 0o100000
            old = _parse(os.read(fd, _CAP)) if regular else []
        finally:
            os.close(fd)
    kept = [p for p in dict.fromkeys(old) if p != real and os.path.isdir(p)]
    text = "".join(f"{p}\n" for p in [*kept[-(_KEEP - 1) :], real])
    partial = f".state-dirs.{secrets.token_hex(6)}"
    fd = os.open(
        partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
    )
    try:
        os.write(fd, text.encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)
    os.rename(partial, "state-dirs", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def with_state_dirs(policy: SandboxPolicy) -> SandboxPolicy:
    """``policy`` with every other known state dir protected as well (see the module doc).

    Only existing directories are added, after the policy's own protected ones (the first stays
    the host's own), and none that overlaps a writable root.
    """
    if not policy.confined:
        return policy
    own = [os.path.realpath(p) for p in policy.protected]
    roots = [os.path.realpath(p) for p in policy.all_writable()] + list(extra_writable(policy))
    extra: list[Path] = []
    for path in dict.fromkeys([*default_state_dirs(), *registered_state_dirs()]):
        if path in own or path == "/" or not os.path.isdir(path):
            continue
        if any(is_within(path, root) or is_within(root, path) for root in roots):
            continue
        extra.append(Path(path))
    if not extra:
        return policy
    return replace(policy, protected=(*policy.protected, *extra))
