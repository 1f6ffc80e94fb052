"""The host's own secrets: environment variables that never reach a command.

A command runs with the host's environment, minus these (`without_host_secrets`): whoever holds
the MCP front's token or the host's database URL can act as the host, so a confined command
holding one would not be confined. The table is data: add a name or a pattern here, and every
command's environment (bash runs, background processes, watchers, the git probe) loses it.

Upstream MCP servers get a narrower environment still: only the MCP SDK's few safe variables
(HOME, PATH, ...) and what their configuration names.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping

__all__ = [
    "HOST_SECRET_NAMES",
    "HOST_SECRET_PATTERNS",
    "is_host_secret",
    "take_host_secret",
    "without_host_secrets",
]

#: Variables the host reads as its own credentials.
HOST_SECRET_NAMES = frozenset(
    {
        "CODEMODE_MCP_TOKEN",  # the streamable HTTP front's bearer token
        "CODEMODE_DATABASE_URL",  # a database URL carries its password
        "CODEMODE_ARCHIVE_URL",  # an archive store's URL may carry its keys
    }
)

#: Shell-style patterns (case-sensitive) of codemode's own secret variables, present and future.
HOST_SECRET_PATTERNS = (
    "CODEMODE_*_TOKEN",
    "CODEMODE_*_SECRET",
    "CODEMODE_*_PASSWORD",
    "CODEMODE_*_KEY",
    "CODEMODE_*_DATABASE_URL",
    "CODEMODE_*_DSN",
)


def is_host_secret(name: str) -> bool:
    """Whether the variable ``name`` is one of the host's own secrets (see the tables)."""
    return name in HOST_SECRET_NAMES or any(fnmatch.fnmatchcase(name, p) for p in HOST_SECRET_PATTERNS)


def without_host_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` minus the host's own secrets."""
    return {k: v for k, v in environ.items() if not is_host_secret(k)}


def take_host_secret(name: str) -> str | None:
    """Read the variable ``name`` and remove it from this process's environment.

    Removing it keeps it out of every process this one starts afterwards, whatever builds that
    process's environment (a supervisor started with the host's own, a library's subprocess).
    The kernel's copy (``/proc/<pid>/environ``) keeps the value; a confined command cannot read
    it (Landlock denies ptrace-mode access to processes outside its domain, and reading another
    process's ``environ`` is such an access), which tests/security/test_host_credentials.py checks.
    """
    return os.environ.pop(name, None)
