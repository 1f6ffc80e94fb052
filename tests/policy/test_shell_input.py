"""What a shell runs besides its own words, piece by piece: the parse's stdin, pipes, writes and
assignments; what a piped command prints; ``env -S`` splits; ``#!`` lines; script files read from
the workspace (real files: a symlink, a FIFO, an oversized file); and the policy's verdicts on
them. Real parses (tree-sitter-bash), real files; no process runs here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codemode.errors import ErrorCode
from codemode.policy import CommandPolicy, Verdict
from codemode.policy._scripts import (
    SCRIPT_BYTES,
    ShellInput,
    piped_output,
    read_script,
    shebang_shell,
    shell_input,
    split_string,
)
from codemode.policy._shell import parse


def test_the_parse_says_what_feeds_each_commands_stdin() -> None:
    heredoc_pipe = parse("cat <<EOF | sh\ntouch x\nEOF").commands
    assert [c.words for c in heredoc_pipe] == [("cat",), ("sh",)]
    assert heredoc_pipe[1].piped_in and heredoc_pipe[1].piped_from == heredoc_pipe[0]
    assert heredoc_pipe[0].stdin_script == "touch x\n"
    redirect = parse("sh < s.sh 2>/dev/null").commands[0]
    assert redirect.stdin_file == "s.sh" and redirect.stdin_unknown is None
    assert parse("sh < $f").commands[0].stdin_unknown == "a computed input file"
    assert parse('sh <<< "$x"').commands[0].stdin_unknown == "a computed here-string"
    # An unquoted here-doc: escapes applied, expansions make it unknown; a quoted one is verbatim.
    assert parse("sh <<EOF\necho \\$(touch x)\nEOF").commands[0].stdin_script == "echo $(touch x)\n"
    assert parse("sh <<EOF\n$c x\nEOF").commands[0].stdin_unknown == "a here-doc with expansions"
    assert parse("sh <<'EOF'\n$c \\x\nEOF").commands[0].stdin_script == "$c \\x\n"
    three = parse("echo a | tr a b | sh").commands
    assert three[2].piped_from == three[1] and three[1].piped_from == three[0]
    assert parse("(echo a) | sh").commands[1].piped_from is None  # a subshell is no simple command


def test_the_parse_lists_written_files_and_assigned_variables() -> None:
    parsed = parse("echo a > f; cat >> g; ls &> h 2>/dev/null; cmd > $out; sort < in")
    assert parsed.written == ["f", "g", "h", "/dev/null", None]
    assigned = parse("A=1 ls; export BASH_ENV=x\nreadonly ENV=y").assigned
    assert assigned == [("A", 1), ("BASH_ENV", 1), ("ENV", 2)]


def test_what_a_piped_command_prints() -> None:
    def output(command: str) -> ShellInput | None:
        return piped_output(parse(command).commands[0])

    assert output("echo touch x") == ShellInput("string", "touch x\n")
    assert output("echo -n 'touch x'") == ShellInput("string", "touch x")
    assert output("printf 'touch x\\n'") == ShellInput("string", "touch x\n")
    assert output("cat s.sh") == ShellInput("file", "s.sh")
    assert output("cat < s.sh") == ShellInput("file", "s.sh")
    assert output("cat <<EOF\nrm y\nEOF") == ShellInput("string", "rm y\n")
    for unknown in ("echo -e 'a\\x41'", "printf '%s' x", "echo $x", "ls", "cat a b", "cat"):
        assert output(unknown) is None, unknown


def test_shell_input_precedence() -> None:
    def given(command: str, *, background: bool = False) -> ShellInput:
        first = parse(command).commands[-1]
        return shell_input(first.words, first, background=background)

    assert given("sh -c 'a' s.sh").kind == "string"  # -c first
    assert given("sh s.sh <<< 'b'") == ShellInput("file", "s.sh", "a computed sh script file", "sh s.sh")
    assert given("bash -s x <<< 'b'") == ShellInput("string", "b", via="script fed to bash")
    assert given("bash -o pipefail -c 'ls'").text == "ls"
    assert given("sh").kind == "none"  # the foreground's stdin is /dev/null
    assert given("sh", background=True).kind == "unknown"
    assert given("ls | sh").kind == "unknown"


def test_env_split_strings() -> None:
    assert split_string("touch 'a b' c") == ["touch", "a b", "c"]
    assert split_string("${X} y") is None and split_string("a\\_b") is None
    assert split_string("'unterminated") is None


def test_shebang_lines() -> None:
    assert shebang_shell("#!/bin/sh\necho") == "sh"
    assert shebang_shell("#!/usr/bin/env -S bash -e\n") == "bash"
    assert shebang_shell("#!/usr/bin/env python3\n") is None
    assert shebang_shell("echo no\n") == "bash"  # bash runs a text file without #! itself


def test_script_files_are_read_only_as_regular_files_inside_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "d").mkdir(parents=True)
    (workspace / "s.sh").write_text("touch x\n")
    (workspace / "d" / "link.sh").symlink_to("../s.sh")
    (workspace / "ln").symlink_to("d")
    os.mkfifo(workspace / "fifo.sh")
    (workspace / "big.sh").write_bytes(b"#" * (SCRIPT_BYTES + 1))
    (workspace / "bin.sh").write_bytes(b"\x7fELF\x00\x00")
    (tmp_path / "out.sh").write_text("touch x\n")
    assert read_script("s.sh", workspace, workspace).text == "touch x\n"
    assert read_script("../s.sh", workspace / "d", workspace).text == "touch x\n"
    refused = {
        "d/link.sh": "symbolic link",
        "ln/link.sh": "symbolic link",
        "fifo.sh": "not a regular file",
        "d": "not a regular file",
        "big.sh": "larger than",
        "bin.sh": "not text",
        "../out.sh": "outside the workspace",
        "/etc/passwd": "outside the workspace",
    }
    for path, why in refused.items():
        read = read_script(path, workspace, workspace)
        assert read.text is None and why in read.why and not read.missing, (path, read)
    assert read_script("nope.sh", workspace, workspace).missing


@pytest.mark.parametrize(
    ("command", "default", "strict"),
    [
        ("sh s.sh", "deny", "deny"),
        ("sh ok.sh", "allow", "allow"),
        ("sh ok.sh arg", "allow", "allow"),
        ("./ok.sh", "allow", "allow"),  # no #! line: bash runs it as a script; it holds echo and ls
        ("./plain", "deny", "deny"),  # no #! line and rm inside
        ("./prog", "allow", "deny"),  # a program (NUL bytes) in the workspace: any program under any name
        ("./huge", "allow", "deny"),  # too big to see whether it is a script
        ("./run.sh", "deny", "deny"),
        ("./tool.py", "allow", "allow"),  # other interpreters are not followed
        ("python3 -c 'import os; os.system(\"rm x\")'", "allow", "allow"),
        ("sh missing.sh", "allow", "deny"),
        ("sh link.sh", "allow", "deny"),
        ("sh loop.sh", "allow", "deny"),  # a script running itself: nested too deep
        ("echo rm x > gen.sh; sh gen.sh", "allow", "deny"),
        ("tee ok.sh < s.sh; sh ok.sh", "allow", "deny"),
        ("cat ok.sh; sh ok.sh", "allow", "allow"),  # reading it writes nothing
        ("sh /dev/stdin <<EOF\nrm x\nEOF", "deny", "deny"),
        (". /dev/stdin <<< 'rm x'", "deny", "deny"),
        ("source /dev/fd/0 < s.sh", "deny", "deny"),
        ("env -S 'rm x'", "deny", "deny"),
        ("env -u HOME -S'rm x'", "deny", "deny"),
        ("env -S 'ls -la'", "allow", "allow"),
        ("busybox rm x", "deny", "deny"),
        ("xargs sh < list", "allow", "deny"),
        ("xargs rm < list", "deny", "deny"),
        ("find . -exec sh -c 'rm \"$1\"' _ {} \\;", "deny", "deny"),
        ("BASH_ENV=s.sh bash -c true", "allow", "deny"),
    ],
)
def test_script_verdicts(command: str, default: str, strict: str, tmp_path: Path) -> None:
    (tmp_path / "s.sh").write_text("echo a\nrm -rf build\n")
    (tmp_path / "ok.sh").write_text("echo fine\nls\n")
    (tmp_path / "run.sh").write_text("#!/usr/bin/env bash\nrm x\n")
    (tmp_path / "tool.py").write_text("#!/usr/bin/env python3\nimport os\nos.system('rm x')\n")
    (tmp_path / "loop.sh").write_text("sh loop.sh\n")
    (tmp_path / "link.sh").symlink_to("ok.sh")
    (tmp_path / "plain").write_text("rm -rf /tmp/x\n")
    (tmp_path / "prog").write_bytes(b"\x7fELF\x02\x01\x00rm x")
    (tmp_path / "huge").write_text("#" * SCRIPT_BYTES + "\nrm x\n")
    for policy, expected in (
        (CommandPolicy(deny=frozenset({"rm"})), default),
        (CommandPolicy(deny=frozenset({"rm"}), strict=True), strict),
    ):
        verdict = policy.check(command=command, cwd=tmp_path, workspace=tmp_path)
        assert verdict.verdict.value == expected, (command, policy.strict, verdict)
        if expected == "deny":
            assert verdict.code is ErrorCode.DENIED_BY_POLICY


def test_approvals_ask_about_what_a_script_file_holds(tmp_path: Path) -> None:
    (tmp_path / "s.sh").write_text("ls\n")
    policy = CommandPolicy(approve_commands=True)
    # `sh` itself is no read-only command: a script run asks, whatever it holds.
    assert policy.check(command="sh s.sh", cwd=tmp_path, workspace=tmp_path).verdict is Verdict.ASK
    assert policy.check(command="ls", cwd=tmp_path, workspace=tmp_path).verdict is Verdict.ALLOW
