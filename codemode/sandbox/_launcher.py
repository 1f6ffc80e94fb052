"""The launcher (``launcher.c``) that applies a command's confinement, kept in a sealed memfd.

setup.py compiles ``launcher.c`` with the extension into ``codemode-launcher`` beside this file
(a static executable where the C library allows it). The host does not execute that file: on
first use it copies it into a sealed ``memfd`` and self-tests it there, so a command that can
write the installed file (an editable install inside a workspace) cannot change what the
commands after it start through. Commands start as ``/proc/self/fd/N KEY=VALUE... -- PATH ARGV``
with ``posix_spawn`` (see :mod:`._spawn`). Where the launcher cannot be used (not built, not
executable, memfds not executable, no ``/proc``), :func:`launcher_fd` returns ``None`` with a
reason and every command is refused.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
from pathlib import Path

__all__ = ["LAUNCHER_NAME", "launcher_fd", "launcher_path", "launcher_unavailable_reason"]

#: The executable setup.py builds next to this module.
LAUNCHER_NAME = "codemode-launcher"
_MFD_CLOEXEC = 0x0001
_MFD_ALLOW_SEALING = 0x0002
_MFD_EXEC = 0x0010  # Linux 6.3+: executable memfd even where vm.memfd_noexec defaults to no-exec
_SEALS = 0x0001 | 0x0002 | 0x0004 | 0x0008  # F_SEAL_SEAL | SHRINK | GROW | WRITE
_MAX_SIZE = 16 * 1024 * 1024  # a static launcher is ~1 MB; anything far larger is not ours
#: What the launcher prints, with status 126, when it is started without arguments.
_SELF_TEST_TEXT = b"reading the launcher's arguments"
_REBUILD = "rebuild it with `pip install .` (or `python setup.py build_ext --inplace` in a checkout)"

_lock = threading.Lock()
_state: dict[str, int | str | None] = {}


def launcher_path() -> Path:
    """Where setup.py puts the launcher (``CODEMODE_LAUNCHER`` overrides it, for tests)."""
    override = os.environ.get("CODEMODE_LAUNCHER")
    return Path(override) if override else Path(__file__).with_name(LAUNCHER_NAME)


def _read_launcher(path: Path) -> bytes:
    """The launcher's bytes, read without following a link and only from a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000):
            raise OSError(f"{path} is not a regular file")
        if not st.st_mode & 0o111:
            raise OSError(f"{path} is not executable")
        if st.st_size > _MAX_SIZE:
            raise OSError(f"{path} is {st.st_size} bytes, too large to be the launcher")
        data = os.read(fd, _MAX_SIZE + 1)
    finally:
        os.close(fd)
    return data


def _create() -> tuple[int | None, str | None]:
    if not os.path.isdir("/proc/self/fd"):
        return None, "/proc is not mounted"
    path = launcher_path()
    try:
        code = _read_launcher(path)
    except OSError as exc:
        return None, f"the launcher {path} cannot be read ({exc.strerror or exc}); {_REBUILD}"
    try:
        try:
            fd = os.memfd_create("codemode-launcher", _MFD_CLOEXEC | _MFD_ALLOW_SEALING | _MFD_EXEC)
        except OSError:  # kernels before 6.3 do not know MFD_EXEC (memfds are executable there)
            fd = os.memfd_create("codemode-launcher", _MFD_CLOEXEC | _MFD_ALLOW_SEALING)
    except (OSError, AttributeError) as exc:
        return None, f"memfd_create failed: {exc}"
    try:
        written = 0
        while written < len(code):
            written += os.write(fd, code[written:])
        os.fchmod(fd, 0o555)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
        # Self-test: without arguments the launcher must refuse with its own message and status.
        probe = subprocess.run(
            [f"/proc/self/fd/{fd}"],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=30,
            check=False,
        )
        if probe.returncode != 126 or _SELF_TEST_TEXT not in probe.stderr:
            raise OSError(f"self-test gave status {probe.returncode}: {probe.stderr[:200]!r}")
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(fd)
        return None, f"the launcher {path} cannot run here ({exc}); {_REBUILD}"
    return fd, None


def launcher_fd() -> int | None:
    """The sealed memfd holding the launcher (created on first use, O_CLOEXEC), or ``None``."""
    with _lock:
        if "fd" not in _state or _state.get("pid") != os.getpid():
            fd, reason = _create()
            _state.update(fd=fd, reason=reason, pid=os.getpid())
        value = _state["fd"]
        return value if isinstance(value, int) else None


def launcher_unavailable_reason() -> str | None:
    """Why :func:`launcher_fd` returns ``None`` (after it has been called), else ``None``."""
    reason = _state.get("reason")
    return reason if isinstance(reason, str) else None
