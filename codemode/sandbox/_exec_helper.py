"""A 700-byte exec helper that confines itself with Landlock, then executes the command.

``subprocess.Popen`` with a ``preexec_fn`` must ``fork()`` the whole host (page tables and
copy-on-write faults: about 2 ms for a typical Python host) instead of ``vfork()``, which made a
confined ``true`` about 4x slower than an unconfined one. This helper moves the two syscalls out
of Python: the host starts ``/proc/self/fd/HELPER RULESET_FD CWD PATH ARGV...`` with
``vfork`` (``subprocess``) or ``posix_spawn`` as usual, the helper changes to ``CWD`` (unless it
is empty), sets ``no_new_privs``, calls ``landlock_restrict_self``, closes every fd from 3 up
(the ruleset, its own memfd, anything else inherited) and ``execve``s the command.

The helper is machine code assembled from :data:`ASM_SOURCE_X86_64` (below, reviewable; a test
re-assembles it with GNU ``as`` and checks it matches :data:`_CODE_X86_64` byte for byte), wrapped
in a minimal ELF header here, and kept in a sealed ``memfd``: nothing on disk, and nothing a
sandboxed command can modify. Where it cannot be used (not x86_64, memfds not executable,
no ``/proc``), :func:`helper_fd` returns ``None`` and callers fall back to ``preexec_fn``.
"""

from __future__ import annotations

import fcntl
import os
import platform
import struct
import subprocess
import threading

from codemode.sandbox._exec_helper_code import CODE_X86_64

__all__ = ["build_elf_x86_64", "helper_fd", "helper_unavailable_reason"]

_BASE = 0x400000
_MFD_CLOEXEC = 0x0001
_MFD_ALLOW_SEALING = 0x0002
_MFD_EXEC = 0x0010  # Linux 6.3+: executable memfd even where vm.memfd_noexec defaults to no-exec
_SEALS = 0x0001 | 0x0002 | 0x0004 | 0x0008  # F_SEAL_SEAL | SHRINK | GROW | WRITE


def build_elf_x86_64(code: bytes) -> bytes:
    """A static, position-dependent ELF64 executable whose entry point is ``code``'s first byte.

    Args:
        code: Position-independent x86_64 machine code.

    Returns:
        The executable's bytes: ELF header, a PT_LOAD (read + execute) covering the whole file,
        a PT_GNU_STACK (non-executable stack), then the code.
    """
    ehsize, phentsize, phnum = 64, 56, 2
    code_offset = ehsize + phentsize * phnum
    total = code_offset + len(code)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little endian, version 1, SysV
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        2,  # ET_EXEC
        62,  # EM_X86_64
        1,  # EV_CURRENT
        _BASE + code_offset,  # entry
        ehsize,  # program headers right after this header
        0,  # no section headers
        0,
        ehsize,
        phentsize,
        phnum,
        64,
        0,
        0,
    )
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, _BASE, _BASE, total, total, 0x1000)  # PT_LOAD, R+X
    stack = struct.pack("<IIQQQQQQ", 0x6474E551, 6, 0, 0, 0, 0, 0, 16)  # PT_GNU_STACK, RW
    return header + load + stack + code


_lock = threading.Lock()
_state: dict[str, int | str | None] = {}


def _create() -> tuple[int | None, str | None]:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64", "amd64"):
        return None, f"no exec helper for {platform.system()} {platform.machine()}"
    if not os.path.isdir("/proc/self/fd"):
        return None, "/proc is not mounted"
    try:
        try:
            fd = os.memfd_create("codemode-landlock-exec", _MFD_CLOEXEC | _MFD_ALLOW_SEALING | _MFD_EXEC)
        except OSError:  # kernels before 6.3 do not know MFD_EXEC (memfds are executable there)
            fd = os.memfd_create("codemode-landlock-exec", _MFD_CLOEXEC | _MFD_ALLOW_SEALING)
    except (OSError, AttributeError) as exc:
        return None, f"memfd_create failed: {exc}"
    try:
        os.write(fd, build_elf_x86_64(CODE_X86_64))
        os.fchmod(fd, 0o555)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
        # Self-test: without arguments the helper must refuse with its own message and status.
        probe = subprocess.run(
            [f"/proc/self/fd/{fd}"],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=30,
            check=False,
        )
        if probe.returncode != 126 or b"exec helper's arguments" not in probe.stderr:
            raise OSError(f"self-test gave status {probe.returncode}: {probe.stderr[:200]!r}")
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(fd)
        return None, f"the exec helper cannot run here ({exc})"
    return fd, None


def helper_fd() -> int | None:
    """The sealed memfd holding the helper (created on first use, O_CLOEXEC), or ``None``."""
    with _lock:
        if "fd" not in _state or _state.get("pid") != os.getpid():
            fd, reason = _create()
            _state.update(fd=fd, reason=reason, pid=os.getpid())
        value = _state["fd"]
        return value if isinstance(value, int) else None


def helper_unavailable_reason() -> str | None:
    """Why :func:`helper_fd` returns ``None`` (after it has been called), else ``None``."""
    reason = _state.get("reason")
    return reason if isinstance(reason, str) else None
