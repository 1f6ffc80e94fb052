"""What ``codemode doctor`` shows of the sandbox: every layer's state for a policy, checked by
starting real confined commands (what a command gets, not what the host meant to apply)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from codemode.errors import SandboxUnavailable, UserError
from codemode.sandbox._cgroup import cgroup_root
from codemode.sandbox._denial import ENFORCEMENT_FAILED_MARKER
from codemode.sandbox._enforce import LaunchSpec, launch
from codemode.sandbox._landlock import landlock_status
from codemode.sandbox._launcher import launcher_fd, launcher_unavailable_reason
from codemode.sandbox._policy import SandboxPolicy

__all__ = ["Layer", "sandbox_report"]


@dataclass(frozen=True)
class Layer:
    """One confinement layer as ``codemode doctor`` shows it.

    Attributes:
        name: The layer.
        state: ``on`` (applied to every confined command), ``off`` (not in this mode) or
            ``unavailable`` (confined commands are refused, or the fallback is named).
        detail: What it covers here, or why it is unavailable.
    """

    name: str
    state: str
    detail: str


def sandbox_report(policy: SandboxPolicy) -> list[Layer]:
    """Every layer's state for ``policy``, checked by starting one real confined command.

    The probe (``/proc/self/status`` and ``/proc/self/cgroup`` read from inside the sandbox)
    shows what a command actually gets, not what the host meant to apply.
    """
    status = landlock_status()
    cgroups = cgroup_root()
    layers = [
        Layer(
            "launcher",
            "on" if launcher_fd() is not None else "unavailable",
            "applies every layer before the command runs"
            if launcher_fd() is not None
            else f"{launcher_unavailable_reason()}: every command is refused",
        ),
        Layer(
            "cgroup per command",
            "on" if cgroups.path else "unavailable",
            f"under {cgroups.path}: stop and session close end every descendant"
            if cgroups.path
            else f"{cgroups.reason}; descendants are found by process group and marker variable, so a "
            "process that leaves its session and clears its environment can escape stop",
        ),
    ]
    if not policy.confined:
        off = "full-access: not applied"
        layers += [
            Layer(name, "off", off) for name in ("capabilities", "no_new_privs", "landlock", "seccomp")
        ]
        return layers
    observed = _probe_confined(policy)
    caps = observed.get("CapBnd") == observed.get("CapEff") == observed.get("CapPrm") == "0000000000000000"
    layers += [
        Layer(
            "capabilities",
            "on" if caps else "unavailable",
            "bounding, ambient, effective, permitted and inheritable sets empty"
            if caps
            else observed.get("error", "the probe saw capabilities left"),
        ),
        Layer(
            "no_new_privs",
            "on" if observed.get("NoNewPrivs") == "1" else "unavailable",
            "setuid binaries and file capabilities grant nothing",
        ),
        Layer(
            "landlock",
            "on" if status.abi >= 3 and "error" not in observed else "unavailable",
            f"ABI {status.abi}: files beneath the state directory unreadable, writes beneath the writable "
            f"roots only, no device nodes; network {_landlock_network(policy)}; "
            + ("signals and abstract sockets scoped" if status.scopes else "no scoping (needs ABI 6)")
            if status.abi >= 3
            else f"{status.reason}: confined modes refuse every command",
        ),
        Layer(
            "seccomp",
            "on" if observed.get("Seccomp") == "2" else "unavailable",
            "terminal injection, raw and packet sockets, netlink but route, ptrace, bpf, keyrings, mounts, namespaces, "
            "host-wide settings and resource calls on other processes refused"
            + ("" if policy.network else "; every socket but netlink route refused (network off)"),
        ),
        _network_namespace(policy),
    ]
    return layers


def _landlock_network(policy: SandboxPolicy) -> str:
    if policy.proxied:
        return "TCP to the proxy's port only"
    return "on" if policy.network else "off (TCP denied)"


def _network_namespace(policy: SandboxPolicy) -> Layer:
    """Whether a network allowlist can be enforced here: a confined command under one is in a
    network namespace of its own (the probe reads its ``/proc/self/ns/net``), where the host's
    proxy is the only way out. Without an allowlist in force it is ``off``, saying whether one
    would work."""
    allow = policy.network_allow
    probe = policy if policy.proxied else replace(policy, network=True, network_allow=())
    read = _probe_confined(probe, ["readlink", "/proc/self/ns/net"])
    own = read.get("out", "").strip()
    works = bool(own) and own != os.readlink("/proc/self/ns/net")
    why = read.get("error") or f"the probe saw {own or 'nothing'}, the host's own namespace"
    if policy.proxied:
        return Layer(
            "network namespace",
            "on" if works else "unavailable",
            f"commands reach only {', '.join(allow or ()) or 'nothing'}, through the host's proxy"
            if works
            else f"{why}: with a network allowlist every command is refused",
        )
    return Layer(
        "network namespace",
        "off",
        "no network allowlist in force; one (--network-allow) would run each command in a network "
        "namespace of its own, reaching only the host's proxy"
        if works
        else f"no network allowlist in force; one could not be enforced here ({why})",
    )


def _probe_confined(policy: SandboxPolicy, argv: list[str] | None = None) -> dict[str, str]:
    """``/proc/self/status`` fields as a confined ``cat`` sees them, or ``{"error": why}``;
    given ``argv``, that command's whole output as ``{"out": text}``."""
    read, write = os.pipe2(os.O_CLOEXEC)
    devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            proc = launch(
                LaunchSpec(
                    argv or ["cat", "/proc/self/status"],
                    "/",
                    dict(os.environ),
                    policy,
                    stdio=(devnull, write, write),
                )
            )
        except (SandboxUnavailable, UserError, OSError) as exc:
            return {"error": str(exc)}
        finally:
            os.close(write)
            os.close(devnull)
        out = b""
        while chunk := os.read(read, 65536):
            out += chunk
        proc.wait(timeout=10)
    finally:
        os.close(read)
    text = out.decode(errors="replace")
    if text.startswith(ENFORCEMENT_FAILED_MARKER):
        return {"error": text.strip()}
    if argv is not None:
        return {"out": text}
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}
