"""The seccomp layer, tried from inside real confined commands: every denied call, by errno.

Arguments are chosen so that a call the filter wrongly allowed would fail harmlessly (an invalid
clock, a huge hostname length, a target that is the probe's own child) rather than change the
machine running the tests.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from codemode.sandbox import SandboxMode
from codemode.sandbox._seccomp import DENIED, NETWORK_OFF, X86_64, build_program
from tests.sandbox.sandbox_support import Dirs, needs_landlock, run_confined

pytestmark = needs_landlock

# name: (syscall number, arguments) — "C" stands for a child of the probe, "B" for a buffer.
_CALLS: dict[str, tuple[str, list[object]]] = {
    "ioctl TIOCSTI": ("ioctl", [0, 0x5412, "B"]),
    "ioctl TIOCSTI with high bits": ("ioctl", [0, 0x5412 | (1 << 32), "B"]),
    "ioctl TIOCLINUX": ("ioctl", [0, 0x541C, "B"]),
    "socket AF_PACKET": ("socket", [17, 3, 0]),
    "socket AF_PACKET dgram": ("socket", [17, 2, 0]),
    "socket AF_INET raw": ("socket", [2, 3, 1]),
    "socket AF_INET6 raw cloexec": ("socket", [10, 3 | 0o2000000, 58]),
    "ptrace attach": ("ptrace", [16, "C", 0, 0]),
    "process_vm_readv": ("process_vm_readv", ["C", "B", 1, "B", 1, 0]),
    "process_vm_writev": ("process_vm_writev", ["C", "B", 1, "B", 1, 0]),
    "pidfd_getfd": ("pidfd_getfd", [-1, 0, 0]),
    "kcmp": ("kcmp", ["C", "C", 0, 0, 0]),
    "process_madvise": ("process_madvise", [-1, 0, 0, 0, 0]),
    "bpf": ("bpf", [0, 0, 0]),
    "perf_event_open": ("perf_event_open", ["B", 0, -1, -1, 0]),
    "keyctl": ("keyctl", [0, 0, 0, 0, 0]),
    "add_key": ("add_key", [0, 0, 0, 0, 0]),
    "request_key": ("request_key", [0, 0, 0, 0]),
    "mount": ("mount", [0, 0, 0, 0, 0]),
    "umount2": ("umount2", ["B", 0]),
    "pivot_root": ("pivot_root", [0, 0]),
    "chroot": ("chroot", ["B"]),
    "fsopen": ("fsopen", [0, 0]),
    "fsconfig": ("fsconfig", [-1, 0, 0, 0, 0]),
    "fsmount": ("fsmount", [-1, 0, 0]),
    "fspick": ("fspick", [-1, 0, 0]),
    "move_mount": ("move_mount", [-1, 0, -1, 0, 0]),
    "open_tree": ("open_tree", [-1, 0, 0]),
    "open_tree_attr": ("open_tree_attr", [-1, 0, 0, 0, 0]),
    "mount_setattr": ("mount_setattr", [-1, 0, 0, 0, 0]),
    "unshare": ("unshare", [0x10000000]),
    "setns": ("setns", [-1, 0]),
    # CLONE_NEWNS | CLONE_FS is invalid: a clone the filter let through would fail with EINVAL.
    "clone with a namespace flag": ("clone", [0x00020000 | 0x00000200, 0, 0, 0, 0]),
    "clone3": ("clone3", ["B", 88]),
    "reboot": ("reboot", [0, 0, 0, 0]),
    "kexec_load": ("kexec_load", [0, 0, 0, 0]),
    "kexec_file_load": ("kexec_file_load", [-1, -1, 0, 0, 0]),
    "init_module": ("init_module", [0, 0, 0]),
    "finit_module": ("finit_module", [-1, 0, 0]),
    "delete_module": ("delete_module", ["B", 0]),
    "swapon": ("swapon", ["B", 0]),
    "swapoff": ("swapoff", ["B"]),
    "acct": ("acct", ["B"]),
    "quotactl": ("quotactl", [0, 0, 0, 0]),
    "quotactl_fd": ("quotactl_fd", [-1, 0, 0, 0]),
    "settimeofday": ("settimeofday", [0, 0]),
    "clock_settime": ("clock_settime", [-1, "B"]),
    "adjtimex": ("adjtimex", ["B"]),
    "clock_adjtime": ("clock_adjtime", [-1, "B"]),
    "sethostname": ("sethostname", ["B", -1]),
    "setdomainname": ("setdomainname", ["B", -1]),
    "io_uring_setup": ("io_uring_setup", [0, "B"]),
    "io_uring_enter": ("io_uring_enter", [-1, 0, 0, 0, 0, 0]),
    "io_uring_register": ("io_uring_register", [-1, 0, 0, 0]),
    "userfaultfd": ("userfaultfd", [0]),
    "open_by_handle_at": ("open_by_handle_at", [-1, "B", 0]),
    "syslog": ("syslog", [3, "B", 10]),
    "iopl": ("iopl", [0]),
    "ioperm": ("ioperm", [0, 0, 0]),
    "vhangup": ("vhangup", []),
    "fanotify_init": ("fanotify_init", [0, 0]),
    "prlimit64 of another process": ("prlimit64", ["C", 7, 0, "B"]),
    "setpriority of another process": ("setpriority", [0, "C", 0]),
    "setpriority of the process group": ("setpriority", [1, 0, 0]),
    "setpriority of the user": ("setpriority", [2, 0, 0]),
    "sched_setaffinity of another process": ("sched_setaffinity", ["C", 8, "B"]),
    "sched_setscheduler of another process": ("sched_setscheduler", ["C", 0, "B"]),
    "sched_setparam of another process": ("sched_setparam", ["C", "B"]),
    "sched_setattr of another process": ("sched_setattr", ["C", "B", 0]),
    "ioprio_set of another process": ("ioprio_set", [1, "C", 0]),
    "ioprio_set of the user": ("ioprio_set", [3, 0, 0]),
    "migrate_pages of another process": ("migrate_pages", ["C", 8, "B", "B"]),
    "move_pages of another process": ("move_pages", ["C", 0, 0, 0, 0, 0]),
    "x32 getpid": ("x32", [39 | 0x40000000]),
}
_ALLOWED_SELF: dict[str, tuple[str, list[object]]] = {
    "prlimit64 of itself": ("prlimit64", [0, 7, 0, "B"]),
    "setpriority of itself": ("setpriority", [0, 0, 0]),
    "ioprio_set of itself": ("ioprio_set", [1, 0, 0]),
    "socketpair": ("socketpair", [1, 1, 0, "B"]),
    "socket netlink": ("socket", [16, 3, 0]),
}
_NUMBERS = {**X86_64, "socketpair": 53}

_PROBE = r"""
import ctypes, errno, json, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
child = subprocess.Popen(["sleep", "60"])
buf = ctypes.create_string_buffer(4096)
calls = json.loads(sys.argv[1])
out = {}
for name, (nr, args) in calls.items():
    words = [child.pid if a == "C" else ctypes.addressof(buf) if a == "B" else a for a in args]
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(w) for w in words])
    out[name] = "OK" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
child.kill()
print(json.dumps(out))
"""


def _probe(dirs: Dirs, calls: dict[str, tuple[str, list[object]]], **policy: object) -> dict[str, str]:
    table = {
        name: (args[0] if sc == "x32" else _NUMBERS[sc], args[1:] if sc == "x32" else args)
        for name, (sc, args) in calls.items()
    }
    result = run_confined(dirs.policy(**policy), [sys.executable, "-c", _PROBE, json.dumps(table)])  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


@pytest.mark.parametrize("network", [True, False])
def test_every_denied_call_returns_eperm(dirs: Dirs, network: bool) -> None:
    got = _probe(dirs, _CALLS, network=network)
    expected = {name: ("ENOSYS" if name == "clone3" else "EPERM") for name in _CALLS}
    assert got == expected


def test_the_same_calls_on_itself_still_work(dirs: Dirs) -> None:
    assert set(_probe(dirs, _ALLOWED_SELF).values()) == {"OK"}


def test_network_off_refuses_every_socket_but_netlink(dirs: Dirs) -> None:
    calls: dict[str, tuple[str, list[object]]] = {
        "inet stream": ("socket", [2, 1, 0]),
        "inet dgram": ("socket", [2, 2, 0]),
        "inet6 dgram": ("socket", [10, 2, 0]),
        "unix stream": ("socket", [1, 1, 0]),
        "vsock": ("socket", [40, 1, 0]),
        "netlink": ("socket", [16, 3, 0]),
        "socketpair": ("socketpair", [1, 1, 0, "B"]),
    }
    off = _probe(dirs, calls, network=False)
    assert off == {**dict.fromkeys(list(calls)[:5], "EPERM"), "netlink": "OK", "socketpair": "OK"}
    on = _probe(dirs, calls, network=True)
    assert {on[k] for k in ("inet stream", "inet dgram", "unix stream", "netlink")} == {"OK"}


def test_the_syscall_table_matches_the_kernel_headers() -> None:
    header = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
    if not header.exists():
        pytest.skip("kernel headers not installed")
    defined = dict(re.findall(r"#define __NR_(\w+)\s+(\d+)", header.read_text()))
    checked = [name for name in X86_64 if name in defined]
    assert len(checked) > 50  # headers older than a syscall simply do not list it
    assert {name: X86_64[name] for name in checked} == {name: int(defined[name]) for name in checked}


def test_every_rule_names_a_known_syscall_and_the_program_fits() -> None:
    for rule in (*DENIED, *NETWORK_OFF):
        assert rule.syscall in X86_64, rule
    for network in (True, False):
        program = build_program(network)
        assert len(program) % 8 == 0 and 0 < len(program) // 8 <= 4096


def test_a_realistic_workload_still_works(dirs: Dirs, tmp_path: Path) -> None:
    # Threads, multiprocessing, git, a C compiler, make and pytest, under workspace-write.
    project = dirs.ws / "proj"
    project.mkdir()
    (project / "hello.c").write_text('#include <stdio.h>\nint main(void){puts("hello from c");return 0;}\n')
    (project / "Makefile").write_text("hello: hello.c\n\tcc -o hello hello.c\n")
    (project / "test_it.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (project / "work.py").write_text(
        "import multiprocessing, threading\n"
        "def sq(x):\n    return x * x\n"
        "if __name__ == '__main__':\n"
        "    t = threading.Thread(target=print, args=('thread ok',)); t.start(); t.join()\n"
        "    with multiprocessing.Pool(2) as pool:\n        print('pool', sum(pool.map(sq, range(10))))\n"
    )
    script = (
        "set -e; cd proj; export HOME=$TMPDIR GIT_CONFIG_NOSYSTEM=1;"
        "git init -q -b main; git -c user.email=a@b -c user.name=n add -A;"
        "git -c user.email=a@b -c user.name=n commit -qm one; git status --porcelain; echo git ok;"
        "make -s; ./hello; python3 work.py;"
        f"{sys.executable} -m pytest -q -p no:cacheprovider test_it.py 2>&1 | tail -1"
    )
    result = run_confined(dirs.policy(SandboxMode.WORKSPACE_WRITE), ["bash", "-c", script], cwd=dirs.ws)
    assert result.returncode == 0, result.stdout + result.stderr
    for expected in ("git ok", "hello from c", "thread ok", "pool 285", "1 passed"):
        assert expected in result.stdout, result.stdout + result.stderr
