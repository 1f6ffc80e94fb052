"""The `codemode` console script, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# demo\nhello\n")
    return ws


def codemode(
    tmp_path: Path, workspace: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["CODEMODE_HOME"] = str(tmp_path / "state")
    return subprocess.run(
        [sys.executable, "-m", "codemode", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=workspace,
        env=env,
        timeout=120,
        check=False,
    )


def test_run_from_stdin_prints_the_model_facing_text(tmp_path: Path, workspace: Path) -> None:
    done = codemode(
        tmp_path,
        workspace,
        "run",
        "-",
        stdin='const f = await tools.read_file({path: "README.md"}); print(f.content)',
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "# demo\nhello\n\n"


def test_run_json_and_failure_exit_status(tmp_path: Path, workspace: Path) -> None:
    done = codemode(tmp_path, workspace, "run", "-", "--json", stdin="print('before'); null.x")
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["ok"] is False
    assert result["error"]["name"] == "TypeError"
    assert result["text"].startswith("before\n")
    assert result["usage"]["max_output_tokens"] == 10_000


def test_session_shares_store_between_runs(tmp_path: Path, workspace: Path) -> None:
    first = codemode(tmp_path, workspace, "run", "-", "--session", "s1", stdin="await store.set('n', 41)")
    assert first.returncode == 0, first.stderr
    second = codemode(
        tmp_path, workspace, "run", "-", "--session", "s1", stdin="print((await store.get('n')) + 1)"
    )
    assert second.stdout.strip() == "42"
    other = codemode(tmp_path, workspace, "run", "-", "--session", "s2", stdin="print(await store.get('n'))")
    assert other.stdout.strip() == "null"


def test_budget_cut_then_archive_read_gives_the_exact_text(tmp_path: Path, workspace: Path) -> None:
    program = "for (let i = 0; i < 5000; i++) print('row ' + i + ' ' + '\u00e9'.repeat(i % 7))"
    done = codemode(tmp_path, workspace, "run", "-", "--json", "--max-output-tokens", "300", stdin=program)
    result = json.loads(done.stdout)
    assert result["truncated"] is True and len(result["refs"]) == 1
    ref = result["refs"][0]
    assert ref in result["text"]
    whole = codemode(tmp_path, workspace, "archive", "read", ref)
    accent = "\u00e9"
    expected = "".join(f"row {i} {accent * (i % 7)}\n" for i in range(5000))
    assert whole.stdout == expected
    page = codemode(tmp_path, workspace, "archive", "read", ref, "--offset", "4", "--limit", "3")
    assert page.stdout == expected.encode()[4:7].decode()


def test_call_tools_describe_doctor(tmp_path: Path, workspace: Path) -> None:
    call = codemode(tmp_path, workspace, "call", "bash", '{"command": "echo hi && exit 3"}')
    assert call.returncode == 1
    assert "hi" in call.stdout and "Exit code 3" in call.stdout
    bad = codemode(tmp_path, workspace, "call", "bash", "{not json")
    assert bad.returncode == 2 and "JSON object" in bad.stderr and "Traceback" not in bad.stderr
    found = codemode(tmp_path, workspace, "tools", "file")
    assert found.stdout.splitlines()[0].split()[0] in {"read_file", "edit_file", "write_file"}
    described = codemode(tmp_path, workspace, "describe", "edit_file")
    assert described.stdout.startswith("tools.edit_file(args: {")
    unknown = codemode(tmp_path, workspace, "describe", "edit_fil")
    assert unknown.returncode == 1 and "edit_file" in unknown.stderr
    doctor = codemode(tmp_path, workspace, "doctor", "--json")
    facts = json.loads(doctor.stdout)
    assert facts["state_dir"]["mode"] == "0o700"
    assert facts["tokenizer"]["encoding"] == "o200k_base"
    assert isinstance(facts["sandbox"]["landlock_abi"], int)


def test_missing_program_file_is_a_clear_error(tmp_path: Path, workspace: Path) -> None:
    done = codemode(tmp_path, workspace, "run", "nope.js")
    assert done.returncode == 2
    assert "cannot read program nope.js" in done.stderr and "Traceback" not in done.stderr


def test_survey_example_runs(tmp_path: Path, workspace: Path) -> None:
    done = codemode(tmp_path, workspace, "run", str(REPO / "examples" / "survey.js"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "README.md" in done.stdout
    assert (workspace / "SURVEY.md").read_text().startswith("# Survey")


def test_mcp_servers_get_their_own_session_and_other_commands_cli(tmp_path: Path) -> None:
    from codemode.cli import _host, build_parser

    parser = build_parser()
    common = ["--state-dir", str(tmp_path / "state")]
    first = _host(parser.parse_args(["mcp", *common])).config.session_id
    second = _host(parser.parse_args(["mcp", *common])).config.session_id
    assert first.startswith("mcp-") and second.startswith("mcp-") and first != second
    assert _host(parser.parse_args(["run", "-", *common])).config.session_id == "cli"
    assert _host(parser.parse_args(["mcp", "--session", "s9", *common])).config.session_id == "s9"


def _fragments(secret: str, size: int = 5) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def test_operator_views_redact_commands_whole_and_show_terminal_controls_as_text(
    tmp_path: Path, workspace: Path
) -> None:
    # One key straddles bash list's 60-character cut, the other the notification's 80; then
    # colour, a window-title OSC, an 8-bit CSI and a bidi override that would act on a terminal.
    key_a, key_b = "AKIAIOSFODNN7EXAMPLE", "ASIAJ5ZMQ2EXAMPLE7KP"
    command = (
        f"true {'a' * 40} {key_a} {'b' * 5} {key_b} "
        "\x1b[31mred\x1b[0m \x1b]0;pwned\x07 \x9b2J \u202eevil done"
    )
    started = codemode(
        tmp_path, workspace, "call", "bash", json.dumps({"command": command, "run_in_background": True})
    )
    assert started.returncode == 0, started.stdout + started.stderr
    for _ in range(200):  # until its supervisor has recorded the exit (each look is a CLI run)
        (row,) = json.loads(codemode(tmp_path, workspace, "ps", "--json").stdout)
        if row["state"] == "exited":
            break
    assert row["state"] == "exited", row
    assert key_a not in row["command"] and "[REDACTED:aws-access-key-id]" in row["command"]

    listed = codemode(tmp_path, workspace, "call", "bash", '{"action": "list"}')
    table = codemode(tmp_path, workspace, "ps")
    assert listed.returncode == 0 and table.returncode == 0, listed.stderr + table.stderr
    (list_line,) = [line for line in listed.stdout.splitlines() if line.startswith(row["process_id"])]
    assert list_line.endswith("...")
    # The notification ends the next result of the session: the list's, or the start's own
    # when the command was that quick.
    (notification,) = [
        line
        for line in (started.stdout + listed.stdout).splitlines()
        if line.startswith("Background process")
    ]
    assert notification.startswith(f"Background process {row['process_id']} (`true aaaa")
    ps_line = table.stdout.splitlines()[1]
    for view in (list_line, notification, ps_line):
        assert not any(piece in view for piece in _fragments(key_a) + _fragments(key_b)), view
    for output in (started.stdout, listed.stdout, table.stdout):
        assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in output), repr(output)
        assert "\u202e" not in output
    assert "\\x1b[31mred\\x1b[0m \\x1b]0;pwned\\x07 \\x9b2J \\u202eevil done" in ps_line
