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

__all__ = ["ASM_SOURCE_X86_64", "build_elf_x86_64", "helper_fd", "helper_unavailable_reason"]

ASM_SOURCE_X86_64 = r"""
# codemode landlock exec helper (x86_64 Linux, no libc).
# argv: helper RULESET_FD CWD PATH ARGV0 [ARGS...]
# chdir(CWD) unless CWD is empty; prctl(PR_SET_NO_NEW_PRIVS, 1);
# landlock_restrict_self(RULESET_FD, 0); close_range(3, ~0U, 0) (the ruleset, this helper's
# memfd and anything else inherited); execve(PATH, &argv[4], envp).
# Failure to confine: one line on fd 2 starting with the marker, exit 126. chdir failure: a
# line naming the directory, exit 126. execve failure: exit 127.
    .text
    .globl _start
_start:
    mov    (%rsp), %rbx              # rbx = argc
    cmp    $5, %rbx
    jb     bad_args
    mov    16(%rsp), %rsi            # argv[1]
    call   parse_fd
    mov    %eax, %r12d               # r12 = ruleset fd
    mov    24(%rsp), %rdi            # argv[2] = cwd
    cmpb   $0, (%rdi)
    je     cwd_done
    mov    $80, %eax                 # chdir(cwd)
    syscall
    test   %rax, %rax
    jnz    chdir_failed
cwd_done:
    mov    $157, %eax                # prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    mov    $38, %edi
    mov    $1, %esi
    xor    %edx, %edx
    xor    %r10d, %r10d
    xor    %r8d, %r8d
    syscall
    lea    what_prctl(%rip), %r14
    test   %rax, %rax
    jnz    failed
    mov    $446, %eax                # landlock_restrict_self(ruleset fd, 0)
    mov    %r12d, %edi
    xor    %esi, %esi
    syscall
    lea    what_restrict(%rip), %r14
    test   %rax, %rax
    jnz    failed
    mov    $436, %eax                # close_range(3, ~0U, 0)
    mov    $3, %edi
    mov    $-1, %esi
    xor    %edx, %edx
    syscall
    mov    32(%rsp), %rdi            # path = argv[3]
    lea    40(%rsp), %rsi            # argv + 4
    lea    16(%rsp,%rbx,8), %rdx     # envp
    mov    $59, %eax                 # execve
    syscall
    lea    msg_exec(%rip), %rsi      # "codemode sandbox: cannot execute "
    call   putstr
    mov    32(%rsp), %rsi
    call   putstr
    lea    msg_nl(%rip), %rsi
    call   putstr
    mov    $127, %edi
    jmp    exit

chdir_failed:
    lea    msg_chdir(%rip), %rsi     # "codemode sandbox: cannot change to directory "
    call   putstr
    mov    24(%rsp), %rsi
    call   putstr
    lea    msg_nl(%rip), %rsi
    call   putstr
    mov    $126, %edi
    jmp    exit

# eax = decimal value of the NUL-terminated string at rsi; jumps to bad_args if not a number.
parse_fd:
    xor    %edx, %edx
    movzbl (%rsi), %eax
    test   %eax, %eax
    jz     bad_args
1:  movzbl (%rsi), %eax
    test   %eax, %eax
    jz     2f
    sub    $48, %eax
    cmp    $9, %eax
    ja     bad_args
    imul   $10, %edx, %edx
    add    %eax, %edx
    inc    %rsi
    jmp    1b
2:  mov    %edx, %eax
    ret

bad_args:
    lea    what_args(%rip), %r14
    mov    $22, %eax                 # report EINVAL
    neg    %rax
failed:                              # rax = -errno, r14 = what failed
    neg    %rax
    mov    %rax, %r15
    lea    msg_marker(%rip), %rsi
    call   putstr
    mov    %r14, %rsi
    call   putstr
    lea    msg_errno(%rip), %rsi
    call   putstr
    sub    $32, %rsp                 # digits of r15, built backwards on the stack
    lea    31(%rsp), %rsi
    movb   $0, (%rsi)
    mov    %r15, %rax
    mov    $10, %ecx
3:  xor    %edx, %edx
    div    %rcx
    add    $48, %dl
    dec    %rsi
    mov    %dl, (%rsi)
    test   %rax, %rax
    jnz    3b
    call   putstr
    add    $32, %rsp
    lea    msg_tail(%rip), %rsi
    call   putstr
    mov    $126, %edi
exit:
    mov    $231, %eax                # exit_group
    syscall

# write(2, rsi, strlen(rsi))
putstr:
    mov    %rsi, %rdx
4:  cmpb   $0, (%rdx)
    je     5f
    inc    %rdx
    jmp    4b
5:  sub    %rsi, %rdx
    mov    $1, %eax
    mov    $2, %edi
    syscall
    ret

msg_marker:    .asciz "codemode sandbox: enforcing the Landlock ruleset in the child: "
what_prctl:    .asciz "prctl(PR_SET_NO_NEW_PRIVS)"
what_restrict: .asciz "landlock_restrict_self"
what_args:     .asciz "reading the exec helper's arguments"
msg_errno:     .asciz " failed with errno "
msg_tail:      .asciz "; the command was not run.\n"
msg_exec:      .asciz "codemode sandbox: cannot execute "
msg_chdir:     .asciz "codemode sandbox: cannot change to directory "
msg_nl:        .asciz "\n"
"""

# `as --64 helper.S && objcopy -O binary -j .text`: position independent, no relocations.
_CODE_X86_64 = bytes.fromhex(
    "488b1c244883fb050f8212010000488b742410e8e30000004189c4488b7c2418803f007410b8500000000f054885c00f"
    "859a000000b89d000000bf26000000be0100000031d24531d24531c00f054c8d35a40100004885c00f85d1000000b8be"
    "0100004489e731f60f054c8d35a30100004885c00f85b5000000b8b4010000bf03000000beffffffff31d20f05488b7c"
    "2420488d742428488d54dc10b83b0000000f05488d35d5010000e8ed000000488b742420e8e3000000488d350f020000"
    "e8d7000000bf7f000000e9c6000000488d35cb010000e8c1000000488b742418e8b7000000488d35e3010000e8ab0000"
    "00bf7e000000e99a00000031d20fb60685c0741c0fb60685c0741283e83083f809770d6bd20a01c248ffc6ebe789d0c3"
    "4c8d3504010000b81600000048f7d848f7d84989c7488d357d000000e85b0000004c89f6e853000000488d35ff000000"
    "e8470000004883ec20488d74241fc606004c89f8b90a00000031d248f7f180c23048ffce88164885c075eee81c000000"
    "4883c420488d35d8000000e80c000000bf7e000000b8e70000000f054889f2803a00740548ffc2ebf64829f2b8010000"
    "00bf020000000f05c3636f64656d6f64652073616e64626f783a20656e666f7263696e6720746865204c616e646c6f63"
    "6b2072756c6573657420696e20746865206368696c643a2000707263746c2850525f5345545f4e4f5f4e45575f505249"
    "565329006c616e646c6f636b5f72657374726963745f73656c660072656164696e672074686520657865632068656c70"
    "6572277320617267756d656e747300206661696c65642077697468206572726e6f20003b2074686520636f6d6d616e64"
    "20776173206e6f742072756e2e0a00636f64656d6f64652073616e64626f783a2063616e6e6f74206578656375746520"
    "00636f64656d6f64652073616e64626f783a2063616e6e6f74206368616e676520746f206469726563746f727920000a"
    "00"
)

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
        os.write(fd, build_elf_x86_64(_CODE_X86_64))
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
