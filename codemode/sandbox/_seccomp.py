"""The seccomp filter of confined commands: plain data, and the small compiler to classic BPF.

The policy is :data:`DENIED` (syscalls refused outright or when their arguments match) plus,
with the network off, :data:`NETWORK_OFF` (every ``socket()`` but netlink route). Everything else is
allowed: Landlock, the dropped capabilities and no_new_privs do the rest. A denied call returns
``EPERM`` (``clone3`` returns ``ENOSYS``, so libc falls back to ``clone``, whose namespace flags
are checked here); a foreign architecture (32-bit ``int 0x80``) is killed, x32 calls refused.

Why our own compiler rather than libseccomp (``pyseccomp``): the filter is ~60 rules of the same
two shapes, the compiler is ~60 lines, and a native library that may be missing on the user's
machine would make every confined command fail closed. pyseccomp has not been released since
2021. The program is checked by the kernel when the exec helper installs it, and by the tests
(each rule, from inside a real confined command).

The launcher reads the program from a sealed memfd (:func:`filter_fd`); only x86_64 has a
syscall table here, so elsewhere confined commands are refused (``_enforce``) though the
launcher itself builds for any Linux architecture.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
from dataclasses import dataclass

__all__ = [
    "DENIED",
    "NETWORK_OFF",
    "NETWORK_PROXIED",
    "WORKER_ALLOWED",
    "Deny",
    "Test",
    "build_allowlist",
    "build_program",
    "filter_fd",
]

# struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each).
_NR, _ARCH, _ARGS = 0, 4, 16
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
# Classic BPF opcodes.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_AND_K = 0x54
_RET_K = 0x06
_MAX_INSNS = 4096  # BPF_MAXINSNS; the helper reads at most 32 KiB

#: x86_64 syscall numbers of every syscall named in the rules (checked against the kernel's
#: headers by the tests where they are installed).
X86_64: dict[str, int] = {
    "ioctl": 16, "socket": 41, "clone": 56, "ptrace": 101, "syslog": 103, "uselib": 134,
    "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144, "vhangup": 153,
    "pivot_root": 155, "adjtimex": 159, "chroot": 161, "acct": 163, "settimeofday": 164,
    "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
    "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "init_module": 175,
    "delete_module": 176, "quotactl": 179, "nfsservctl": 180, "sched_setaffinity": 203,
    "lookup_dcookie": 212, "clock_settime": 227, "kexec_load": 246, "add_key": 248,
    "request_key": 249, "keyctl": 250, "ioprio_set": 251, "migrate_pages": 256, "unshare": 272,
    "move_pages": 279, "perf_event_open": 298, "fanotify_init": 300, "prlimit64": 302,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "sched_setattr": 314,
    "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
    "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
    "open_tree_attr": 467,
}  # fmt: skip


@dataclass(frozen=True)
class Test:
    """One comparison on half of a syscall argument: ``(arg.half & mask) == value`` (or ``!=``).

    Attributes:
        arg: Argument index, 0-5.
        value: The value compared with.
        equal: ``True`` for ``==``, ``False`` for ``!=``.
        mask: Bits kept before the comparison.
        high: Compare the high 32 bits instead of the low ones.
    """

    arg: int
    value: int
    equal: bool = True
    mask: int = 0xFFFFFFFF
    high: bool = False


@dataclass(frozen=True)
class Deny:
    """A syscall refused always (``when`` empty) or when any of ``when``'s clauses holds.

    Attributes:
        syscall: Its name (a key of :data:`X86_64`).
        why: What the rule prevents (shown by ``codemode doctor``).
        when: Clauses, each a tuple of tests that must all hold; empty means always.
        errno: The error the call returns.
    """

    syscall: str
    why: str
    when: tuple[tuple[Test, ...], ...] = ()
    errno: int = errno.EPERM


def _not_self(arg: int) -> tuple[tuple[Test, ...], ...]:
    """Clauses that hold unless argument ``arg`` is 0 (the calling process) in all 64 bits."""
    return ((Test(arg, 0, equal=False),), (Test(arg, 0, equal=False, high=True),))


def _not_self_who(which_self: int) -> tuple[tuple[Test, ...], ...]:
    """For ``setpriority``/``ioprio_set``: hold unless ``which`` is "a process" and ``who`` is 0."""
    return (
        (Test(0, which_self, equal=False),),
        (Test(0, 0, equal=False, high=True),),
        *_not_self(1),
    )


_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK, _AF_PACKET = 1, 2, 10, 16, 17
_SOCK_STREAM, _SOCK_RAW, _SOCK_PACKET, _SOCK_TYPE_MASK = 1, 3, 10, 0xF
_IPPROTO_TCP = 6
#: The one netlink protocol kept: NETLINK_ROUTE. glibc's getaddrinfo (AI_ADDRCONFIG) and
#: if_nameindex read interfaces through it, and ``ip addr``/``ip route`` only read; every change
#: it can make needs CAP_NET_ADMIN, which a confined command has dropped. Every other protocol
#: (sock_diag, the audit log, uevents, xfrm, netfilter, generic families) is refused: ``ss``
#: falls back to /proc/net when NETLINK_SOCK_DIAG is refused.
_NETLINK_ROUTE = 0
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
_CLONE_NEW_ANY = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
_CLONE_NEW_ANY |= 0x40000000 | 0x00000080
_PRIO_PROCESS, _IOPRIO_WHO_PROCESS = 0, 1

#: What a confined command may never do, whatever the network setting.
DENIED: tuple[Deny, ...] = (
    Deny("ioctl", "typing into a terminal (TIOCSTI) or the console (TIOCLINUX)",
         ((Test(1, _TIOCSTI),), (Test(1, _TIOCLINUX),))),
    Deny("socket", "packet sockets, raw IP sockets and netlink but route (sniffing, spoofing, the "
         "host's sockets and audit log)",
         ((Test(0, _AF_PACKET),),
          # The kernel turns socket(AF_INET, SOCK_PACKET) into a packet socket.
          (Test(0, _AF_INET), Test(1, _SOCK_PACKET, mask=_SOCK_TYPE_MASK)),
          (Test(0, _AF_INET), Test(1, _SOCK_RAW, mask=_SOCK_TYPE_MASK)),
          (Test(0, _AF_INET6), Test(1, _SOCK_RAW, mask=_SOCK_TYPE_MASK)),
          (Test(0, _AF_NETLINK), Test(2, _NETLINK_ROUTE, equal=False)))),
    Deny("clone", "new namespaces", ((Test(0, 0, equal=False, mask=_CLONE_NEW_ANY),),)),
    Deny("clone3", "clone3 (its flags cannot be inspected; libc falls back to clone)", errno=errno.ENOSYS),
    Deny("unshare", "new namespaces"),
    Deny("setns", "entering other namespaces"),
    *(Deny(name, "reading or writing other processes") for name in (
        "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise")),
    *(Deny(name, "kernel programs and performance counters") for name in ("bpf", "perf_event_open")),
    *(Deny(name, "the kernel keyrings") for name in ("keyctl", "add_key", "request_key")),
    *(Deny(name, "mounting, or changing the root") for name in (
        "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
        "move_mount", "open_tree", "open_tree_attr", "mount_setattr")),
    *(Deny(name, "rebooting, kernel modules, swap, accounting, quotas") for name in (
        "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        "swapon", "swapoff", "acct", "quotactl", "quotactl_fd")),
    *(Deny(name, "setting the system clock") for name in (
        "settimeofday", "clock_settime", "adjtimex", "clock_adjtime")),
    *(Deny(name, "renaming the host") for name in ("sethostname", "setdomainname")),
    *(Deny(name, "io_uring (it bypasses these rules) and userfaultfd") for name in (
        "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd")),
    *(Deny(name, "files by handle (bypasses path rules), the kernel log, I/O ports, old calls")
      for name in ("open_by_handle_at", "syslog", "iopl", "ioperm", "vhangup", "uselib",
                   "lookup_dcookie", "nfsservctl", "fanotify_init")),
    *(Deny(name, "limits, priority, CPUs or memory placement of any process but itself", _not_self(0))
      for name in ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam",
                   "sched_setattr", "migrate_pages", "move_pages")),
    Deny("setpriority", "the priority of any process but itself", _not_self_who(_PRIO_PROCESS)),
    Deny("ioprio_set", "the I/O priority of any process but itself", _not_self_who(_IOPRIO_WHO_PROCESS)),
)  # fmt: skip

#: Added with the network off: no socket of any family but netlink route (``socketpair`` stays).
NETWORK_OFF: tuple[Deny, ...] = (
    Deny("socket", "every socket but netlink route (network off)", ((Test(0, _AF_NETLINK, equal=False),),)),
)

#: Added with a network allowlist (the command's own network namespace, the proxy its one way
#: out): unix, netlink route, and IPv4/IPv6 TCP sockets only; no UDP (no DNS but the proxy's),
#: no other family (vsock would reach the hypervisor, which no network namespace separates).
NETWORK_PROXIED: tuple[Deny, ...] = (
    Deny("socket", "every socket but unix, netlink route and TCP (network through the proxy)",
         ((Test(0, _AF_UNIX, equal=False), Test(0, _AF_INET, equal=False), Test(0, _AF_INET6, equal=False),
           Test(0, _AF_NETLINK, equal=False)),
          *((Test(0, family), Test(1, _SOCK_STREAM, equal=False, mask=_SOCK_TYPE_MASK))
            for family in (_AF_INET, _AF_INET6)),
          *((Test(0, family), Test(2, 0, equal=False), Test(2, _IPPROTO_TCP, equal=False))
            for family in (_AF_INET, _AF_INET6)))),
)  # fmt: skip


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _body(rules: list[Deny]) -> list[bytes]:
    """Instructions for one syscall (the number is known): each rule's error when one of its
    clauses holds, else allow. Ends with a return on every path."""
    body: list[bytes] = []
    for rule in rules:
        deny = _insn(_RET_K, _RET_ERRNO | (rule.errno & 0xFFFF))
        if not rule.when:
            return [*body, deny]  # nothing after an unconditional denial can apply
        for clause in rule.when:
            tests = []
            for test in clause:
                ops = [_insn(_LD_W_ABS, _ARGS + 8 * test.arg + (4 if test.high else 0))]
                if test.mask != 0xFFFFFFFF:
                    ops.append(_insn(_AND_K, test.mask))
                tests.append((test, ops))
            for i, (test, ops) in enumerate(tests):
                # A failed test skips the rest of its clause (later tests and the deny).
                skip = sum(len(o) + 1 for _, o in tests[i + 1 :]) + 1
                body += ops
                body.append(
                    _insn(_JEQ_K, test.value, 0, skip) if test.equal else _insn(_JEQ_K, test.value, skip, 0)
                )
            body.append(deny)
    return [*body, _insn(_RET_K, _RET_ALLOW)]


def _tree(items: list[tuple[int, list[bytes]]]) -> list[bytes]:
    """A binary search over sorted syscall numbers: about log2(n) + 4 instructions for a call
    no rule names (most calls), instead of one comparison per rule. Falls through to allow."""
    if len(items) <= 4:
        code: list[bytes] = []
        for nr, body in items:
            code += [_insn(_JEQ_K, nr, 0, len(body)), *body]
        return [*code, _insn(_RET_K, _RET_ALLOW)]
    mid = len(items) // 2
    left, right = _tree(items[:mid]), _tree(items[mid:])
    if len(left) > 255:
        raise ValueError("seccomp program: a subtree is too long for one jump")
    return [_insn(_JGE_K, items[mid][0], len(left), 0), *left, *right]


def build_program(network: bool, *, proxied: bool = False) -> bytes:
    """The classic BPF program (``struct sock_filter[]``) for a confined command.

    Every call pays for the filter (a command makes thousands), so the rules are reached by a
    binary search on the syscall number: ~10 instructions a call, measured ~5x cheaper per
    command than one comparison per rule (bench/bench_sandbox.py shows the layer's cost).

    Args:
        network: Whether the command may open network sockets.
        proxied: With ``network``: TCP only, through the proxy (:data:`NETWORK_PROXIED`).

    Returns:
        The program's bytes, 8 per instruction.

    Raises:
        ValueError: The rules do not fit one program (a bug in the table).
    """
    by_nr: dict[int, list[Deny]] = {}
    extra = (NETWORK_PROXIED if proxied else ()) if network else NETWORK_OFF
    for rule in (*DENIED, *extra):
        by_nr.setdefault(X86_64[rule.syscall], []).append(rule)
    program = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ_K, _AUDIT_ARCH_X86_64, 1, 0),
        _insn(_RET_K, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
        _insn(_JGE_K, _X32_SYSCALL_BIT, 0, 1),
        _insn(_RET_K, _RET_ERRNO | errno.EPERM),
        *_tree([(nr, _body(rules)) for nr, rules in sorted(by_nr.items())]),
    ]
    if len(program) > _MAX_INSNS:
        raise ValueError(f"the seccomp program has {len(program)} instructions (at most {_MAX_INSNS})")
    return b"".join(program)


_MFD_CLOEXEC, _MFD_ALLOW_SEALING = 0x0001, 0x0002
_SEALS = 0x0001 | 0x0002 | 0x0004 | 0x0008  # F_SEAL_SEAL | SHRINK | GROW | WRITE
_lock = threading.Lock()
_fds: dict[tuple[bool, bool, int], int] = {}


def filter_fd(network: bool, *, proxied: bool = False) -> int:
    """A sealed memfd (O_CLOEXEC, this process's own) holding :func:`build_program`'s bytes.

    Raises:
        OSError: The memfd cannot be created.
    """
    key = (network, proxied, os.getpid())
    with _lock:
        fd = _fds.get(key)
        if fd is None:
            fd = os.memfd_create("codemode-seccomp", _MFD_CLOEXEC | _MFD_ALLOW_SEALING)
            try:
                os.write(fd, build_program(network, proxied=proxied))
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            except BaseException:
                os.close(fd)
                raise
            _fds[key] = fd
        return fd


#: Everything an engine worker process may ask of the kernel once it is confined (x86_64), most
#: frequent first (the filter tests them in order): its sockets to the host and its program's
#: eventfd (read, write, poll; epoll on the one instance it made before), memory, futexes,
#: clocks, its own signals, and exit. No open, no
#: socket, no exec, no clone: the worker made its threads before it sealed itself
#: (`codemode.engine.worker`). Anything else fails with EPERM; a foreign architecture is killed.
WORKER_ALLOWED: dict[str, int] = {
    "futex": 202, "read": 0, "write": 1, "recvfrom": 45, "sendto": 44, "epoll_wait": 232,
    "epoll_pwait": 281, "epoll_ctl": 233, "poll": 7, "ppoll": 271,
    "clock_gettime": 228, "clock_nanosleep": 230, "nanosleep": 35, "sched_yield": 24,
    "mmap": 9, "munmap": 11, "mremap": 25, "mprotect": 10, "madvise": 28, "brk": 12,
    "eventfd2": 290, "close": 3, "recvmsg": 47, "sendmsg": 46, "readv": 19, "writev": 20,
    "select": 23, "pselect6": 270, "fstat": 5, "newfstatat": 262, "lseek": 8, "fcntl": 72,
    "getpid": 39, "gettid": 186, "getrandom": 318, "clock_getres": 229, "gettimeofday": 96,
    "getrusage": 98, "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15,
    "sigaltstack": 131, "restart_syscall": 219, "tgkill": 234, "shutdown": 48,
    "exit": 60, "exit_group": 231,
    # A thread started just before the seal (the relay, the watchdog, the keeper) registers
    # these as it starts.
    "rseq": 334, "set_robust_list": 273,
}  # fmt: skip


def build_allowlist(allowed: dict[str, int]) -> bytes:
    """The classic BPF program that allows only ``allowed`` (x86_64 numbers): every other call
    fails with EPERM, a foreign architecture or an x32 call is killed or refused.

    Raises:
        ValueError: The list is too long for the program's short jumps.
    """
    numbers = list(dict.fromkeys(allowed.values()))
    if len(numbers) > 250:
        raise ValueError("seccomp allowlist: too many syscalls for one jump")
    tests = [_insn(_JEQ_K, nr, len(numbers) - i, 0) for i, nr in enumerate(numbers)]
    program = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ_K, _AUDIT_ARCH_X86_64, 1, 0),
        _insn(_RET_K, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
        _insn(_JGE_K, _X32_SYSCALL_BIT, 0, 1),
        _insn(_RET_K, _RET_ERRNO | errno.EPERM),
        *tests,
        _insn(_RET_K, _RET_ERRNO | errno.EPERM),
        _insn(_RET_K, _RET_ALLOW),
    ]
    return b"".join(program)
