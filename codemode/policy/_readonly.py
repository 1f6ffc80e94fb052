"""The read-only allowlist: commands that only look, so they need no approval.

A command matches when its executable is listed and, where the table names subcommands (git's
``status``), its first argument is one of them; options the table names as changing things
(``find -delete``, ``sort -o``) and any argument that names a sensitive path (keys, credentials,
``.env`` files) cancel the match. Wrappers that only change how a command runs (``env``,
``timeout``, ``nice``, ``time``) are neutral: the command they run decides. Everything else
(``sh -c``, ``xargs``, ``sudo``, ``find -exec``) is not read-only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

__all__ = ["is_read_only"]

# executable -> the first arguments that keep it read-only (None: any arguments).
_READ_ONLY: dict[str, frozenset[str] | None] = {
    "git": frozenset(
        {"status", "log", "diff", "show", "branch", "rev-parse", "ls-files", "blame", "describe", "shortlog"}
    ),
    **dict.fromkeys(
        (
            "ls cat head tail wc grep egrep fgrep rg ag find fd pwd echo printf stat file which type du df "
            "tree sort uniq cut tr nl basename dirname realpath readlink date whoami id uname env true false "
            "test [ diff cmp md5sum sha1sum sha256sum jq less more column comm"
        ).split(),
        None,
    ),
}

# Options that make a listed command change things (or run others).
_WRITING_OPTIONS: dict[str, frozenset[str]] = {
    "find": frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprintf", "-fls"}),
    "fd": frozenset({"-x", "--exec", "-X", "--exec-batch"}),
    "sort": frozenset({"-o", "--output"}),
    "tail": frozenset({"-f", "-F", "--follow"}),
    "git": frozenset({"--output", "-o"}),
    "rg": frozenset({"--pre"}),
    "env": frozenset({"-S", "--split-string"}),
    "date": frozenset({"-s", "--set"}),
}

# Wrappers whose own effect is only how the command runs: the wrapped command decides.
NEUTRAL_WRAPPERS = frozenset({"env", "nohup", "timeout", "nice", "ionice", "time", "command", "stdbuf"})

_SENSITIVE = re.compile(
    r"(^|/)(\.env(\..*)?|\.ssh|id_[a-z0-9]+|\.aws|\.gnupg|\.netrc|\.npmrc|\.pypirc|\.docker|credentials"
    r"|secrets?(\..*)?|shadow|gshadow|sudoers|.*\.pem|.*\.key|.*\.p12|.*\.pfx|\.git-credentials|\.kube)(/|$)",
    re.IGNORECASE,
)


def is_read_only(words: Sequence[str | None]) -> bool:
    """Whether one command (its words; None for a computed word) only looks."""
    if not words or any(word is None for word in words):
        return False
    name = os.path.basename(str(words[0]))
    args = [str(word) for word in words[1:]]
    if name not in _READ_ONLY:
        return False
    allowed = _READ_ONLY[name]
    if allowed is not None and (not args or args[0] not in allowed):
        return False
    writing = _WRITING_OPTIONS.get(name, frozenset())
    if any(arg in writing or arg.split("=", 1)[0] in writing for arg in args):
        return False
    return not any(_SENSITIVE.search(arg) for arg in args)
