"""Text fed to a shell interpreter cannot carry a denied command past the strict command policy.

With ``touch`` denied and the strict policy on, an attacker with only a ``bash`` call tries to run
``touch`` through every way a shell takes a script besides its own words: here-docs and pipes into
a shell, here-strings, process substitution, script files (``sh s.sh``, ``. ./s.sh``, ``sh <
s.sh``, ``./r.sh``), ``env -S``, wrappers (``nohup``, ``timeout``, ``nice``, ``stdbuf``,
``xargs``, ``find -exec``, ``busybox``), ``BASH_ENV``, and a script the same line rewrites. Each
is refused with ``denied_by_policy`` before anything starts: the denied command is found, or what
could not be checked is named. Real Host, real QuickJS, real bash, real files (a symlink, a FIFO,
an oversized script).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import Host
from codemode.policy import CommandPolicy

pytestmark = pytest.mark.anyio

DENIED = "`touch`"  # the message names the denied command
UNCHECKED = "the strict command policy cannot check"

# (command line, a fragment of the refusal's message)
ATTEMPTS: list[tuple[str, str]] = [
    # here-docs, here-strings and pipes into a shell
    ("cat <<EOF | sh\ntouch pwned\nEOF", f"{DENIED} (script piped into sh)"),
    ("cat <<'EOF' | bash -s\ntouch pwned\nEOF", f"{DENIED} (script piped into bash)"),
    ("echo 'touch pwned' | bash", f"{DENIED} (script piped into bash)"),
    ("printf 'touch pwned\\n' | sh", f"{DENIED} (script piped into sh)"),
    ("sh <<EOF\ntouch pwned\nEOF", f"{DENIED} (script fed to sh)"),
    ("bash -s <<< 'touch pwned'", f"{DENIED} (script fed to bash)"),
    ("sh <<EOF\necho \\$(touch pwned)\nEOF", f"{DENIED} (script fed to sh"),
    ("c=touch; sh <<EOF\n$c pwned\nEOF", f"{UNCHECKED} a here-doc with expansions fed to sh"),
    ("c='touch pwned'; sh <<< \"$c\"", f"{UNCHECKED} a computed here-string fed to sh"),
    ("ls | sh", f"{UNCHECKED} a script piped into sh"),
    ("cat s.sh | sh", f"{DENIED} (script piped into sh)"),
    ("sh <(echo touch pwned)", f"{UNCHECKED} a computed sh script file"),
    ("bash < <(echo touch pwned)", f"{UNCHECKED} a computed input file fed to bash"),
    ('sh -c "$(cat s.sh)"', f"{UNCHECKED} a computed sh -c script"),
    # script files in the workspace
    ("sh s.sh", f"{DENIED} (sh s.sh)"),
    ("bash ./s.sh", f"{DENIED} (bash ./s.sh)"),
    ("dash -e s.sh", f"{DENIED} (dash s.sh)"),
    (". ./s.sh", f"{DENIED} (. ./s.sh)"),
    ("source s.sh", f"{DENIED} (source s.sh)"),
    ("sh < s.sh", f"{DENIED} (sh < s.sh)"),
    ("./r.sh", f"{DENIED} (sh ./r.sh)"),
    ("cd sub && sh ../s.sh", f"{DENIED} (sh ../s.sh)"),
    ("sh nested.sh", f"{DENIED} (sh nested.sh, bash s.sh)"),
    ("sh link.sh", f"{UNCHECKED} a script file that was not read"),
    ("sh fifo.sh", f"{UNCHECKED} a script file that was not read"),
    ("sh big.sh", f"{UNCHECKED} a script file that was not read"),
    ("sh missing.sh", f"{UNCHECKED} a script file that was not read"),
    ("sh ../outside.sh", f"{UNCHECKED} a script file that was not read (outside the workspace)"),
    ("sh $HOME/x.sh", f"{UNCHECKED} a computed sh script file"),
    ("echo 'touch pwned' > ok.sh; sh ok.sh", f"{UNCHECKED} a script file that this same command line writes"),
    ("cp s.sh ok.sh && sh ok.sh", f"{UNCHECKED} a script file that this same command line writes"),
    ("BASH_ENV=./s.sh bash -c true", f"{UNCHECKED} an assignment to BASH_ENV"),
    ("export BASH_ENV=./s.sh; bash -c true", f"{UNCHECKED} an assignment to BASH_ENV"),
    ("env ENV=./s.sh sh -c true", f"{UNCHECKED} an assignment to ENV"),
    # env -S and other wrappers
    ("env -S 'touch pwned'", f"{DENIED} (env -S, via env)"),
    ("env -iS'touch pwned'", f"{DENIED} (env -S, via env)"),
    ("env --split-string='touch pwned'", f"{DENIED} (env -S, via env)"),
    ("env -S 'sh -c \"touch pwned\"'", f"{DENIED} (env -S, via env, inside sh -c)"),
    ("env -S '${T} pwned'", f"{UNCHECKED} an env -S string env expands itself"),
    ("nohup sh s.sh", f"{DENIED} (via nohup, sh s.sh)"),
    ("timeout 5 bash s.sh", f"{DENIED} (via timeout, bash s.sh)"),
    ("nice -n 1 sh s.sh", f"{DENIED} (via nice, sh s.sh)"),
    ("stdbuf -o0 sh s.sh", f"{DENIED} (via stdbuf, sh s.sh)"),
    ("busybox touch pwned", f"{DENIED} (via busybox)"),
    ("busybox sh s.sh", f"{DENIED} (via busybox, sh s.sh)"),
    ("echo s.sh | xargs sh", f"{UNCHECKED} a computed sh script file"),
    ("find . -name s.sh -exec sh {} \\;", f"{UNCHECKED} a computed sh script file"),
]


def _workspace(root: Path) -> Path:
    workspace = root / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "s.sh").write_text("echo start\ntouch pwned\n")
    (workspace / "nested.sh").write_text("echo one\nbash s.sh\n")
    (workspace / "ok.sh").write_text("echo fine\n")
    (workspace / "r.sh").write_text("#!/bin/sh\ntouch pwned\n")
    (workspace / "r.sh").chmod(0o755)
    (workspace / "link.sh").symlink_to("ok.sh")
    os.mkfifo(workspace / "fifo.sh")
    (workspace / "big.sh").write_text("echo fine\n" * 40_000)  # 400 KB: over the cap
    (root / "outside.sh").write_text("echo fine\n")
    return workspace


async def _refusal(host: Host, command: str, *, background: bool = False) -> dict[str, Any]:
    source = (
        f"try {{ await tools.bash({{command: {json.dumps(command)}, run_in_background: {json.dumps(background)}}});"
        " return 'ran' } catch (e) { return {code: e.code, message: e.message} }"
    )
    with anyio.fail_after(60):  # a bound, never a timing assertion: a FIFO must not hang the host
        result = await host.run_code(source)
    assert result.error is None, result.text
    value: dict[str, Any] | str = json.JSONDecoder().raw_decode(result.text)[0]
    assert isinstance(value, dict), f"{command!r} was not refused: {value!r}"  # "ran"
    return value


async def test_text_fed_to_a_shell_never_runs_a_denied_command(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    policy = CommandPolicy(deny=frozenset({"touch"}), strict=True)
    async with Host(workspace=workspace, state_dir=tmp_path / "state", command_policy=policy) as host:
        for command, fragment in ATTEMPTS:
            refused = await _refusal(host, command)
            assert refused["code"] == "denied_by_policy", (command, refused)
            assert fragment in refused["message"], (command, refused["message"])
            assert not (workspace / "pwned").exists(), command
            assert (workspace / "ok.sh").read_text() == "echo fine\n", command  # nothing ran
        # A shell reading the input a background process is sent cannot be checked either.
        background = await _refusal(host, "sh", background=True)
        assert background["code"] == "denied_by_policy"
        assert "sh reading its script from the process's input" in background["message"]
        # What the strict policy can check still runs: the checks are no blanket refusal.
        for command in (
            "sh ok.sh",
            "echo 'echo fine' | sh",
            "bash -s <<< 'echo fine'",
            ". ./ok.sh",
            "sh sub/../ok.sh",
        ):
            ran = await host.call_tool("bash", {"command": command})
            assert not ran.is_error and ran.text.strip() == "fine", (command, ran.text)


async def test_refusals_say_what_could_not_be_checked_and_what_to_do(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    policy = CommandPolicy(deny=frozenset({"touch"}), strict=True)
    async with Host(workspace=workspace, state_dir=tmp_path / "state", command_policy=policy) as host:
        link = (await _refusal(host, "sh link.sh"))["message"]
        assert "`link.sh`" in link and "symbolic link" in link
        fifo = (await _refusal(host, "sh fifo.sh"))["message"]
        assert "`fifo.sh`" in fifo and "not a regular file" in fifo
        big = (await _refusal(host, "sh big.sh"))["message"]
        assert "`big.sh`" in big and "larger than" in big
        for message in (link, fifo, big):
            assert "a script file only as a regular file inside the workspace" in message
            assert "Traceback" not in message


async def test_the_permissive_policy_follows_scripts_to_denied_commands_too(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    policy = CommandPolicy(deny=frozenset({"touch"}))
    async with Host(workspace=workspace, state_dir=tmp_path / "state", command_policy=policy) as host:
        for command in ("sh s.sh", "cat <<EOF | sh\ntouch pwned\nEOF", "env -S 'touch pwned'", "./r.sh"):
            refused = await _refusal(host, command)
            assert refused["code"] == "denied_by_policy" and DENIED in refused["message"], command
        assert not (workspace / "pwned").exists()
        # What it cannot check runs under the permissive policy (strict is the opt-in).
        ran = await host.call_tool("bash", {"command": "sh missing.sh; echo after"})
        assert not ran.is_error and "after" in ran.text


# Text bash evaluates as code, wrappers, options that run a command, and a renamed program.
EVALUATED: list[str] = [
    "t\\\nouch pwned",
    "trap 'touch pwned' EXIT",
    "coproc touch pwned; wait",
    "x='$(touch pwned)'; echo ${x@P}",
    "x='a[$(touch pwned)]'; echo $((x))",
    "printf -v 'a[$(touch pwned)]' %s x",
    "mapfile -C 'touch pwned' -c 1 </etc/hostname",
    "export PS4='$(touch pwned)'; set -x; true",
    "taskset 1 touch pwned",
    "test -v 'a[$(touch pwned)]'",
    "unset 'a[$(touch pwned)]'",
    "script -qc 'touch pwned' /dev/null",
    "git -c alias.t='!touch pwned' t",
    "tar --checkpoint-action=exec='touch pwned' -cf /dev/null ok.sh",
    "cp /usr/bin/touch ./ls; PATH=.:$PATH ls pwned",
    "cp /usr/bin/touch ./ls",
    "./ls pwned",
]


async def test_text_bash_evaluates_as_code_never_runs_a_denied_command(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    policy = CommandPolicy(deny=frozenset({"touch"}), strict=True)
    async with Host(workspace=workspace, state_dir=tmp_path / "state", command_policy=policy) as host:
        for command in EVALUATED:
            if command == "cp /usr/bin/touch ./ls":  # a separate call plants the copy
                planted = await host.call_tool("bash", {"command": command})
                assert not planted.is_error, planted.text
                continue
            refused = await _refusal(host, command)
            assert refused["code"] == "denied_by_policy", (command, refused)
            assert not (workspace / "pwned").exists(), command
