"""The command policy's decisions as a table: command line -> verdict (and why), for the default
policy with ``rm`` and ``curl`` denied, and for the strict one. Real parses, real package.json
files; no process runs here (tests/policy/test_bash_policy.py runs them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codemode.errors import ErrorCode
from codemode.policy import CommandPolicy, Verdict, plain_argv
from codemode.policy._shell import parse

DENY = frozenset({"rm", "curl"})
ALLOW, DENIED, WATCHER, REDACTED = "allow", "denied", "watcher", "redacted"
CODES = {
    ErrorCode.DENIED_BY_POLICY: DENIED,
    ErrorCode.WATCHER_IN_FOREGROUND: WATCHER,
    ErrorCode.REDACTED_VALUE: REDACTED,
}

# (command line, verdict under the default policy with rm/curl denied, verdict under strict)
TABLE: list[tuple[str, str, str]] = [
    # plain commands, pipelines, lists
    ("git status", ALLOW, ALLOW),
    ("git diff | grep x | wc -l", ALLOW, ALLOW),
    ("make && rm -rf build", DENIED, DENIED),
    ("false || rm x; ls &", DENIED, DENIED),
    ("ls -la /tmp/rm", ALLOW, ALLOW),  # rm as an argument is no command
    ("echo rm", ALLOW, ALLOW),
    ("grep -r 'curl' .", ALLOW, ALLOW),
    # subshells, groups, substitutions, here-docs
    ("(cd sub && rm x)", DENIED, DENIED),
    ("{ echo a; rm b; }", DENIED, DENIED),
    ("echo $(rm x)", DENIED, DENIED),
    ("echo `curl x`", DENIED, DENIED),
    ('echo "today: $(curl -s x)"', DENIED, DENIED),
    ("echo ${x:-$(rm q)}", DENIED, DENIED),
    ("diff <(sort a) <(rm b)", DENIED, DENIED),
    ("x=$(rm a)", DENIED, DENIED),
    ("cat <<EOF\nhello $(rm z)\nEOF", DENIED, DENIED),
    ("cat <<'EOF'\nrm z\nEOF", ALLOW, ALLOW),  # a quoted here-doc is text
    # control flow and functions
    ("if test -f x; then rm x; fi", DENIED, DENIED),
    ("case $x in a) rm a;; *) echo no;; esac", DENIED, DENIED),
    ('for f in *.o; do rm "$f"; done', DENIED, DENIED),
    ("while read l; do echo $l; done < list", ALLOW, ALLOW),
    ("[[ -f x ]] && curl y", DENIED, DENIED),
    ("f() { rm x; }; f", DENIED, DENIED),
    ("function g { curl x; }", DENIED, DENIED),
    ("alias x=rm; x f", DENIED, DENIED),
    ("! rm x", DENIED, DENIED),
    # quoting tricks
    ("r''m x", DENIED, DENIED),
    ('"rm" x', DENIED, DENIED),
    ("\\rm x", DENIED, DENIED),
    ("$'\\x72m' x", DENIED, DENIED),
    ("/bin/rm x", DENIED, DENIED),
    ("./node_modules/.bin/curl x", DENIED, DENIED),
    ("c''url x", DENIED, DENIED),
    # wrappers
    ("command rm x", DENIED, DENIED),
    ("command -v rm", ALLOW, ALLOW),  # looks it up only
    ("exec rm x", DENIED, DENIED),
    ("time rm x", DENIED, DENIED),
    ("env -i FOO=1 rm x", DENIED, DENIED),
    ("env -u HOME -- curl x", DENIED, DENIED),
    ("nohup curl x &", DENIED, DENIED),
    ("timeout -s KILL 10 rm x", DENIED, DENIED),
    ("timeout 10 ls", ALLOW, ALLOW),
    ("nice -n 5 ionice -c 3 rm x", DENIED, DENIED),
    ("sudo -u root rm x", DENIED, DENIED),
    ("sudo FOO=1 ls", DENIED, DENIED),  # sudo runs only as argv ["sudo", PROGRAM, ...]
    ("xargs -n1 rm < list", DENIED, DENIED),
    ("ls | xargs -I{} rm {}", DENIED, DENIED),
    ("find . -name '*.o' -exec rm {} +", DENIED, DENIED),
    ("find . -type f -execdir curl x \\;", DENIED, DENIED),
    ("find . -name '*.py'", ALLOW, ALLOW),
    ("npx -c 'rm x'", DENIED, DENIED),
    ("flock /tmp/l -c 'curl x'", DENIED, DENIED),
    # nested shells and eval
    ("sh -c 'rm x'", DENIED, DENIED),
    ("bash -ec 'echo a; curl x'", DENIED, DENIED),
    ("sh -c 'bash -c \"rm x\"'", DENIED, DENIED),
    ("bash -o pipefail -c 'ls | wc -l'", ALLOW, ALLOW),
    ("eval 'rm x'", DENIED, DENIED),
    ("bash <<'EOF'\nrm x\nEOF", DENIED, DENIED),
    ("sh <<< 'curl x'", DENIED, DENIED),
    # what cannot be checked: permissive runs it, strict refuses
    ("$cmd x", ALLOW, DENIED),
    ("$(echo rm) x", ALLOW, DENIED),
    ("echo 'unterminated", ALLOW, DENIED),
    ("echo rm x | sh", DENIED, DENIED),  # what echo prints is the script
    ("ls | sh", ALLOW, DENIED),  # what ls prints is not known before it runs
    ('sh -c "$script"', ALLOW, DENIED),
    ("eval $code", ALLOW, DENIED),
    ("find . -exec {} \\;", ALLOW, DENIED),
    ("bash script.sh", ALLOW, DENIED),  # a missing script file cannot be checked
    # watchers in the foreground
    ("tsc -w", WATCHER, WATCHER),
    ("tsc --watch -p .", WATCHER, WATCHER),
    ("tsc -p .", ALLOW, ALLOW),
    ("jest --watch", WATCHER, WATCHER),
    ("jest --watchAll", WATCHER, WATCHER),
    ("jest -w 4", ALLOW, ALLOW),  # jest's -w is --maxWorkers
    ("nodemon app.js", WATCHER, WATCHER),
    ("npx chokidar 'src/**' -c 'make'", WATCHER, WATCHER),
    ("vite", WATCHER, WATCHER),
    ("vite dev --port 3000", WATCHER, WATCHER),
    ("vite build", ALLOW, ALLOW),
    ("vitest run", ALLOW, ALLOW),
    ("vitest watch", WATCHER, WATCHER),
    ("tail -f app.log", WATCHER, WATCHER),
    ("tail -n 20 app.log", ALLOW, ALLOW),
    ("sh -c 'cd web && webpack -w'", WATCHER, WATCHER),
    ("uvicorn app:app --reload", WATCHER, WATCHER),
    ("pytest --watch=false", ALLOW, ALLOW),
    # masked values
    ("curl -H 'Authorization: Bearer [REDACTED:github-token]' x", REDACTED, REDACTED),
    ("echo [REDACTED:env:API_KEY] > key", REDACTED, REDACTED),
]


def _outcome(policy: CommandPolicy, command: str, cwd: Path) -> str:
    verdict = policy.check(command=command, cwd=cwd, workspace=cwd)
    if verdict.verdict is Verdict.ALLOW:
        assert verdict.code is None and verdict.message == ""
        return ALLOW
    assert verdict.verdict is Verdict.DENY and verdict.code is not None and verdict.message
    return CODES[verdict.code]


@pytest.mark.parametrize(("command", "default", "strict"), TABLE, ids=[row[0][:40] for row in TABLE])
def test_decision_table(command: str, default: str, strict: str, tmp_path: Path) -> None:
    assert _outcome(CommandPolicy(deny=DENY), command, tmp_path) == default
    assert _outcome(CommandPolicy(deny=DENY, strict=True), command, tmp_path) == strict


def test_the_default_policy_denies_nothing_and_says_it_is_permissive(tmp_path: Path) -> None:
    policy = CommandPolicy()
    assert policy.describe() == "command policy permissive; denied: none"
    verdict = policy.check(command="$cmd; rm -rf x", cwd=tmp_path, workspace=tmp_path)
    assert verdict.allowed
    assert verdict.unchecked == ("a computed command name `$cmd` (line 1)",)
    assert verdict.executables == ("rm",)


def test_messages_name_the_command_the_path_to_it_and_what_to_do(tmp_path: Path) -> None:
    policy = CommandPolicy(deny=DENY, strict=True)
    denied = policy.check(command="env FOO=1 sh -c 'timeout 5 rm x'", cwd=tmp_path, workspace=tmp_path)
    assert denied.message == (
        "`rm` (via env, inside sh -c, via timeout) is denied by this host's command policy; do it another "
        "way or ask the user"
    )
    watcher = CommandPolicy().check(command="ls && tsc -w", cwd=tmp_path, workspace=tmp_path)
    assert "`tsc -w` watches for changes" in watcher.message and "run_in_background: true" in watcher.message
    strict = policy.check(command="ls\n$tool --go", cwd=tmp_path, workspace=tmp_path)
    assert strict.message.startswith(
        "the strict command policy cannot check a computed command name `$tool` (line 2)"
    )
    broken = policy.check(command="if true; then echo", cwd=tmp_path, workspace=tmp_path)
    assert broken.code is ErrorCode.DENIED_BY_POLICY and "cannot check a " in broken.message
    masked = CommandPolicy().check(
        argv=["echo", "[REDACTED:aws-secret-key]"], cwd=tmp_path, workspace=tmp_path
    )
    assert masked.code is ErrorCode.REDACTED_VALUE
    assert "a redacted value" not in masked.message and "cannot be used as an argument" in masked.message
    assert "read the secret inside the same command" in masked.message


def test_watchers_are_allowed_in_the_background(tmp_path: Path) -> None:
    policy = CommandPolicy()
    assert policy.check(command="tsc -w", cwd=tmp_path, workspace=tmp_path, background=True).allowed
    off = CommandPolicy(refuse_foreground_watchers=False)
    assert off.check(command="tsc -w", cwd=tmp_path, workspace=tmp_path).allowed


def test_argv_is_checked_without_a_shell(tmp_path: Path) -> None:
    policy = CommandPolicy(deny=DENY)
    # In argv mode no metacharacter means anything: ';' and '$(...)' are plain arguments.
    assert policy.check(argv=["echo", "; rm x", "$(curl y)"], cwd=tmp_path, workspace=tmp_path).allowed
    assert not policy.check(argv=["/usr/bin/rm", "x"], cwd=tmp_path, workspace=tmp_path).allowed
    assert not policy.check(argv=["sh", "-c", "curl x"], cwd=tmp_path, workspace=tmp_path).allowed
    assert (
        policy.check(argv=["tsc", "-w"], cwd=tmp_path, workspace=tmp_path).code
        is ErrorCode.WATCHER_IN_FOREGROUND
    )


def _package(folder: Path, **scripts: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text(json.dumps({"name": "x", "scripts": scripts}))


@pytest.mark.parametrize(
    "command",
    [
        "npm run dev",
        "npm start",
        "pnpm dev",
        "pnpm run dev",
        "yarn dev",
        "yarn run dev",
        "bun run dev",
        "bun dev",
    ],
)
def test_watchers_through_package_scripts_four_levels_deep(command: str, tmp_path: Path) -> None:
    # dev -> serve (pnpm) -> watch (sh -c) -> compile:watch (yarn) -> tsc -w: four scripts deep.
    _package(
        tmp_path,
        dev="npm run serve",
        start="npm run serve",
        serve="pnpm run watch",
        watch="sh -c 'yarn compile:watch'",
        **{"compile:watch": "tsc -w -p ."},
    )
    verdict = CommandPolicy().check(command=command, cwd=tmp_path, workspace=tmp_path)
    assert verdict.code is ErrorCode.WATCHER_IN_FOREGROUND, verdict
    assert "`tsc -w -p .`" in verdict.message
    assert "script 'compile:watch' of yarn" in verdict.message


def test_package_scripts_beyond_four_levels_are_not_followed(tmp_path: Path) -> None:
    _package(tmp_path, a="npm run b", b="npm run c", c="npm run d", d="npm run e", e="tsc -w")
    policy = CommandPolicy()
    # a, b, c, d are followed (four levels); e, the watcher, would be the fifth.
    assert (
        policy.check(command="npm run b", cwd=tmp_path, workspace=tmp_path).code
        is ErrorCode.WATCHER_IN_FOREGROUND
    )
    deep = policy.check(command="npm run a", cwd=tmp_path, workspace=tmp_path)
    assert deep.allowed and deep.unchecked == ("package scripts nested deeper than 4 `npm e` (line 1)",)
    strict = CommandPolicy(strict=True).check(command="npm run a", cwd=tmp_path, workspace=tmp_path)
    assert strict.code is ErrorCode.DENIED_BY_POLICY and "nested deeper than 4" in strict.message


def test_package_scripts_are_found_from_cwd_upward_and_after_cd(tmp_path: Path) -> None:
    _package(tmp_path / "web", dev="vite")
    (tmp_path / "web" / "src").mkdir()
    policy = CommandPolicy(deny=DENY)
    assert policy.check(command="npm run dev", cwd=tmp_path / "web" / "src", workspace=tmp_path).code is (
        ErrorCode.WATCHER_IN_FOREGROUND
    )
    assert not policy.check(command="cd web && npm run dev", cwd=tmp_path, workspace=tmp_path).allowed
    assert policy.check(command="npm --prefix web run dev", cwd=tmp_path, workspace=tmp_path).code is (
        ErrorCode.WATCHER_IN_FOREGROUND
    )
    assert policy.check(
        command="npm run dev", cwd=tmp_path, workspace=tmp_path
    ).allowed  # no package.json here
    # Arguments after -- reach the script: `npm run build -- --watch` watches.
    _package(tmp_path / "lib", build="tsc", clean="rm -rf dist")
    assert policy.check(
        command="npm run build -- --watch", cwd=tmp_path / "lib", workspace=tmp_path
    ).code is (ErrorCode.WATCHER_IN_FOREGROUND)
    # A denied command inside a script is denied too.
    assert policy.check(command="npm run clean", cwd=tmp_path / "lib", workspace=tmp_path).code is (
        ErrorCode.DENIED_BY_POLICY
    )


def test_deny_takes_bare_names_only() -> None:
    with pytest.raises(ValueError, match="bare executable names"):
        CommandPolicy(deny=frozenset({"/bin/rm"}))
    with pytest.raises(ValueError, match="extra"):
        CommandPolicy(allow_everything=True)  # type: ignore[call-arg]


PARSES: list[tuple[str, list[list[str | None]]]] = [
    ("a | b && c; d &", [["a"], ["b"], ["c"], ["d"]]),
    ("FOO=1 x 'a b' \"c$d\" e\\ f", [["x", "a b", None, "e f"]]),
    ("echo $(a $(b))", [["echo", None], ["a", None], ["b"]]),
    ("cat <<EOF\n$(x)\nEOF", [["cat"], ["x"]]),
    ("case $1 in a) x;; esac", [["x"]]),
    ("arr=(1 2); echo $((1+2))", [["echo", None]]),
    ("select v in a b; do x $v; done", [["x", None]]),
    ("coproc y", [["coproc", "y"]]),
    ("ls *.py ~/x", [["ls", None, None]]),
]


@pytest.mark.parametrize(("script", "commands"), PARSES, ids=[p[0][:30] for p in PARSES])
def test_parse_finds_every_simple_command_with_static_words(
    script: str, commands: list[list[str | None]]
) -> None:
    parsed = parse(script)
    assert [list(c.words) for c in parsed.commands] == commands
    assert parsed.problems == []


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("git status", ("git", "status")),
        ("pytest -q tests/x.py::test_a", None),  # ':' is fine, but '::'? still plain
        ("ls -la", ("ls", "-la")),
        ("make test  ", ("make", "test")),
        ("echo hi", None),  # a builtin
        ("cd x", None),
        ("FOO=1 make", None),
        ("ls *.py", None),
        ("ls ~", None),
        ("git log --format='%h'", None),
        ("a; b", None),
        ("ls\nrm", None),
        ("ls #c", None),
        ("x $HOME", None),
    ],
)
def test_plain_argv(command: str, argv: tuple[str, ...] | None) -> None:
    expected = ("pytest", "-q", "tests/x.py::test_a") if command.startswith("pytest") else argv
    assert plain_argv(command) == expected


# Text bash evaluates as code, options that run a command, wrappers, and renamed programs: under
# the strict policy with `touch` denied, each row is refused (the denied command found, or the
# construct named as unchecked); the last rows still run.
_STRICT = CommandPolicy(deny=frozenset({"touch"}), strict=True)


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("t\\\nouch y", "`touch`"),
        ("trap 'touch y' EXIT", "`touch` (trap)"),
        ("coproc touch y; wait", "`touch` (via coproc)"),
        ("coproc N { touch y; }", "a `coproc` with a compound body"),
        ("x='$(touch y)'; echo ${x@P}", "a prompt expansion"),
        ("x='a[$(touch y)]'; echo $((x))", "arithmetic on a variable"),
        ("x='a[$(touch y)]'; printf -v n '%d' $((x))", "arithmetic on a variable"),
        ("x='a[$(touch y)]'; (( x ))", "arithmetic on a variable"),
        ("x='a[$(touch y)]'; [[ $x -eq 1 ]]", "an arithmetic `-eq` test"),
        ("x='a[$(touch y)]'; echo ${!x}", "an indirect expansion"),
        ("echo ${a[$i]}", "an array subscript"),
        ("mapfile -C 'touch y' -c 1 </etc/hostname", "`touch` (mapfile)"),
        ("complete -C 'touch y' ls", "`touch` (complete)"),
        ("export PS4='$(touch y)'; set -x; true", "an assignment to PS4"),
        ("PROMPT_COMMAND='touch y' bash -i", "an assignment to PROMPT_COMMAND"),
        ("taskset 1 touch y", "`touch` (via taskset)"),
        ("taskset -c 0 touch y", "`touch` (via taskset)"),
        ("chrt 0 touch y", "`touch` (via chrt)"),
        ("strace -o /dev/null touch y", "`touch` (via strace)"),
        ("test -v 'a[$(touch y)]'", "`test` of the variable name"),
        ("[[ -v a[$(touch y)] ]]", "`touch`"),
        ("[ -v 'a[$(touch y)]' ]", "a `-v` test"),
        ("read 'a[$(touch y)]' < /etc/hostname", "`read` of the variable name"),
        ("unset 'a[$(touch y)]'", "`unset` of the variable name"),
        ("declare -i n; n=3", "`declare -i`"),
        ("let n=1", "`let`"),
        ("script -qc 'touch y' /dev/null", "`touch` (script -c)"),
        ("su -c 'touch y'", "`touch` (su -c)"),
        ("watch -x sh -c 'touch y'", "`touch` (via watch, inside sh -c)"),
        ("bash --rcfile s.sh -i", "`touch` (bash --rcfile s.sh)"),
        ("git -c alias.t='!touch y' t", "`git -c alias.t=!touch y`"),
        ("git -c core.pager='touch y' log", "`git -c core.pager"),
        ("git rebase -x 'touch y' HEAD~1", "`git -x`"),
        ("tar --checkpoint-action=exec='touch y' -cf /tmp/a.tar .", "`tar --checkpoint-action`"),
        ("tar -cf /tmp/a.tar --to-command='touch y' .", "`tar --to-command`"),
        ("tar -xI 'touch y' -f a.tar", "`tar -I`"),
        ("rsync -e 'touch y' a b:", "`rsync -e`"),
        ("ssh -o ProxyCommand='touch y' host", "`ssh -o ProxyCommand"),
        ("zip -T -TT 'touch y' a.zip f", "`zip -TT`"),
        ("chroot / touch y", "`chroot`"),
        ("enable -f ./x.so x", "`enable -f`"),
        ("hash -p ./x ls", "`hash -p`"),
        ("./prog y", "a program in the workspace"),
        ("/tmp/prog y", "a program run from outside the system directories"),
        ("LESSOPEN='|touch %s' less f", "an assignment to LESSOPEN"),
        ("for PATH in .; do ls; done", "an assignment to PATH"),
        ("read PATH <<< .", "an assignment to PATH"),
    ],
)
def test_strict_refuses_text_evaluated_as_code(tmp_path: Path, command: str, fragment: str) -> None:
    (tmp_path / "s.sh").write_text("touch y\n")
    (tmp_path / "prog").write_bytes(b"\x7fELF\x00\x00")
    verdict = _STRICT.check(command=command, cwd=tmp_path, workspace=tmp_path, background=True)
    assert verdict.verdict.value == "deny", (command, verdict)
    assert fragment in verdict.message, (command, verdict.message)


@pytest.mark.parametrize(
    "command",
    [
        "PATH=.:$PATH ls",
        "export PATH=/tmp:$PATH; ls",
        "env PATH=. ls",
        "LD_PRELOAD=./x.so ls",
        "printf -v PATH %s .",
    ],
)
def test_a_path_change_is_refused_whenever_commands_are_denied(tmp_path: Path, command: str) -> None:
    verdict = CommandPolicy(deny=frozenset({"touch"})).check(
        command=command, cwd=tmp_path, workspace=tmp_path
    )
    assert verdict.verdict.value == "deny", (command, verdict)
    assert "which program a command name runs" in verdict.message
    assert CommandPolicy().check(command=command, cwd=tmp_path, workspace=tmp_path).allowed


@pytest.mark.parametrize(
    "command",
    [
        "echo $((1 + 2)) $(($# + 1))",
        "((1))",
        "arr=(a b); echo ${arr[0]} ${arr[@]} ${!arr[@]} ${x:-d} ${x:1:2}",
        "read -r line < /etc/hostname; echo $line",
        "printf -v out '%s' x; unset out; export A=\"$HOME\" B; declare -a list",
        "[[ -f x && $# -eq 0 ]]; test -f x",
        "trap - EXIT; trap 'echo bye' EXIT",
        "git -c user.name=x -c color.ui=never log -c HEAD; git grep -c x",
        "tar -xzf a.tgz; rsync -av a b; ssh -o StrictHostKeyChecking=no h ls",
        "taskset -p 1; script -q out.txt </dev/null",
        "/usr/bin/env ls",
        "echo 'a\\\\\nb'",
    ],
)
def test_strict_still_runs_what_it_can_check(tmp_path: Path, command: str) -> None:
    verdict = _STRICT.check(command=command, cwd=tmp_path, workspace=tmp_path)
    assert verdict.allowed, (command, verdict)
