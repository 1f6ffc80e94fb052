"""Wrappers: commands that run the command in their arguments (``env``, ``nohup``, ``timeout``,
``sudo``, ``xargs``, ``script -c``, ``watch``...), as a table, and what one of them runs."""

from __future__ import annotations

from dataclasses import dataclass

from codemode.policy._scripts import split_string

__all__ = ["WRAPPERS", "Wrapper", "unwrap"]


@dataclass(frozen=True)
class Wrapper:
    """A command that runs the command in its arguments.

    Attributes:
        names: Its executable names.
        valued: Its options that take the next word as their value.
        positionals: Words after the options before the command (``timeout 5 cmd``).
        assignments: It takes ``NAME=value`` words before the command (``env``, ``sudo``).
        lookup_only: Options after which it only looks the command up (``command -v``).
        script_option: An option whose value is a shell string it runs (``npx -c``).
        split_options: Options whose value is split into more words (``env -S``).
        appends_input: It adds words read from its input to the command (``xargs``).
        joins_words: It joins its command words with spaces and runs them with ``sh -c``
            (``watch``, ``sg``); ``exec_options`` turn that off (``watch -x``).
        no_argv: Its operands are not a command (``script FILE``): only its script option runs one.
    """

    names: frozenset[str]
    valued: frozenset[str] = frozenset()
    positionals: int = 0
    assignments: bool = False
    lookup_only: frozenset[str] = frozenset()
    script_option: str | None = None
    split_options: frozenset[str] = frozenset()
    appends_input: bool = False
    joins_words: bool = False
    exec_options: frozenset[str] = frozenset()
    no_argv: bool = False


def _w(names: str, valued: str = "", **kw: object) -> Wrapper:
    return Wrapper(frozenset(names.split()), frozenset(valued.split()), **kw)  # type: ignore[arg-type]


WRAPPERS: tuple[Wrapper, ...] = (
    _w("env", "-u --unset -C --chdir", assignments=True, split_options=frozenset({"-S", "--split-string"})),
    _w("nohup setsid chronic unbuffer nocache builtin busybox coproc eatmydata fakeroot catchsegv"),
    _w("taskset", "", positionals=1, lookup_only=frozenset({"-p", "--pid"})),
    _w(
        "chrt",
        "-T --sched-runtime -P --sched-period -D --sched-deadline",
        positionals=1,
        lookup_only=frozenset({"-p", "--pid", "-m", "--max"}),
    ),
    _w("strace ltrace", "-o -e -p -s -u -E -a -P -I -b -S -X -n -A -l -L -F"),
    _w(
        "setpriv",
        "--reuid --regid --groups --inh-caps --ambient-caps --bounding-set --securebits "
        "--pdeathsig --selinux-label --apparmor-profile --landlock-access --landlock-rule",
    ),
    _w("prlimit", "-p --pid -o --output"),
    _w("nsenter", "-t --target -S --setuid -G --setgid -r --root -w --wd"),
    _w("unshare", "-S --setuid -G --setgid -R --root -w --wd --map-user --map-group --propagation"),
    _w(
        "script",
        "-E --echo -I --log-in -O --log-out -B --log-io -T --log-timing -m --logging-format",
        script_option="-c",
        no_argv=True,
    ),
    _w(
        "su",
        "-g --group -G --supp-group -s --shell -w --whitelist-environment",
        script_option="-c",
        no_argv=True,
    ),
    _w(
        "runuser",
        "-u --user -g --group -G --supp-group -s --shell -w --whitelist-environment",
        script_option="-c",
    ),
    _w("sg", "", positionals=1, script_option="-c", joins_words=True),
    _w("nice", "-n --adjustment"),
    _w("ionice", "-c --class -n --classdata"),
    _w("stdbuf", "-i -o -e --input --output --error"),
    _w("timeout", "-s --signal -k --kill-after", positionals=1),
    _w("time", "-f --format -o --output"),
    _w("command", lookup_only=frozenset({"-v", "-V"})),
    _w("exec", "-a"),
    _w(
        "sudo",
        "-u --user -g --group -C --close-from -D --chdir -h --host -p --prompt -r --role -t --type "
        "-T --command-timeout -U --other-user",
        assignments=True,
    ),
    _w("doas", "-u -C"),
    _w(
        "xargs",
        "-a --arg-file -d --delimiter -E -I -L --max-lines -n --max-args -P --max-procs -s --max-chars "
        "--process-slot-var",
        appends_input=True,
    ),
    _w("flock", "-w --wait --timeout -E --conflict-exit-code", positionals=1, script_option="-c"),
    _w("watch", "-n --interval -q --equexit", joins_words=True, exec_options=frozenset({"-x", "--exec"})),
    _w("npx bunx pnpx", "-p --package", script_option="-c"),
)


@dataclass(frozen=True)
class _Split:
    """A wrapper's split option (``env -S STRING``): STRING's words (None: env expands it
    itself) and the words after it."""

    text: str
    words: tuple[str | None, ...] | None


def _split_option(wrapper: Wrapper, rest: tuple[str | None, ...], index: int) -> _Split | None:
    """``rest[index]`` as a split option (``-S X``, ``-SX``, ``-iS X``, ``--split-string=X``)."""
    word = rest[index] or ""
    value: str | None
    if word.startswith("--"):
        name, eq, value = word.partition("=")
        if name not in wrapper.split_options:
            return None
        if not eq:
            value = rest[index + 1] if index + 1 < len(rest) else ""
            index += 1
    else:
        shorts = {o[1] for o in wrapper.split_options if len(o) == 2}
        valued = {o[1] for o in wrapper.valued if len(o) == 2 and o[0] == "-"}
        at = next((i for i, c in enumerate(word[1:], 1) if c in shorts or c in valued), None)
        if at is None or word[at] not in shorts:
            return None
        value = word[at + 1 :]
        if not value:
            value = rest[index + 1] if index + 1 < len(rest) else ""
            index += 1
    if value is None:
        return _Split("…", None)
    split = split_string(value)
    after = rest[index + 1 :]
    return _Split(value, None if split is None else (*split, *after))


def _unwrap(wrapper: Wrapper, rest: tuple[str | None, ...]) -> tuple[str | None, ...] | str | _Split | None:
    """What a wrapper runs: an argv, a shell string (its script option), a split string, or None."""
    index = 0
    positionals = wrapper.positionals
    while index < len(rest):
        word = rest[index]
        if word is None:
            return rest[index:] if positionals == 0 else None
        if word == "--":
            index += 1
            break
        if wrapper.script_option is not None and _is_option(word, wrapper.script_option):
            letter = wrapper.script_option[1]
            attached = word[word.index(letter, 1) + 1 :] if not word.startswith("--") else ""
            if attached:
                return attached
            if index + 1 >= len(rest):
                return None
            return rest[index + 1] if rest[index + 1] is not None else _Split("…", None)
        if wrapper.script_option is not None and word.startswith("--command"):
            value = (
                word.partition("=")[2] if "=" in word else (rest[index + 1] if index + 1 < len(rest) else "")
            )
            return value if value is not None else _Split("…", None)
        if wrapper.split_options and word.startswith("-") and word != "-":
            split = _split_option(wrapper, rest, index)
            if split is not None:
                return split
        if word in wrapper.lookup_only:
            return None
        if word in wrapper.valued:
            index += 2
            continue
        if word.startswith("-") and word != "-":
            index += 1
            continue
        if wrapper.assignments and "=" in word and not word.startswith("="):
            index += 1
            continue
        if positionals:
            positionals -= 1
            index += 1
            continue
        break
    while positionals and index < len(rest):
        positionals -= 1
        index += 1
    if wrapper.assignments:
        while (
            index < len(rest) and (rest[index] or "").count("=") and not (rest[index] or "").startswith("=")
        ):
            index += 1
    if wrapper.no_argv:
        return None
    if wrapper.joins_words and not any(w in wrapper.exec_options for w in rest[:index]) and rest[index:]:
        words = rest[index:]
        if any(w is None for w in words):
            return _Split("…", None)
        return " ".join(w for w in words if w is not None)
    return rest[index:] or None


def _is_option(word: str, option: str) -> bool:
    """Whether ``word`` is the short ``option`` alone or in a cluster (``-qc`` holds ``-c``)."""
    if word == option:
        return True
    return len(option) == 2 and word.startswith("-") and not word.startswith("--") and option[1] in word[1:]


unwrap = _unwrap
