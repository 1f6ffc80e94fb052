"""Sandbox policy as plain data, and the check that refuses a policy that cannot be kept;
enforcement lives elsewhere."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from codemode.errors import UserError


class SandboxMode(enum.StrEnum):
    """How much a command or file tool may change.

    * ``read-only``: nothing is writable but ``/dev/null`` and similar devices.
    * ``workspace-write``: the writable roots and a private temp dir are writable,
      everything else readable and executable (the default).
    * ``full-access``: no confinement; only on explicit request.
    """

    READ_ONLY = "read-only"
    WORKSPACE_WRITE = "workspace-write"
    FULL_ACCESS = "full-access"


@dataclass(frozen=True)
class SandboxPolicy:
    """What commands and file tools of one host may do.

    Attributes:
        mode: The sandbox mode.
        writable_roots: Directories (resolved, absolute) writable in ``workspace-write``.
        network: Whether TCP connect/bind are allowed for confined commands.
        network_allow: With ``network``, the domains commands may reach (checked entries of
            ``codemode.network``): then a command has a network namespace of its own whose one
            way out is the host's filtering proxy. None: the host's network, unfiltered.
        temp_dir: The private per-session temp dir (``TMPDIR``), writable in
            ``workspace-write``; ``None`` until the host creates it.
        protected: Directories never writable from inside the sandbox (the state dir).
        trash_inbox: The session's ``rm`` inbox, writable like ``temp_dir`` but on the state
            dir's disk, not in the temp dir's tmpfs: the ``rm`` shim renames what it removes
            there (no copy into the tmpfs's quota); ``None`` keeps it inside ``temp_dir``.
    """

    mode: SandboxMode = SandboxMode.WORKSPACE_WRITE
    writable_roots: tuple[Path, ...] = ()
    network: bool = True
    network_allow: tuple[str, ...] | None = None
    temp_dir: Path | None = None
    protected: tuple[Path, ...] = field(default=())
    trash_inbox: Path | None = None

    @property
    def proxied(self) -> bool:
        """Whether confined commands reach the network only through the filtering proxy."""
        return self.network and self.network_allow is not None and self.confined

    @property
    def confined(self) -> bool:
        """True unless the mode is ``full-access``."""
        return self.mode is not SandboxMode.FULL_ACCESS

    def with_root(self, root: Path) -> SandboxPolicy:
        """Return a copy with one more writable root."""
        resolved = root.resolve()
        if resolved in self.writable_roots:
            return self
        return replace(self, writable_roots=(*self.writable_roots, resolved))

    def with_mode(self, mode: SandboxMode) -> SandboxPolicy:
        """Return a copy in another mode."""
        return replace(self, mode=mode)

    def all_writable(self) -> tuple[Path, ...]:
        """Every directory writable under this policy (empty for ``read-only``)."""
        if self.mode is SandboxMode.READ_ONLY:
            return ()
        roots = list(self.writable_roots)
        if self.temp_dir is not None:
            roots.append(self.temp_dir)
        if self.trash_inbox is not None:
            roots.append(self.trash_inbox)
        return tuple(roots)

    @property
    def shm_dir(self) -> Path | None:
        """The session's own ``/dev/shm`` (inside its temp dir, so inside its disk quota): the
        launcher bind-mounts it on ``/dev/shm`` in a mount namespace of the command's own."""
        return None if self.temp_dir is None else self.temp_dir / SHM_DIR_NAME

    @property
    def shim_dir(self) -> Path | None:
        """The host's ``rm`` shim directory: ``bin`` in its own state dir (the first protected
        directory). Commands may read and execute it, never write it (nor anything else of the
        state dir), so no command can rebind a name on its PATH."""
        return self.protected[0] / SHIM_DIR_NAME if self.protected else None


#: The directory in a session's temp dir that its confined commands see as ``/dev/shm``.
SHM_DIR_NAME = ".codemode-shm"
#: The directory in the host's state dir holding the shims first on every command's PATH.
SHIM_DIR_NAME = "bin"
#: Devices every confined command may open for writing (and ioctl). ``/dev/tty`` is the
#: command's own controlling terminal; other terminals (``/dev/pts/N``) are out of reach: a
#: command's terminal and pipes are its fds 0-2, opened before it was confined.
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx")
#: POSIX shared memory and semaphores (multiprocessing locks): writable in workspace-write only.
WORKSPACE_EXTRA_PATHS = ("/dev/shm",)


def extra_writable(policy: SandboxPolicy) -> tuple[str, ...]:
    """System directories writable under ``policy`` besides its roots and the devices."""
    return WORKSPACE_EXTRA_PATHS if policy.mode is SandboxMode.WORKSPACE_WRITE else ()


def is_within(path: str, root: str) -> bool:
    """Whether the resolved ``path`` is ``root`` or lies under it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_policy(policy: SandboxPolicy) -> None:
    """Refuse a policy that would let commands write a protected directory (the state dir).

    Landlock grants by hierarchy and cannot carve a subtree out of a writable root, so a
    protected directory at or under a writable root cannot be kept unwritable. Nor may a
    writable root lie inside a protected directory (its blobs, another session's temp dir):
    only the policy's own ``temp_dir`` (the session's, which the host puts there) may.

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
        for writable in policy.writable_roots:
            inner = os.path.realpath(writable)
            if is_within(inner, real):
                raise UserError(
                    f"The writable root {inner} lies inside the protected directory {real} (codemode's "
                    "state directory), which commands may never write; choose a directory outside it."
                )
        for root in roots:
            if is_within(real, root):
                raise UserError(
                    f"The protected directory {real} (codemode's state directory) lies inside the "
                    f"writable root {root}, so sandboxed commands could change the archive, logs and "
                    "database. Move the state directory outside every writable root (set "
                    "CODEMODE_HOME) or do not make that directory writable."
                )
