"""The host's package manager: which one installs system packages here, and how a model asks
for an install (an escalation: argv ``["sudo", MANAGER, ...]``, or Homebrew outside the sandbox
without sudo, since its own sandbox cannot nest in ours and it refuses to run as root).

Found from ``/etc/os-release`` (the distribution ``codemode doctor`` reports), else the first
of `MANAGERS` on PATH; the manager must be on PATH either way.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MANAGERS", "PackageManager", "find_package_manager", "os_release"]

MANAGERS = ("apt-get", "dnf", "yum", "pacman", "apk", "brew")
"""Package managers known, in the order they are looked for on PATH."""

_BY_DISTRIBUTION = {
    "debian": "apt-get",
    "ubuntu": "apt-get",
    "fedora": "dnf",
    "rhel": "dnf",
    "centos": "dnf",
    "arch": "pacman",
    "alpine": "apk",
}
_INSTALL = {
    "apt-get": ["install", "-y"],
    "dnf": ["install", "-y"],
    "yum": ["install", "-y"],
    "pacman": ["-S", "--noconfirm"],
    "apk": ["add"],
    "brew": ["install"],
}


@dataclass(frozen=True)
class PackageManager:
    """A package manager and the call that installs with it.

    Attributes:
        name: Its executable (``apt-get``, ``brew``...).
        argv: The argv of an install of ``PKG``.
        unsandboxed: The install is ``sandbox: false`` (Homebrew) rather than ``sudo``.
    """

    name: str
    argv: tuple[str, ...]
    unsandboxed: bool = False

    def describe(self) -> str:
        """One short line for the bash tool's description."""
        argv = json.dumps(list(self.argv), separators=(",", ":")).replace('"PKG"', "PKG")
        return f"Install packages: argv {argv}" + (", sandbox: false." if self.unsandboxed else ".")


def os_release(path: str = "/etc/os-release") -> dict[str, str]:
    """The fields of ``/etc/os-release`` (empty when it is missing or unreadable)."""
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(64 * 1024)
    except OSError:
        return fields
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().isidentifier():
            fields[key.strip()] = value.strip().strip("\"'")
    return fields


def find_package_manager(
    environ: Mapping[str, str] | None = None, release: Mapping[str, str] | None = None
) -> PackageManager | None:
    """This host's package manager, or None when none known is on PATH.

    Args:
        environ: The commands' environment (its PATH is searched; default ``os.environ``).
        release: The ``/etc/os-release`` fields (default: read now).
    """
    path = (environ if environ is not None else os.environ).get("PATH", os.defpath)
    fields = os_release() if release is None else release
    ids = [fields.get("ID", ""), *fields.get("ID_LIKE", "").split()]
    wanted = [_BY_DISTRIBUTION[i] for i in ids if i in _BY_DISTRIBUTION]
    if "dnf" in wanted:
        wanted.append("yum")  # older releases of the same family
    for name in (*wanted, *MANAGERS):
        if shutil.which(name, path=path) is not None:
            if name == "brew":
                return PackageManager(name, ("brew", *_INSTALL[name], "PKG"), unsandboxed=True)
            return PackageManager(name, ("sudo", name, *_INSTALL[name], "PKG"))
    return None
