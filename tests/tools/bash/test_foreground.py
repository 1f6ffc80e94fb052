"""Foreground runs through the bash tool: real shells, real pipes, real process trees."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from codemode.budget import TokenCounter, fit_to_budget
from codemode.errors import ToolError
from codemode.tools._model import ToolContext
from codemode.tools.bash import ProcessManager
from codemode.tools.bash._foreground import RunSpec, run_foreground
from codemode.tools.bash._proctree import MARKER_VAR
from tests.host_support import MakeHost, survivors

from .conftest import Caller

pytestmark = pytest.mark.anyio


async def test_success_shows_output_and_nothing_else(bash: Caller) -> None:
    result = await bash(command="echo hello")
    assert result.text == "hello"
    assert not result.is_error
    data = result.structured_content
    assert data["exit_code"] == 0
    assert data["timed_out"] is False
    assert data["stdout"] == {"excerpt": "hello\n", "bytes": 6, "truncated": False}
    assert data["log"]["bytes"] == 6


async def test_command_not_found_shows_127(bash: Caller) -> None:
    result = await bash(command="definitely-not-a-command-xyz")
    assert result.is_error
    assert "command not found" in result.text
    assert result.text.endswith("Exit code 127")
    assert result.structured_content["exit_code"] == 127


async def test_missing_cwd_is_a_clear_error(bash: Caller) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        await bash(command="pwd", cwd="no/such/dir")


async def test_cwd_relative_to_workspace(bash: Caller, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    result = await bash(command="pwd", cwd="sub")
    assert result.text == str((workspace / "sub").resolve())


@pytest.mark.parametrize("timeout", [0, 3601, -5])
async def test_timeout_out_of_range_is_rejected_by_schema(bash: Caller, timeout: int) -> None:
    with pytest.raises(
        ToolError, match=r"at \$\.timeout_seconds: Input should be (greater|less) than or equal"
    ):
        await bash(command="true", timeout_seconds=timeout)


async def test_exit_3_with_stderr_only(bash: Caller) -> None:
    result = await bash(command="echo broken >&2; exit 3")
    assert result.text == "broken\nExit code 3"
    data = result.structured_content
    assert data["stdout"]["bytes"] == 0
    assert data["stderr"]["excerpt"] == "broken\n"


async def test_stdout_then_stderr_and_the_log_keeps_both(bash: Caller, archive: Any) -> None:
    result = await bash(command="for i in 1 2 3; do echo out$i; echo err$i >&2; done")
    assert result.text == "out1\nout2\nout3\nerr1\nerr2\nerr3"
    page = archive.read(result.structured_content["log"]["ref"], 0, 1000)
    assert sorted(page.data.decode().split()) == sorted(["out1", "out2", "out3", "err1", "err2", "err3"])


async def test_each_call_is_a_new_shell_with_non_interactive_env(bash: Caller, monkeypatch: Any) -> None:
    await bash(command="cd /; export FOO=1")
    result = await bash(command='echo "$PWD|${FOO:-unset}|$PAGER|$GIT_TERMINAL_PROMPT|${GOROOT:-none}"')
    assert result.text.split("|")[1:] == ["unset", "cat", "0", "none"]
    assert result.text.split("|")[0] != "/"


async def test_goroot_removed(manager: ProcessManager, bash: Caller, monkeypatch: Any) -> None:
    manager._environ["GOROOT"] = "/usr/lib/go"
    result = await bash(command='echo "${GOROOT:-none}"')
    assert result.text == "none"


async def test_stdin_is_closed(bash: Caller) -> None:
    result = await bash(command="cat; echo done")
    assert result.text == "done"


async def test_large_output_keeps_head_and_tail_and_full_log(bash: Caller, archive: Any) -> None:
    result = await bash(command="seq 1 200000")
    data = result.structured_content
    assert data["stdout"]["truncated"]
    assert result.text.startswith("1\n2\n3\n")
    assert "200000" in result.text
    assert "omitted" in result.text
    ref = data["log"]["ref"]
    assert f'read_archive({{ref: "{ref}", offset: 0}})' in result.text
    expected = subprocess.run(["seq", "1", "200000"], capture_output=True, check=True).stdout
    assert data["log"]["bytes"] == len(expected)
    got = bytearray()
    offset = 0
    while True:
        page = archive.read(ref, offset, 1 << 20)
        got += page.data
        offset = page.next_offset
        if page.eof:
            break
    assert bytes(got) == expected


async def test_200mb_output_bounded_memory(bash: Caller) -> None:
    me = psutil.Process()
    before = me.memory_info().rss
    result = await bash(command="yes 'a line of output for the test' | head -c 200000000")
    growth = me.memory_info().rss - before
    assert result.structured_content["stdout"]["bytes"] == 200_000_000
    assert growth < 64 * 1024 * 1024


async def test_100mb_line_without_newline(bash: Caller) -> None:
    result = await bash(command="head -c 100000000 /dev/zero | tr '\\0' x")
    data = result.structured_content
    assert data["stdout"]["bytes"] == 100_000_000
    assert data["stdout"]["truncated"]
    assert len(result.text) < 100_000
    assert result.text.startswith("xxxx")


async def test_only_carriage_return_updates_collapse(bash: Caller) -> None:
    result = await bash(command="for i in 1 2 3 4 5; do printf '\\rprogress %d%%' $((i*20)); done")
    assert result.text == "progress 100%"


async def test_binary_output_does_not_break_text(bash: Caller) -> None:
    result = await bash(command="head -c 4096 /dev/urandom; printf '\\0\\xff\\xfe end'")
    assert not result.is_error
    assert "\x00" not in result.text
    result.text.encode("utf-8")  # valid text
    assert result.structured_content["stdout"]["bytes"] == 4096 + 7


async def test_timeout_stops_a_command_that_ignores_sigterm(manager: ProcessManager, bash: Caller) -> None:
    token = f"ignoreterm{os.getpid()}"
    result = await bash(
        command=f"trap '' TERM; echo started; exec -a {token} sleep 1000",
        timeout_seconds=1,
    )
    data = result.structured_content
    assert data["timed_out"] is True
    assert result.is_error
    assert "started" in result.text
    assert "Timed out after 1 s" in result.text
    assert survivors(token) == []


async def test_fork_storm_stopped_by_timeout_leaves_no_survivors(bash: Caller) -> None:
    token = f"storm{os.getpid()}"
    # Bounded: each round starts two escaping (setsid) children that keep spawning, capped by ulimit.
    command = (
        "ulimit -u 2000 2>/dev/null; "
        f"spawn() {{ for i in 1 2; do setsid bash -c 'exec -a {token} sleep 1000' & done; }}; "
        "for r in $(seq 1 40); do spawn; sleep 0.02; done; wait"
    )
    result = await bash(command=command, timeout_seconds=2)
    assert result.structured_content["timed_out"] is True
    assert survivors(token) == []


async def test_setsid_nohup_child_is_stopped_at_timeout(bash: Caller) -> None:
    token = f"nohupchild{os.getpid()}"
    result = await bash(
        command=f"setsid nohup bash -c 'exec -a {token} sleep 1000' >/dev/null 2>&1 & sleep 1000",
        timeout_seconds=1,
    )
    assert result.structured_content["timed_out"] is True
    assert survivors(token) == []


async def test_leftover_background_child_does_not_block_the_result(bash: Caller) -> None:
    token = f"leftover{os.getpid()}"
    with anyio.fail_after(10):
        result = await bash(command=f"bash -c 'exec -a {token} sleep 1000' & echo quick")
    assert result.text == "quick"
    for pid in survivors(token):
        os.kill(pid, 9)


async def test_cancelling_the_caller_stops_the_command(bash: Caller) -> None:
    token = f"cancelme{os.getpid()}"
    with anyio.move_on_after(0.5):
        await bash(command=f"exec -a {token} sleep 1000")
    assert survivors(token) == []


async def test_commands_carry_the_marker(bash: Caller) -> None:
    result = await bash(command=f'echo "${MARKER_VAR}"')
    assert result.text.startswith("f_")


async def test_redaction_of_secret_env_values(archive: Any, workspace: Path, policy: Any) -> None:
    from codemode.state import Redactor

    secret = "s3cr3t-VALUE-" + "q" * 20
    env = {**os.environ, "MY_API_TOKEN": secret}
    manager = ProcessManager(archive, handoff_seconds=None, redactor=Redactor(env), environ=env)
    caller = Caller(manager, ToolContext("s1", workspace, policy, archive))
    result = await caller(command='echo "token=$MY_API_TOKEN"')
    assert secret not in result.text
    assert secret not in str(result.structured_content)
    await manager.aclose()


async def test_a_streamed_log_is_redacted_when_read(archive: Any, workspace: Path, policy: Any) -> None:
    from codemode.state import Redactor, State

    secret = "s3cr3t-STREAMED-" + "q" * 20
    env = {**os.environ, "MY_API_TOKEN": secret}
    manager = ProcessManager(archive, handoff_seconds=None, redactor=Redactor(env), environ=env)
    state_with_rules = State(archive.state_dir, redactor=Redactor(env))
    archive_with_rules = state_with_rules.archive
    caller = Caller(manager, ToolContext("s1", workspace, policy, archive))
    # 200 KB of output streams the log to disk; the secret sits in its middle and at its end.
    command = 'yes filler | head -c 100000; echo "token=$MY_API_TOKEN"; yes more | head -c 100000; printf "$MY_API_TOKEN"'
    result = await caller(command=command)
    ref = result.structured_content["log"]["ref"]
    assert secret not in result.text
    pages, offset = [], 0
    while True:
        page = archive_with_rules.read(ref, offset, 64 * 1024)
        pages.append(page.data)
        if page.eof:
            break
        offset = page.next_offset
    text = b"".join(pages).decode()
    assert secret not in text
    assert text.count("[REDACTED:env:MY_API_TOKEN]") == 2
    assert text.startswith("filler\n") and "more\n" in text
    await manager.aclose()
    state_with_rules.close()


async def test_workspace_revision_in_git_tree(bash: Caller, workspace: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=workspace, check=True, env=env)
    (workspace / "f").write_text("1")
    subprocess.run(["git", "add", "f"], cwd=workspace, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "x"], cwd=workspace, check=True, env=env)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=workspace, capture_output=True, text=True)
    result = await bash(command="sleep 0.15; echo 2 > f")
    rev = result.structured_content["workspace_revision"]
    assert rev["head"] == head.stdout.strip()
    assert rev["ref"] == "refs/heads/main"
    assert rev["dirty"] is True and rev["dirty_reason"] is None


async def test_no_revision_outside_git(bash: Caller) -> None:
    result = await bash(command="true")
    assert result.structured_content["workspace_revision"] is None


async def test_sandbox_default_mode_confines_writes(bash: Caller, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    result = await bash(command=f"echo x > {outside}")
    assert result.is_error
    assert not outside.exists()
    assert result.text.splitlines()[-1].startswith("Sandbox (workspace-write) denied writing")


async def test_a_command_that_succeeds_gets_no_denial_line(bash: Caller, tmp_path: Path) -> None:
    # The sandbox refused the write, but the command went on and succeeded: nothing to act on.
    outside = tmp_path / "outside.txt"
    result = await bash(command=f"echo x > {outside} || echo 'carried on'")
    assert not result.is_error and not outside.exists()
    assert "Permission denied" in result.text
    assert "Sandbox" not in result.text


def _age_git_metadata(repo: Path) -> None:
    """Date the repository's HEAD, reflog and index an hour back, as if written long ago."""
    old = os.stat(repo).st_mtime - 3600
    for name in ("index", "HEAD", "logs/HEAD"):
        os.utime(repo / ".git" / name, (old, old))


async def test_a_quick_command_checks_dirty_when_it_changed_the_repository(
    bash: Caller, workspace: Path
) -> None:
    env = "GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t"
    await bash(command=f"git init -q -b main . && echo 1 > f && git add f && {env} git commit -qm one")
    _age_git_metadata(workspace)
    edited = (await bash(command="echo 2 > f")).structured_content["workspace_revision"]
    if edited["dirty"] is None:  # quick, and HEAD and the index untouched: not checked, and why
        assert "changed neither HEAD nor the index" in edited["dirty_reason"]
    else:  # over 100 ms on a loaded machine: checked like any slower command
        assert edited["dirty"] is True and edited["dirty_reason"] is None
    committed = await bash(command=f"{env} git commit -qam two")
    revision = committed.structured_content["workspace_revision"]
    assert (revision["dirty"], revision["dirty_reason"]) == (False, None)  # it wrote the index
    assert revision["head"] != edited["head"]


async def test_a_test_run_keeps_each_streams_head_and_tail_and_its_summary_in_a_budget(
    workspace: Path, policy: Any, archive: Any
) -> None:
    # stdout ends with the runner's summary, stderr is long too, and the budget is far smaller
    # than both: the command's text comes in blocks, and the budget cut keeps each one's ends.
    bin_dir = workspace / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pytest"
    fake.write_text(
        "#!/bin/bash\n"
        'for i in $(seq 1 3000); do echo "tests/test_x.py::test_$i PASSED"; done\n'
        'for i in $(seq 1 3000); do echo "warning: deprecated call $i" >&2; done\n'
        'echo "===== 1 failed, 3000 passed in 0.50s ====="\n'
        "exit 1\n"
    )
    fake.chmod(0o755)
    spec = RunSpec(
        command="PATH=$PWD/bin:$PATH pytest",
        cwd=workspace,
        timeout_seconds=60,
        session_id="s1",
        policy=policy,
    )
    outcome = await run_foreground(
        spec, archive=archive, redactor=archive.redactor, handoff_seconds=None, promote=lambda running: None
    )
    stdout, stderr, status = outcome.blocks
    assert stdout.startswith("tests/test_x.py::test_1 PASSED\n") and stdout.endswith("in 0.50s =====")
    assert stderr.startswith("warning: deprecated call 1\n") and stderr.endswith("call 3000")
    assert status.startswith("Exit code 1\npytest: 1 failed, 3000 passed")
    assert outcome.text == "\n".join(outcome.blocks)
    counter = TokenCounter()
    cut = fit_to_budget(
        outcome.blocks, 2000, counter, lambda text: archive.put(text, kind="output", session_id="s1")
    )
    assert cut.truncated and counter.count(cut.text) <= 2000
    lines = cut.text.splitlines()
    for line in (
        "tests/test_x.py::test_1 PASSED",
        "===== 1 failed, 3000 passed in 0.50s =====",
        "warning: deprecated call 1",
        "warning: deprecated call 3000",
    ):
        assert line in lines
    assert cut.text.endswith(status)


async def test_host_keeps_working_after_bad_inputs(bash: Caller) -> None:
    for command in ["exit 1", "kill -9 $$", "definitely-not-a-command-xyz"]:
        await bash(command=command)
    result = await bash(command="echo still fine")
    assert result.text == "still fine"


async def test_killed_by_signal_reports_it(bash: Caller) -> None:
    result = await bash(command="kill -9 $$")
    assert result.structured_content["exit_code"] == 137
    assert "Exit code 137 (killed by SIGKILL)" in result.text


async def test_missing_landlock_fails_closed(
    bash: Caller, monkeypatch: pytest.MonkeyPatch, workspace: Path, archive: Any
) -> None:
    from codemode.sandbox import SandboxMode, SandboxPolicy, landlock_status

    await bash(command="true")  # a spawner for this policy exists already
    monkeypatch.setenv("CODEMODE_SIMULATE_NO_LANDLOCK", "1")
    landlock_status.cache_clear()
    try:
        with pytest.raises(ToolError, match="Landlock"):
            await bash(command="echo should-not-run")
        with pytest.raises(ToolError, match="Landlock"):
            await bash(command="echo should-not-run", run_in_background=True)
        full = Caller(
            bash.manager, ToolContext("s1", workspace, SandboxPolicy(mode=SandboxMode.FULL_ACCESS), archive)
        )
        assert (await full(command="echo unconfined")).text == "unconfined"
    finally:
        monkeypatch.delenv("CODEMODE_SIMULATE_NO_LANDLOCK")
        landlock_status.cache_clear()


async def test_a_confined_command_does_not_confine_the_host(bash: Caller, tmp_path: Path) -> None:
    outside_ran = await bash(command=f"touch {tmp_path}/denied.txt")
    assert outside_ran.is_error  # the command itself is confined
    outside = tmp_path / "host-can-write.txt"
    outside.write_text("ok")  # this thread is not confined
    assert outside.read_text() == "ok"


async def test_verification_summary_only_when_output_was_cut(bash: Caller, workspace: Path) -> None:
    bin_dir = workspace / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pytest"
    fake.write_text(
        "#!/bin/bash\n"
        'for i in $(seq 1 "$1"); do echo "tests/test_x.py::test_$i PASSED"; done\n'
        'echo "FAILED tests/test_x.py::test_bad - assert 1 == 2"\n'
        'echo "===== 1 failed, $1 passed in 0.50s ====="\n'
        "exit 1\n"
    )
    fake.chmod(0o755)
    short = await bash(command="PATH=$PWD/bin:$PATH pytest 3")
    data = short.structured_content
    assert data["classification"] == {"kind": "test", "tool": "pytest"}
    assert (data["verification"]["failed"], data["verification"]["passed"]) == (1, 3)
    assert "pytest: 1 failed" not in short.text  # the summary is in the output already
    assert short.text.endswith("Exit code 1")
    long = await bash(command="PATH=$PWD/bin:$PATH pytest 5000")
    assert long.structured_content["stdout"]["truncated"]
    assert "pytest: 1 failed, 5000 passed" in long.text
    assert "read_archive(" in long.text


async def test_cut_verification_counts_and_names_come_from_the_whole_stream(
    bash: Caller, workspace: Path
) -> None:
    # A real cargo test output of five test binaries, 35 KB: more than the head and tail shown.
    fixture = Path(__file__).parents[1] / "verification" / "cargo-test-5-binaries.txt"
    (workspace / "out.txt").write_bytes(fixture.read_bytes())
    bin_dir = workspace / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "cargo"
    fake.write_text("#!/bin/bash\ncat out.txt\nexit 101\n")
    fake.chmod(0o755)
    result = await bash(command="PATH=$PWD/bin:$PATH cargo test")
    data = result.structured_content
    assert data["stdout"]["truncated"]
    v = data["verification"]
    assert (v["passed"], v["failed"], v["complete"]) == (1218, 32, True)
    assert len(v["failing_tests"]) == 20 and v["more_failing_tests"] == 12
    assert "cargo: 32 failed, 1218 passed — " in result.text
    assert "failing: case_1_003, " in result.text and "and 12 more" in result.text


async def test_nul_in_command_or_cwd_is_a_clear_error(bash: Caller) -> None:
    with pytest.raises(ToolError, match="NUL"):
        await bash(command="echo a\x00b")
    with pytest.raises(ToolError, match="cwd"):
        await bash(command="true", cwd="a\x00b")


async def test_a_workspace_that_has_gone_is_a_clear_error(archive: Any, tmp_path: Path, policy: Any) -> None:
    from codemode.sandbox import SandboxMode

    gone = tmp_path / "gone"
    gone.mkdir()
    manager = ProcessManager(archive, handoff_seconds=None)
    caller = Caller(manager, ToolContext("s1", gone, policy.with_mode(SandboxMode.FULL_ACCESS), archive))
    gone.rmdir()
    with pytest.raises(ToolError, match=r"could not start /bin/bash in .*gone.*No such file"):
        await caller(command="true")
    await manager.aclose()


async def test_a_command_whose_pump_cannot_be_set_up_is_ended(
    bash: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    from codemode.tools.bash import _foreground

    token = f"29.{int.from_bytes(os.urandom(3), 'big')}"  # a sleep length no other process uses

    def no_pump(*args: Any, **kwargs: Any) -> Any:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(_foreground, "Pump", no_pump)
    with pytest.raises(OSError, match="Too many open files"):
        await bash(command=f"sleep {token}; true")
    assert survivors(token) == []


async def test_a_repository_the_command_creates_or_removes_shows_in_its_revision(
    bash: Caller, workspace: Path
) -> None:
    env = "GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t"
    made = await bash(command=f"git init -q -b main . && {env} git commit -q --allow-empty -m x")
    revision = made.structured_content["workspace_revision"]
    assert revision is not None and revision["ref"] == "refs/heads/main" and len(revision["head"]) == 40
    removed = await bash(command="rm -rf .git")
    assert removed.structured_content["workspace_revision"] is None


async def test_through_the_host_a_budget_keeps_each_streams_ends_and_the_summary(make_host: MakeHost) -> None:
    # The combined cut used to keep stdout's head and stderr's tail only, losing the summary.
    async with make_host() as (host, _probe):
        script = (
            'for i in $(seq 1 3000); do echo "tests/test_x.py::test_$i PASSED"; done; '
            'for i in $(seq 1 3000); do echo "warning: deprecated call $i" >&2; done; '
            'echo "===== 1 failed, 3000 passed in 0.50s ====="; exit 1'
        )
        result = await host.call_tool("bash", {"command": script}, max_output_tokens=1500)
        assert result.truncated and result.is_error and host.counter.count(result.text) <= 1500
        lines = result.text.splitlines()
        for line in (
            "tests/test_x.py::test_1 PASSED",
            "===== 1 failed, 3000 passed in 0.50s =====",
            "warning: deprecated call 1",
            "warning: deprecated call 3000",
            "Exit code 1",
        ):
            assert line in lines
