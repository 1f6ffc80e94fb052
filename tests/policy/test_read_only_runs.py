"""Which runs only look (`CommandVerdict.read_only`): those run beside the session's writers
instead of waiting for them (tests/tools/bash/test_writers.py runs them). Real parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.policy import CommandPolicy

# (command line, whether it only looks)
TABLE: list[tuple[str, bool]] = [
    ("cat a", True),
    ("git status", True),
    ("git diff | grep x | wc -l", True),
    ("ls; cat b", True),
    ("cat a 2>/dev/null", True),
    ("grep x a > /dev/null 2>&1", True),
    ("env LANG=C sort a", True),
    ("timeout 5 cat a", True),
    ("cat <<'EOF'\nx\nEOF", True),
    ("echo hi > f", False),  # a redirection writes a file
    ("cat a >> b", False),
    ("cat a > $out", False),  # a computed target
    ("sleep 1", False),  # not on the read-only list
    ("git commit -m x", False),
    ("find . -delete", False),
    ("sort -o out a", False),
    ("timeout 5 sleep 1", False),  # a neutral wrapper: what it runs decides
    ("sh -c 'cat a'", False),  # a shell is no reader
    ("echo $(touch x)", False),
    ("cat .env", False),  # a sensitive path
    ("$cmd a", False),  # what cannot be checked is a writer
    ("cat 'a", False),  # a syntax error
    ("", False),
]


@pytest.mark.parametrize(("command", "read_only"), TABLE)
def test_read_only_runs(command: str, read_only: bool, tmp_path: Path) -> None:
    verdict = CommandPolicy().check(command=command, cwd=tmp_path, workspace=tmp_path)
    assert verdict.read_only is read_only, verdict


@pytest.mark.parametrize(
    ("argv", "read_only"), [(["cat", "a"], True), (["touch", "a"], False), (["sudo", "cat", "a"], False)]
)
def test_argv_runs(argv: list[str], read_only: bool, tmp_path: Path) -> None:
    verdict = CommandPolicy().check(argv=argv, cwd=tmp_path, workspace=tmp_path)
    assert verdict.read_only is read_only, verdict


def test_a_refused_run_is_no_reader(tmp_path: Path) -> None:
    verdict = CommandPolicy(deny=frozenset({"cat"})).check(command="cat a", cwd=tmp_path, workspace=tmp_path)
    assert not verdict.allowed and not verdict.read_only


def test_strict_and_approving_policies_classify_alike(tmp_path: Path) -> None:
    for policy in (CommandPolicy(strict=True), CommandPolicy(approve_commands=True)):
        assert policy.check(command="cat a | wc -l", cwd=tmp_path, workspace=tmp_path).read_only
        assert not policy.check(command="cat a > b", cwd=tmp_path, workspace=tmp_path).read_only
