"""Words a command turns into code: builtins that evaluate text, variables a shell or a program
runs, and options that embed a command.

The strict command policy checks the commands a line names; these are the ways a line runs code
that is not a command name (see `codemode.policy._commands`):

* builtins whose argument is a command string (``trap``, ``mapfile -C``, ``complete -C``,
  ``coproc``): the string is followed and checked as a script when it is literal;
* builtins that take a variable name, whose subscript bash evaluates as arithmetic (``read``,
  ``unset``, ``printf -v``, ``test -v``, ``declare``...): a name that is not literal, or with a
  subscript that is not a number, cannot be checked;
* builtins that make later text code (``let``, ``declare -i``/``-n``, ``enable -f``, ``hash -p``);
* variables that make a shell or a program run something else (`CODE_VARIABLES`; a change of
  `REBINDING_VARIABLES` changes what a command name runs, refused whenever a deny list is set);
* per-command options that run a command of their own (`OPTION_RULES`: ``git -c alias.x=!…``,
  ``tar --to-command``, ``ssh -o ProxyCommand``...).

All of it is plain tables; `_commands` applies them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CODE_VARIABLES",
    "OPTION_RULES",
    "REBINDING_VARIABLES",
    "assigned_names",
    "evaluated_strings",
    "refused_builtin",
    "risky_option",
    "variable_problem",
]

REBINDING_VARIABLES = frozenset({"PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_LOADABLES_PATH"})
"""Variables that change what a command name runs: under a deny list a denied program could run
under another name (``PATH=.:$PATH ls`` with ``./ls`` a copy of ``touch``)."""

CODE_VARIABLES: dict[str, str] = {
    "BASH_ENV": "a file a shell runs at start",
    "ENV": "a file a shell runs at start",
    "PS0": "a prompt bash expands, running its command substitutions",
    "PS1": "a prompt bash expands, running its command substitutions",
    "PS2": "a prompt bash expands, running its command substitutions",
    "PS3": "a prompt bash expands, running its command substitutions",
    "PS4": "a prompt bash expands with `set -x`, running its command substitutions",
    "PROMPT_COMMAND": "a command bash runs before a prompt",
    "SHELL": "the shell that script, su and chroot run",
    "PAGER": "a command programs run",
    "MANPAGER": "a command programs run",
    "GIT_PAGER": "a command git runs",
    "EDITOR": "a command programs run",
    "VISUAL": "a command programs run",
    "GIT_EDITOR": "a command git runs",
    "GIT_SEQUENCE_EDITOR": "a command git runs",
    "GIT_SSH": "a command git runs",
    "GIT_SSH_COMMAND": "a command git runs",
    "GIT_EXTERNAL_DIFF": "a command git runs",
    "GIT_ASKPASS": "a command git runs",
    "GIT_PROXY_COMMAND": "a command git runs",
    "GIT_EXEC_PATH": "where git finds its commands",
    "GIT_CONFIG_PARAMETERS": "git configuration (aliases and hooks run commands)",
    "GIT_CONFIG_COUNT": "git configuration (aliases and hooks run commands)",
    "GIT_CONFIG_GLOBAL": "git configuration (aliases and hooks run commands)",
    "GIT_CONFIG_SYSTEM": "git configuration (aliases and hooks run commands)",
    "SSH_ASKPASS": "a command ssh runs",
    "LESSOPEN": "a command less runs",
    "LESSCLOSE": "a command less runs",
    "TAR_OPTIONS": "tar options (they can run commands)",
    "RSYNC_RSH": "a command rsync runs",
    **{name: "what a command name runs" for name in REBINDING_VARIABLES},
}
"""Variables whose value a shell or a program runs as code, with what they are."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^]]*\])?\+?=")


def variable_problem(name: str) -> str | None:
    """Why assigning ``name`` cannot be checked, or None."""
    what = CODE_VARIABLES.get(name) or (
        "git configuration (aliases and hooks run commands)" if name.startswith("GIT_CONFIG_") else None
    )
    return None if what is None else f"an assignment to {name} ({what})"


# -- builtins -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NameTaker:
    """A builtin whose words name variables (a subscript there is evaluated as arithmetic).

    Attributes:
        valued: Its options that take the next word as a value (not a name).
        name_options: Options whose value is a name (``printf -v NAME``).
        operands: Its operands are names (``read a b``, ``unset a``); else only option values.
        skip: Operands before the names (``getopts OPTSTRING NAME``).
    """

    valued: frozenset[str] = frozenset()
    name_options: frozenset[str] = frozenset()
    operands: bool = True
    skip: int = 0


def _n(valued: str = "", names: str = "", operands: bool = True, skip: int = 0) -> NameTaker:
    return NameTaker(frozenset(valued.split()), frozenset(names.split()), operands, skip)


NAME_TAKERS: dict[str, NameTaker] = {
    "read": _n("-d -i -n -N -p -t -u", "-a"),
    "unset": _n(),
    "printf": _n("", "-v", operands=False),
    "test": _n("", "-v", operands=False),
    "[": _n("", "-v", operands=False),
    "getopts": _n(skip=1),
    "wait": _n("", "-p", operands=False),
    "mapfile": _n("-d -n -O -s -u -C -c"),
    "readarray": _n("-d -n -O -s -u -C -c"),
    "declare": _n(),
    "typeset": _n(),
    "local": _n(),
    "export": _n(),
    "readonly": _n(),
}
"""Builtins whose words are variable names: each must be a literal name (``a`` or ``a[3]``)."""

COMMAND_OPTIONS: dict[str, frozenset[str]] = {
    "mapfile": frozenset({"-C"}),
    "readarray": frozenset({"-C"}),
    "complete": frozenset({"-C"}),
    "compgen": frozenset({"-C"}),
}
"""Builtins with an option whose value is a command they run (followed as a script)."""

REFUSED_FLAGS: dict[str, tuple[frozenset[str], str]] = {
    "declare": (
        frozenset("in"),
        "`declare -i`/`-n` (later assignments are evaluated as arithmetic or names)",
    ),
    "typeset": (
        frozenset("in"),
        "`typeset -i`/`-n` (later assignments are evaluated as arithmetic or names)",
    ),
    "local": (frozenset("in"), "`local -i`/`-n` (later assignments are evaluated as arithmetic or names)"),
    "enable": (frozenset("f"), "`enable -f` (it loads a shared object as a builtin)"),
    "hash": (frozenset("p"), "`hash -p` (it binds a command name to another file)"),
}
"""Builtins refused under the strict policy when an option cluster holds one of these letters."""


def _options(
    words: tuple[str | None, ...], valued: frozenset[str]
) -> tuple[dict[str, str | None], list[str | None]]:
    """A builtin's options (``-x`` -> its value or "") and operands, read the getopt way."""
    options: dict[str, str | None] = {}
    index = 1
    while index < len(words):
        word = words[index]
        if word is None or word == "--" or not word.startswith(("-", "+")) or word in ("-", "+"):
            if word == "--":
                index += 1
            break
        for at, letter in enumerate(word[1:], 1):
            option = f"-{letter}"
            if option in valued:
                value = word[at + 1 :] or (words[index + 1] if index + 1 < len(words) else None)
                if not word[at + 1 :]:
                    index += 1
                options[option] = value
                break
            options[option] = ""
        index += 1
    return options, list(words[index:])


REFUSED_COMMANDS: dict[str, str] = {
    "chroot": "`chroot` (the command it runs is looked up inside another root)",
}
"""Commands the strict policy cannot follow at all."""

_COMPOUND = frozenset({"{", "(", "((", "}", ")"})


def refused_builtin(words: tuple[str | None, ...], raw: tuple[str, ...]) -> str | None:
    """Why a builtin's words cannot be checked (a name that is not literal, an evaluating
    option, ``let``), or None."""
    name = words[0]
    if name in REFUSED_COMMANDS:
        return REFUSED_COMMANDS[name]
    if name == "coproc" and (len(words) < 2 or _COMPOUND & set(words[1:3])):
        return "a `coproc` with a compound body (write its commands as a plain `coproc cmd args`)"
    if name == "let" or name == "((":
        return "`let` (bash evaluates its text as arithmetic, and a subscript there runs commands)"
    if name in REFUSED_FLAGS:
        letters, what = REFUSED_FLAGS[name]
        for word in words[1:]:
            if word is not None and word.startswith(("-", "+")) and letters & set(word[1:]):
                return what
    taker = NAME_TAKERS.get(name or "")
    if taker is None:
        return None
    options, operands = _options(words, taker.valued | taker.name_options)
    names: list[tuple[str | None, str]] = [
        (options[o], options[o] or "") for o in taker.name_options if o in options
    ]
    if taker.operands:
        offset = len(words) - len(operands)
        names.extend(
            (words[i], raw[i] if i < len(raw) else "") for i in range(offset + taker.skip, len(words))
        )
    for value, shown in names:
        text = value if value is not None else shown
        if name in ("export", "declare", "typeset", "local", "readonly") and text.startswith(("-", "+")):
            continue
        match = _ASSIGNMENT.match(text)
        target = text if match is None else match.group(1) + (match.group(2) or "")
        if value is None and match is None:
            return f"`{name}` of a computed variable name (a subscript in it would run commands)"
        if not _NAME.fullmatch(target):
            return (
                f"`{name}` of the variable name `{target[:40]}` (its subscript would be evaluated "
                "and can run commands)"
            )
    return None


def assigned_names(words: tuple[str | None, ...]) -> list[str]:
    """The variables a builtin assigns by name (``read NAME``, ``printf -v NAME``, ...)."""
    taker = NAME_TAKERS.get(words[0] or "")
    if taker is None:
        return []
    options, operands = _options(words, taker.valued | taker.name_options)
    found = [options[o] or "" for o in taker.name_options if o in options]
    if taker.operands:
        found.extend(w or "" for w in operands[taker.skip :])
    return [re.split(r"[\[+=]", name, maxsplit=1)[0] for name in found]


def evaluated_strings(words: tuple[str | None, ...]) -> list[str | None]:
    """The command strings a builtin runs (``trap 'cmd' EXIT``, ``mapfile -C cmd``; None:
    computed)."""
    name = words[0]
    if name == "trap":
        options, operands = _options(words, frozenset())
        if not operands or set(options) & {"-p", "-l"}:
            return []
        action = operands[0]
        if action == "-" or (action is not None and action.isdigit() and len(operands) == 1):
            return []
        return [action]
    wanted = COMMAND_OPTIONS.get(name or "")
    if not wanted:
        return []
    valued = (
        NAME_TAKERS[name].valued
        if name in NAME_TAKERS
        else frozenset({"-C", "-F", "-o", "-A", "-G", "-W", "-X", "-P", "-S"})
    )
    options, _ = _options(words, valued)
    return [options[o] for o in wanted if o in options]


# -- options that run a command -------------------------------------------------------------


@dataclass(frozen=True)
class OptionRule:
    """An option of one command that runs a command of its own.

    Attributes:
        command: The executable's name.
        option: The option (``--to-command``: also ``--to-command=X``; ``-I``: also inside a
            cluster like ``-xIf``).
        subcommand: Only after this subcommand (``git rebase -x``); None: before any
            subcommand for git, anywhere for the others.
        keys: The option's value is ``KEY=…`` or ``KEY …``: only these keys (lowercase
            prefixes) run a command.
        safe_keys: Every key runs a command but these (lowercase prefixes).
    """

    command: str
    option: str
    subcommand: str | None = None
    keys: tuple[str, ...] = ()
    safe_keys: tuple[str, ...] = ()


_GIT_SAFE = ("user.", "color.", "advice.", "init.defaultbranch", "safe.directory", "column.", "i18n.")
_SSH_KEYS = ("proxycommand", "localcommand", "permitlocalcommand", "knownhostscommand", "match")

OPTION_RULES: tuple[OptionRule, ...] = (
    OptionRule("git", "-c", safe_keys=_GIT_SAFE),
    OptionRule("git", "--config-env"),
    OptionRule("git", "--exec-path"),
    *(
        OptionRule("git", o, s)
        for s in ("clone", "fetch", "pull", "ls-remote", "archive")
        for o in ("--upload-pack", "-u", "--remote")
    ),
    OptionRule("git", "--receive-pack", "push"),
    OptionRule("git", "--exec", "push"),
    OptionRule("git", "-x", "rebase"),
    OptionRule("git", "--exec", "rebase"),
    OptionRule("git", "-x", "difftool"),
    OptionRule("git", "--extcmd", "difftool"),
    OptionRule("git", "run", "bisect"),
    OptionRule("git", "foreach", "submodule"),
    OptionRule("git", "--tree-filter", "filter-branch"),
    OptionRule("git", "--index-filter", "filter-branch"),
    OptionRule("git", "--msg-filter", "filter-branch"),
    OptionRule("git", "--env-filter", "filter-branch"),
    OptionRule("git", "--commit-filter", "filter-branch"),
    OptionRule("git", "--parent-filter", "filter-branch"),
    OptionRule("git", "--tag-name-filter", "filter-branch"),
    *(
        OptionRule("tar", o)
        for o in (
            "--checkpoint-action",
            "--to-command",
            "--use-compress-program",
            "-I",
            "--info-script",
            "--new-volume-script",
            "-F",
            "--rsh-command",
            "--rmt-command",
        )
    ),
    OptionRule("rsync", "-e"),
    OptionRule("rsync", "--rsh"),
    *(OptionRule(c, "-o", keys=_SSH_KEYS) for c in ("ssh", "scp", "sftp")),
    *(OptionRule(c, "-F") for c in ("ssh", "scp", "sftp")),
    OptionRule("scp", "-S"),
    OptionRule("sftp", "-S"),
    OptionRule("sftp", "-D"),
    OptionRule("unshare", "-R"),
    OptionRule("unshare", "--root"),
    OptionRule("zip", "-TT"),
    OptionRule("zip", "--unzip-command"),
)
"""Options that run a command the policy does not follow: refused under the strict policy."""

_GIT_VALUED = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"}
)


def _matches(option: str, word: str, following: str | None) -> tuple[bool, str | None]:
    """Whether ``word`` is ``option`` and its value (attached or the next word)."""
    if option.startswith("--") or len(option) != 2 or word.startswith("--"):
        if word == option:
            return True, following
        if word.startswith(option + "="):
            return True, word[len(option) + 1 :]
        if len(option) == 2 and word.startswith(option) and not word.startswith("--"):
            return True, word[2:]  # -oProxyCommand=...
        return False, None
    if word.startswith("-") and option[1] in word[1:]:
        rest = word[word.index(option[1], 1) + 1 :]
        return True, rest or following
    return False, None


def risky_option(words: tuple[str | None, ...]) -> str | None:
    """The option of ``words`` that runs a command of its own (`OPTION_RULES`), or None."""
    name = words[0]
    rules = [r for r in OPTION_RULES if r.command == name]
    if not rules:
        return None
    subcommand: str | None = None
    index = 1
    while index < len(words):
        word = words[index]
        following = words[index + 1] if index + 1 < len(words) else None
        if word == "--":
            break
        if word is None:
            index += 1
            continue
        if name == "git" and subcommand is None and not word.startswith("-"):
            subcommand = word
            index += 1
            continue
        for rule in rules:
            if rule.subcommand != subcommand and not (name != "git" and rule.subcommand is None):
                continue
            if rule.option.startswith("-"):
                hit, value = _matches(rule.option, word, following)
            else:
                hit, value = word == rule.option, None
            if not hit:
                continue
            if rule.keys or rule.safe_keys:
                if value is None:
                    return f"`{name} {rule.option}` with a computed value"
                key = value.split("=", 1)[0].strip().lower()
                if rule.keys and not key.startswith(rule.keys):
                    continue
                if rule.safe_keys and key.startswith(rule.safe_keys):
                    continue
                return f"`{name} {rule.option} {value[:40]}` (it runs a command of its own)"
            return f"`{name} {rule.option}` (it runs a command of its own)"
        index += 2 if name == "git" and subcommand is None and word in _GIT_VALUED else 1
    return None
