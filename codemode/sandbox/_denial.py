"""Recognise, in a failed command's output, that the sandbox denied something; say so in one line."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from codemode.sandbox._policy import (
    WRITABLE_DEVICES,
    SandboxMode,
    SandboxPolicy,
    extra_writable,
    is_within,
)

__all__ = ["ENFORCEMENT_FAILED_MARKER", "explain_denial", "network_refusal_note"]

#: Start of the line a child writes to fd 2 when its confinement could not be enforced.
ENFORCEMENT_FAILED_MARKER = "codemode sandbox: confining the command:"

# Errors Landlock produces for filesystem writes: EACCES, EPERM (some tools), EXDEV (rename or
# link across directories without the REFER right), and EROFS as some tools word it.
_FS_ERROR = re.compile(
    r"permission denied|operation not permitted|read-only file system|invalid cross-device link"
    r"|\bEACCES\b|\bEPERM\b|\bEROFS\b|\bEXDEV\b|errno 13\b|errno 1\b|errno 18\b|os error 13\b",
    re.IGNORECASE,
)
_QUOTED = re.compile(r"""'([^'\n]+)'|"([^"\n]+)"|‘([^’\n]+)’|`([^'`\n]+)'""")
_BARE_PATH = re.compile(r"(?:(?<=\s)|(?<=^)|(?<=[:=(]))(/[^\s:'\"`,;()]*)")
_NETWORK_FAILURE = re.compile(
    r"failed to connect|couldn't connect|could not connect|unable to connect|connection refused"
    r"|network is unreachable|NewConnectionError|urlopen error|connect\(\)"
    r"|Failed to establish a new connection|ECONNREFUSED|ENETUNREACH"
    r"|connect: permission denied|bind: permission denied|/dev/(?:tcp|udp)/"
    r"|could not resolve host|temporary failure in name resolution|name or service not known",
    re.IGNORECASE,
)
_AUTH_FAILURE = re.compile(
    r"permission denied \(publickey|authentication failed|could not read username|bad credentials"
    r"|HTTP Basic: Access denied|\b401 Unauthorized",
    re.IGNORECASE,
)
_SYSTEM_DIRS = ("/etc/", "/usr/", "/var/", "/run/", "/sys/", "/boot/", "/opt/", "/srv/", "/root/", "/dev/")
_SYSTEM_WORDS = re.compile(
    r"are you root|must be (?:run as )?root|interactive authentication required|failed to connect to bus"
    r"|docker daemon socket",
    re.IGNORECASE,
)
_NETWORK_CONTEXT = re.compile(r"connect|\bbind\b|\.bind\(|socket|\bport\b|https?://|\bhost\b", re.IGNORECASE)
_PATHLESS_DENIAL = re.compile(
    r"permission denied|\berrno 13\b|\bEACCES\b|operation not permitted|os error 13\b", re.IGNORECASE
)
_ENDPOINTS = (
    re.compile(r"/dev/tcp/([^/\s]+)/(\d+)"),
    re.compile(r"(?:connect to|connecting to)\s+([\w.\-:\[\]]+?)[\s:]+port\s+(\d+)", re.IGNORECASE),
    re.compile(r"host='([^']+)',\s*port=(\d+)"),
    re.compile(r"\(\s*'([\w.\-:]+)'\s*,\s*(\d+)\s*\)"),
    re.compile(r"https?://([\w.\-]+)(?::(\d+))?"),
    re.compile(r"\b(\d{1,3}(?:\.\d{1,3}){3}):(\d+)\b"),
    re.compile(r"resolve host:? '?([\w.\-]+)()"),
)
_PROGRAM_PREFIX = re.compile(r"^[^\s:'\"]+: (?:line \d+: |\d+: )?(?=.*: )")
_NOT_PATHS = frozenset({"connect", "bind", "socket", "kill", "cd", "exec", "write error", "fork"})
_PATHLIKE = re.compile(r"[\w.~/+@%-][^\s\[\]()]*$")
_KILL_DENIED = re.compile(r"kill: \(?(\d+)\)?(?: - |: )operation not permitted", re.IGNORECASE)


def _candidates(line: str) -> list[str]:
    found: list[str] = []
    # `bash: line 1: PATH: Permission denied`, `tee: PATH: ...`: the field before the error.
    error = _FS_ERROR.search(line)
    if error is not None:
        fields = line[: error.start()].rstrip().removesuffix(":").split(": ")
        last = fields[-1].strip()
        if len(fields) > 1 and _PATHLIKE.match(last) and last not in _NOT_PATHS:
            found.append(last)
    # Drop the reporting program (`/bin/bash: line 1: ...`, `touch: ...`): it is not the target.
    body = _PROGRAM_PREFIX.sub("", line, count=1)
    for match in _QUOTED.finditer(body):
        found.append(next(g for g in match.groups() if g is not None))
    for match in _BARE_PATH.finditer(body):
        found.append(match.group(1))
    return [c.strip() for c in found if c.strip()]


def _absolute(candidate: str, cwd: Path | None) -> str | None:
    path = os.path.expanduser(candidate)
    if not os.path.isabs(path):
        if cwd is None:
            return None
        path = os.path.join(cwd, path)
    if path.startswith("/proc/"):
        # /proc/self/... would resolve in *this* process, not the command's: keep it as written.
        return os.path.normpath(path)
    return os.path.realpath(path)


def _host_could_write(path: str) -> bool:
    """Whether plain permissions (no sandbox) would let this process write ``path``."""
    if path.startswith("/proc/"):
        return True
    probe = path
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.access(probe, os.W_OK)


def _writable_roots(policy: SandboxPolicy) -> list[str]:
    roots = [os.path.realpath(p) for p in policy.all_writable()]
    roots.extend(extra_writable(policy))
    roots.extend(WRITABLE_DEVICES)
    return roots


def _denied_path(output: str, policy: SandboxPolicy, cwd: Path | None) -> str | None:
    roots: list[str] | None = None  # resolved only when some line looks like a denial
    for line in output.splitlines():
        if not _FS_ERROR.search(line):
            continue
        if roots is None:
            roots = _writable_roots(policy)
        for candidate in _candidates(line):
            path = _absolute(candidate, cwd)
            if (
                path is None
                or path.startswith(("/dev/tcp/", "/dev/udp/"))
                or any(is_within(path, root) for root in roots)
            ):
                continue
            if _host_could_write(path) or _system_target(path):
                return path
    return None


def _system_target(path: str) -> bool:
    """Whether ``path`` belongs to the system (a system directory, a socket or device, a file
    another user owns): escalation, not a wider sandbox, is what could reach it."""
    if path.startswith(_SYSTEM_DIRS) and not path.startswith("/var/tmp/"):
        return True
    probe = path
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    try:
        st = os.lstat(probe)
    except OSError:
        return False
    return stat.S_ISSOCK(st.st_mode) or stat.S_ISCHR(st.st_mode) or (st.st_uid == 0 != os.geteuid())


def _protected(path: str, policy: SandboxPolicy) -> bool:
    return any(is_within(path, os.path.realpath(p)) for p in policy.protected)


def _network_denial(output: str) -> str | None:
    lines = output.splitlines()
    hit = next((line for line in lines if _NETWORK_FAILURE.search(line)), None)
    if hit is None and _NETWORK_CONTEXT.search(output):
        hit = next(
            (
                line
                for line in lines
                if _PATHLESS_DENIAL.search(line) and not any(c.startswith("/") for c in _candidates(line))
            ),
            None,
        )
    if hit is None:
        return None
    for pattern in _ENDPOINTS:
        match = pattern.search(output)
        if match:
            host, port = match.group(1), match.group(2)
            return f"a TCP connection to {host} port {port}" if port else f"a TCP connection to {host}"
    return "a TCP connection"


def explain_denial(
    output: str, policy: SandboxPolicy, cwd: Path | None = None, *, exit_code: int | None = None
) -> str | None:
    """One line naming what the sandbox denied, or ``None`` when nothing points at the sandbox.

    Looks for permission errors on paths outside the writable roots (extracting the path from
    common message shapes: coreutils, shells, Python, Node, Go), refused TCP connections when
    the network is off, signals blocked by Landlock scoping, and a child whose confinement
    could not be enforced. Paths inside the writable roots are not blamed on the sandbox, nor
    paths the host could not write either. A command that succeeded gets no line: whatever it
    printed about a permission (``ls`` of an unreadable file, a tool that fell back to another
    path), the sandbox did not stop it.

    Args:
        output: The command's cleaned output (stdout and stderr).
        policy: The policy the command ran under.
        cwd: The command's working directory, to resolve relative paths (optional).
        exit_code: The command's exit code; ``None`` when unknown (still running, stopped).

    Returns:
        The line to add to the result, or ``None``.
    """
    if exit_code == 0:
        return None
    for line in output.splitlines():
        if line.startswith(ENFORCEMENT_FAILED_MARKER):
            return (
                "Sandbox: the Landlock confinement could not be enforced, so the command was not run "
                f"({line[len(ENFORCEMENT_FAILED_MARKER) :].strip()}). This is a host problem, not the "
                "command's: run `codemode doctor`."
            )
    if not policy.confined:
        return None
    mode = policy.mode.value
    path = _denied_path(output, policy, cwd)
    if path is not None:
        if _protected(path, policy):
            return (
                f"Sandbox ({mode}) denied writing {path}: it is codemode's state directory, which "
                "sandboxed commands can never change."
            )
        if _system_target(path):
            return (
                f"Sandbox ({mode}) denied {path}: it belongs to the system; only if the task needs it, "
                'rerun with sandbox: false or argv ["sudo", ...] as the last resort (asks the user).'
            )
        if policy.mode is SandboxMode.READ_ONLY:
            return (
                f"Sandbox (read-only) denied writing {path}: nothing is writable in read-only mode; "
                "the user must change the sandbox mode (e.g. to workspace-write) to allow it."
            )
        return (
            f"Sandbox ({mode}) denied writing {path}: outside the writable roots; write in the workspace "
            f'or pass write_paths: ["{os.path.dirname(path)}"] (asks the user).'
        )
    auth = next((line for line in output.splitlines() if _AUTH_FAILURE.search(line)), None)
    if auth is not None:
        return f"Credentials were refused ({auth.strip()[:80]}): report the credential problem to the user."
    if policy.proxied:
        what = _network_denial(output) or ("a name lookup" if _NO_LOOKUP.search(output) else None)
        if what is not None:
            return (
                f"Sandbox denied {what}: this command reaches the network only through the host's HTTP "
                f"proxy (HTTP_PROXY, HTTPS_PROXY), to {', '.join(policy.network_allow or ()) or 'no domain'}; "
                "clients that ignore proxies (git over SSH, raw sockets, their own DNS lookups) cannot "
                "connect. Use an https URL, or pass network: true for this call (asks the user)."
            )
    if not policy.network:
        what = _network_denial(output)
        if what is not None:
            return (
                f"Sandbox denied {what}: the network is off for commands; pass network: true to turn the "
                "network on for this call (asks the user)."
            )
    if _SYSTEM_WORDS.search(output):
        return (
            f"Sandbox ({mode}): this needs a system service or root; only if the task needs it, rerun "
            'with sandbox: false or argv ["sudo", ...] as the last resort (asks the user).'
        )
    for match in _KILL_DENIED.finditer(output):
        pid = int(match.group(1))
        if _same_user_process(pid):
            return (
                f"Sandbox ({mode}) denied signalling process {pid}: a command may only signal processes it "
                'started itself; stop background processes with bash action "stop".'
            )
    if not _NETWORK_CONTEXT.search(output):
        blocked = next((line for line in output.splitlines() if _PATHLESS_DENIAL.search(line)), None)
        if blocked is not None and not _candidates(blocked):  # a path named: judged above
            return (
                f"Sandbox ({mode}) blocked an operation ({blocked.strip()[:80]}): report what was blocked "
                "to the user and stop."
            )
    return None


_NO_LOOKUP = re.compile(
    r"could not resolve|temporary failure in name resolution|name or service not known"
    r"|getaddrinfo|no address associated|resolve host",
    re.IGNORECASE,
)


def network_refusal_note(refusals: list[str] | None, policy: SandboxPolicy) -> str | None:
    """One line naming what the network proxy refused the command (``host:port (reason)`` each),
    and how to allow it; None when it refused nothing."""
    if not refusals:
        return None
    seen = list(dict.fromkeys(refusals))
    missing = [
        text.rpartition(" (")[0].rpartition(":")[0]
        for text in seen
        if text.endswith("(not on the allowlist)")
    ]
    wanted = list(dict.fromkeys([*(policy.network_allow or ()), *missing]))
    more = f" and {len(seen) - 5} more" if len(seen) > 5 else ""
    how = (
        f" To reach {', '.join(dict.fromkeys(missing))}, pass network: {json.dumps({'allow': wanted})} "
        "(asks the user when the host's list does not cover it)."
        if missing
        else ""
    )
    return f"Network: the proxy refused {'; '.join(seen[:5])}{more}.{how}"


def _same_user_process(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
