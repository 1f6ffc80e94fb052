"""The `codemode` console script, run as a real subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codemode.state._objects import parse_object_store_url
from tests.s3_support import S3Server

pytestmark = pytest.mark.blackbox

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# demo\nhello\n")
    return ws


def codemode(
    tmp_path: Path, workspace: Path, *args: str, stdin: str | None = None, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["CODEMODE_HOME"] = str(home if home is not None else tmp_path / "state")
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


def test_a_shared_database_from_a_file_or_the_environment_reaches_no_command(
    tmp_path: Path, workspace: Path, database_url: str
) -> None:
    """Runs with state directories of their own (two machines) share a session's store through
    the database named by ``--database-url-file`` or ``$CODEMODE_DATABASE_URL``; neither a
    command's environment nor the command line carries the URL."""
    url_file = tmp_path / "state-a" / "database-url"
    url_file.parent.mkdir(mode=0o700)
    url_file.write_text(database_url + "\n")
    show = (
        "await store.set('n', 41);"
        "print((await tools.bash({command: 'env; cat /proc/$PPID/cmdline'})).stdout.excerpt)"
    )
    first = codemode(
        tmp_path, workspace, "run", "-", "--session", "s1", "--database-url-file", str(url_file),
        stdin=show, home=tmp_path / "state-a",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "PATH=" in first.stdout and "codemode" in first.stdout  # the environment and command line
    assert "search_path" not in first.stdout and "CODEMODE_DATABASE_URL" not in first.stdout
    env = {**os.environ, "CODEMODE_HOME": str(tmp_path / "state-b"), "CODEMODE_DATABASE_URL": database_url}
    second = subprocess.run(
        [sys.executable, "-m", "codemode", "run", "-", "--session", "s1"],
        input="print((await store.get('n')) + 1); print((await tools.bash({command: 'env'})).stdout.excerpt)",
        capture_output=True, text=True, cwd=workspace, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert (
        second.stdout.startswith("42\n") and "PATH=" in second.stdout and "search_path" not in second.stdout
    )
    (tmp_path / "fifo").unlink(missing_ok=True)
    os.mkfifo(tmp_path / "fifo")  # a FIFO where the file should be would hang the start: refused
    refused = codemode(
        tmp_path, workspace, "run", "-", "--database-url-file", str(tmp_path / "fifo"), stdin="print(1)"
    )
    assert refused.returncode != 0 and "not a regular file" in refused.stderr


def test_an_archive_store_from_a_file_or_the_environment_serves_another_machine_and_no_command(
    tmp_path: Path, workspace: Path, database_url: str, archive_url: str, s3_server: S3Server
) -> None:
    """A run's archived output goes to the object store named by ``--archive-url-file``; a run
    with a state directory of its own (another machine) given it by ``$CODEMODE_ARCHIVE_URL``
    reads it back; a command sees neither the URL nor its keys."""
    home = tmp_path / "state-a"
    home.mkdir(mode=0o700)
    (home / "database-url").write_text(database_url + "\n")
    (home / "archive-url").write_text(archive_url + "\n")
    program = (
        "print((await tools.bash({command: 'env; cat /proc/$PPID/cmdline'})).stdout.excerpt);"
        "for (let i = 0; i < 3000; i++) print('row ' + i)"
    )
    first = codemode(
        tmp_path, workspace, "run", "-", "--json", "--max-output-tokens", "300",
        "--database-url-file", str(home / "database-url"), "--archive-url-file", str(home / "archive-url"),
        stdin=program, home=home,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    ref = json.loads(first.stdout)["refs"][0]
    store = parse_object_store_url(archive_url)
    objects = s3_server.client().list_objects_v2(Bucket=store.bucket, Prefix=store.prefix).get("Contents", [])
    assert ref in [item["Key"].split("/")[-1].split(".")[0] for item in objects]  # and the bash log's
    env = {
        **os.environ,
        "CODEMODE_HOME": str(tmp_path / "state-b"),
        "CODEMODE_DATABASE_URL": database_url,
        "CODEMODE_ARCHIVE_URL": archive_url,
    }
    there = subprocess.run(
        [sys.executable, "-m", "codemode", "archive", "read", ref],
        capture_output=True, text=True, cwd=workspace, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert there.returncode == 0, there.stderr
    assert there.stdout.endswith("row 2998\nrow 2999\n") and "PATH=" in there.stdout
    assert "--archive-url-file" in there.stdout  # the command line names the file, not the URL
    for secret in ("codemode-test-secret", "CODEMODE_ARCHIVE_URL", store.bucket):
        assert secret not in there.stdout


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
    from codemode._cli._common import cli_host as _host
    from codemode.cli import build_parser

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
    # The CLI prints the completion on stderr after the session's next command: the list, or
    # the start itself when the command was that quick.
    (notification,) = [
        line
        for line in (started.stderr + listed.stderr).splitlines()
        if line.startswith("codemode: Background process")
    ]
    assert notification.startswith(f"codemode: Background process {row['process_id']} (`true aaaa")
    ps_line = table.stdout.splitlines()[1]
    for view in (list_line, notification, ps_line):
        assert not any(piece in view for piece in _fragments(key_a) + _fragments(key_b)), view
    for output in (started.stdout, listed.stdout, table.stdout, started.stderr, listed.stderr):
        assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in output), repr(output)
        assert "\u202e" not in output
    assert "\\x1b[31mred\\x1b[0m \\x1b]0;pwned\\x07 \\x9b2J \\u202eevil done" in ps_line


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a command printed (a failure shows its stderr)."""
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def _wait_exited(tmp_path: Path, workspace: Path, process_id: str, *session: str) -> dict[str, object]:
    """The process's row once its supervisor has recorded the end (each look is a CLI run)."""
    for _ in range(200):
        rows = _json(codemode(tmp_path, workspace, "ps", "--json", *session))
        (row,) = [r for r in rows if r["process_id"] == process_id]
        if row["state"] not in ("starting", "running"):
            return dict(row)
    raise AssertionError(f"{process_id} still running: {row}")


def test_stdout_is_the_result_and_completions_go_to_stderr(tmp_path: Path, workspace: Path) -> None:
    program = 'const r = await tools.bash({command: "true", run_in_background: true}); return r.process_id'
    started = codemode(tmp_path, workspace, "run", "-", stdin=program)
    assert started.returncode == 0, started.stderr
    process_id = started.stdout.strip()
    assert started.stdout == process_id + "\n" and process_id.startswith("p_")  # PID=$(codemode run -)
    _wait_exited(tmp_path, workspace, process_id)
    after = codemode(tmp_path, workspace, "run", "-", stdin="print('next')")
    assert after.stdout == "next\n"
    # Delivered once: on the start's stderr when it was that quick, else on the next run's.
    lines = [line for line in (started.stderr + after.stderr).splitlines() if process_id in line]
    assert lines == [
        f"codemode: Background process {process_id} (`true`) exited with code 0; "
        f"`codemode logs {process_id}` prints its output"
    ]
    again = codemode(tmp_path, workspace, "call", "bash", '{"command": "echo hi"}')
    assert again.stdout.startswith("hi") and process_id not in again.stdout + again.stderr


def test_version(tmp_path: Path, workspace: Path) -> None:
    from codemode import __version__

    done = codemode(tmp_path, workspace, "--version")
    assert done.returncode == 0 and done.stdout == f"codemode {__version__}\n"


def test_unknown_names_and_empty_searches_speak_shell(tmp_path: Path, workspace: Path) -> None:
    nothing = codemode(tmp_path, workspace, "tools", "zzz")
    assert nothing.returncode == 1 and nothing.stdout == ""
    assert nothing.stderr == "codemode: no tools match 'zzz'; `codemode tools` with no words lists them all\n"
    as_json = codemode(tmp_path, workspace, "tools", "zzz", "--json")
    assert as_json.returncode == 1 and _json(as_json) == []
    everything = codemode(tmp_path, workspace, "tools")
    assert everything.returncode == 0 and "read_file" in everything.stdout
    for command in (["describe", "nope"], ["call", "nope", "{}"], ["describe", "edit_fil"]):
        done = codemode(tmp_path, workspace, *command)
        assert done.returncode == 1 and done.stdout == "", done
        assert f"codemode: no tool named {command[1]!r}." in done.stderr
        assert "`codemode tools WORDS` searches the tools" in done.stderr
        assert "searchTools" not in done.stderr and "describeTool" not in done.stderr
    close = codemode(tmp_path, workspace, "describe", "edit_fil")
    assert "Did you mean: edit_file" in close.stderr


def test_session_close_stops_its_processes_and_refuses_an_unknown_session(
    tmp_path: Path, workspace: Path
) -> None:
    unknown = codemode(tmp_path, workspace, "session", "close", "nosuch")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert "no session 'nosuch'" in unknown.stderr and "closed" not in unknown.stderr
    ran = codemode(tmp_path, workspace, "run", "-", "--session", "s1", stdin="print(1)")
    assert ran.returncode == 0, ran.stderr
    quiet = codemode(tmp_path, workspace, "session", "close", "s1")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "session s1 closed: it had no running lifecycle=session processes\n"

    args = json.dumps({"command": "sleep 300", "run_in_background": True})
    started = codemode(tmp_path, workspace, "call", "bash", args, "--session", "s2", "--json")
    process_id = _json(started)["structured_content"]["process_id"]
    closed = codemode(tmp_path, workspace, "session", "close", "s2", "--json")
    assert closed.returncode == 0, closed.stderr
    assert _json(closed) == {"session_id": "s2", "stopped": [process_id], "still_running": []}
    assert _wait_exited(tmp_path, workspace, process_id, "--all")["state"] == "stopped"


def test_json_is_honoured_where_accepted_and_refused_by_mcp(tmp_path: Path, workspace: Path) -> None:
    mcp = codemode(tmp_path, workspace, "mcp", "--json")
    assert mcp.returncode == 2 and "unrecognized arguments: --json" in mcp.stderr
    args = json.dumps({"command": "printf 'one\\ntwo\\n'; exit 4", "run_in_background": True})
    started = codemode(tmp_path, workspace, "call", "bash", args, "--json")
    process_id = _json(started)["structured_content"]["process_id"]
    logs = codemode(tmp_path, workspace, "logs", process_id, "--follow", "--json")
    assert logs.returncode == 0, logs.stderr
    page = _json(logs)
    assert page["process_id"] == process_id and page["session_id"] == "cli"
    assert page["exited"] is True and page["exit_code"] == 4 and page["notes"] == []
    assert page["output"].replace("\r\n", "\n") == "one\ntwo\n"
    plain = codemode(tmp_path, workspace, "logs", process_id)
    assert plain.stdout.replace("\r\n", "\n") == "one\ntwo\n"


def test_archive_read_marks_the_dropped_middle_of_a_capped_log(tmp_path: Path, workspace: Path) -> None:
    from codemode.state import MIN_LOG_CAP_BYTES, State

    data = b"".join(b"line %07d\n" % i for i in range(300_000))  # 3.9 MB through a 1 MiB cap
    archive_state = State(tmp_path / "state", log_cap_bytes=MIN_LOG_CAP_BYTES)
    archive = archive_state.archive
    writer = archive.open_log(kind="log", session_id="s1")
    writer.write(data)
    ref = writer.close()
    archive_state.close()
    assert ref.dropped is not None
    start, end = ref.dropped
    done = codemode(tmp_path, workspace, "archive", "read", ref.ref)
    assert done.returncode == 0, done.stderr
    assert done.stdout.encode() == data[:start] + data[end:]
    assert done.stderr == (
        f"codemode: [bytes {start}-{end} of {ref.ref} are not kept (dropped when the log outgrew "
        f"its cap, which keeps its head and its tail); skipped to byte {end}]\n"
    )
    as_json = _json(codemode(tmp_path, workspace, "archive", "read", ref.ref, "--json"))
    assert as_json["dropped"] == [[start, end]] and as_json["eof"] is True
    assert as_json["text"].encode() == data[:start] + data[end:]
    inside = codemode(
        tmp_path, workspace, "archive", "read", ref.ref, "--offset", str(start + 5), "--limit", "10"
    )
    assert inside.stdout.encode() == data[end : end + 10] and f"bytes {start + 5}-{end}" in inside.stderr
    bad = codemode(tmp_path, workspace, "archive", "read", ref.ref, "--limit", "0")
    assert bad.returncode == 2 and "must be at least 1" in bad.stderr


def test_doctor_runs_where_other_commands_refuse_and_says_what_to_fix(
    tmp_path: Path, workspace: Path
) -> None:
    inside = workspace / ".state"  # the state directory inside the workspace: commands refuse
    refused = codemode(tmp_path, workspace, "run", "-", stdin="print(1)", home=inside)
    assert refused.returncode == 2 and "CODEMODE_HOME" in refused.stderr
    doctor = codemode(tmp_path, workspace, "doctor", home=inside)
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr
    assert (
        doctor.stdout.startswith("engine ")
        and "layers (checked by starting one confined command):" in doctor.stdout
    )
    assert "problems found: 1" in doctor.stdout
    assert f"the state directory {inside} lies inside the workspace {workspace}" in doctor.stdout
    assert "fix: set CODEMODE_HOME (or pass --state-dir) to a directory outside" in doctor.stdout
    facts = _json(codemode(tmp_path, workspace, "doctor", "--json", home=inside))
    (finding,) = facts["findings"]
    assert "lies inside the workspace" in finding["problem"] and "CODEMODE_HOME" in finding["fix"]
    assert facts["sandbox"]["layers"] and facts["tokenizer"]["encoding"] == "o200k_base"

    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    broken = _json(codemode(tmp_path, workspace, "doctor", "--json", home=not_a_dir))
    assert any("state directory cannot be used" in f["problem"] for f in broken["findings"])

    healthy = codemode(tmp_path, workspace, "doctor", "--json")
    assert healthy.returncode == (1 if _json(healthy)["findings"] else 0)


def test_ps_columns_fit_their_values(tmp_path: Path, workspace: Path) -> None:
    session = "a-session-name-longer-than-twelve"
    args = json.dumps({"command": "true", "run_in_background": True})
    started = codemode(tmp_path, workspace, "call", "bash", args, "--session", session, "--json")
    process_id = _json(started)["structured_content"]["process_id"]
    _wait_exited(tmp_path, workspace, process_id, "--all")
    header, row = codemode(tmp_path, workspace, "ps", "--all").stdout.splitlines()
    assert row.startswith(process_id + "  ")
    assert row[header.index("SESSION") :].startswith(session + "  ")
    assert row[header.index("STATE") :].startswith("exited ")
    assert header.index("EXIT") + len("EXIT") == row.index(" 0 ") + 2  # numbers end under their header
    assert row.endswith("  true")


@pytest.mark.anyio
async def test_logs_mark_the_dropped_middle_of_a_capped_log(tmp_path: Path, workspace: Path) -> None:
    from codemode import Host
    from codemode.state import MIN_LOG_CAP_BYTES

    # Started by a host with the smallest log cap (the CLI has no option for it); read by the CLI.
    async with Host(
        workspace=workspace, state_dir=tmp_path / "state", log_cap_bytes=MIN_LOG_CAP_BYTES
    ) as host:
        started = await host.call_tool("bash", {"command": "seq 1 400000", "run_in_background": True})
        assert isinstance(started.structured_content, dict), started.text
        process_id = started.structured_content["process_id"]
    logs = codemode(tmp_path, workspace, "logs", process_id, "--follow")
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines[:3] == ["1", "2", "3"] and lines[-1] == "400000" and len(lines) < 400000
    (note,) = logs.stderr.splitlines()
    assert note.startswith("codemode: [bytes ") and "of the log are not kept" in note and "its cap" in note
    as_json = _json(codemode(tmp_path, workspace, "logs", process_id, "--json"))
    assert as_json["notes"] == [note.removeprefix("codemode: [").removesuffix("]")]
    assert as_json["exit_code"] == 0 and as_json["output"].splitlines()[-1] == "400000"
    _release_kept_tmpfs(tmp_path / "state")


def _release_kept_tmpfs(state: Path) -> None:
    """Unmount the session tmpfs a host kept at its close for a background process that has
    ended since. A later host sweeps it only when the one that made it is gone, and here that
    is this test's own process, which lives on."""
    from codemode.sandbox import remove_session_tmp, tmp_mounts

    for point in tmp_mounts(state / "tmp"):
        remove_session_tmp(Path(point))
    assert tmp_mounts(state / "tmp") == {}


def test_output_larger_than_a_pipe_buffer_arrives_whole_before_the_quick_exit(
    tmp_path: Path, workspace: Path
) -> None:
    # The console script ends with os._exit after flushing (cli.entry_point): nothing the
    # program printed, nor the notice on stderr, may be lost to a buffer not yet written.
    # The run's own output is cut to its budget (at most 50,000 tokens, fewer bytes than a
    # pipe holds under the byte counter of a machine without tiktoken's cache), so the
    # archive read that prints all of it is what carries more than a pipe buffer.
    program = "for (let i = 0; i < 5000; i++) print('line ' + i + ' ' + '-'.repeat(40)); print('the end')"
    done = codemode(tmp_path, workspace, "run", "-", "--max-output-tokens", "2000", stdin=program)
    assert done.returncode == 0, done.stderr
    notice = re.search(r"`codemode archive read (\S+)` prints all of it", done.stderr)
    assert notice is not None, done.stderr
    assert done.stdout.startswith("line 0 ") and "the end" in done.stdout
    whole = codemode(tmp_path, workspace, "archive", "read", notice.group(1))
    assert whole.returncode == 0, whole.stderr
    assert len(whole.stdout) > 200_000
    lines = whole.stdout.splitlines()
    assert (
        lines[0].startswith("line 0 ") and lines[4999].startswith("line 4999 ") and lines[5000] == "the end"
    )
    failed = codemode(tmp_path, workspace, "run", "-", stdin="throw new Error('boom')")
    assert failed.returncode == 1 and "boom" in failed.stdout + failed.stderr


def test_run_stream_shows_lines_on_stderr_before_the_program_ends(tmp_path: Path, workspace: Path) -> None:
    token = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
    gate = workspace / "go"
    program = (
        "print('first line');\n"
        f"print('token {token}');\n"
        "print('-----BEGIN RSA PRIVATE KEY-----');\n"
        "await sleep(1);\n"  # the key's body comes in a later piece of printed text
        "print('MIIEowIBAAKCAQEAkeybody');\n"
        "print('-----END RSA PRIVATE KEY-----');\n"
        "await tools.bash({command: 'while [ ! -e go ]; do sleep 0.02; done'});\n"
        "print('last line');\n"
    )
    (tmp_path / "prog.js").write_text(program)
    env = dict(os.environ, CODEMODE_HOME=str(tmp_path / "state"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "codemode", "run", str(tmp_path / "prog.js"), "--stream"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=workspace,
        env=env,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        first = proc.stderr.readline()
        assert first == "first line\n"
        assert not gate.exists()  # the line came while the program was still waiting for it
        gate.write_text("")
        # (not communicate(): it would skip what readline buffered; stdout is a few lines)
        err = proc.stderr.read()
        out = proc.stdout.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert proc.returncode == 0, err
    streamed = first + err
    assert "token [REDACTED:github-token]" in streamed and token not in streamed
    assert "keybody" not in streamed and "[REDACTED:private-key]" in streamed
    assert streamed.index("first line") < streamed.index("last line")
    # Standard output is the budgeted result, as without --stream.
    assert out == "first line\ntoken [REDACTED:github-token]\n[REDACTED:private-key]\nlast line\n"
    assert streamed == out


def _run_with_terminal_stderr(tmp_path: Path, workspace: Path, *flags: str) -> tuple[str, str]:
    """Run a program that prints with standard error on a pseudo-terminal: (stdout, stderr)."""
    import pty

    (tmp_path / "p.js").write_text("print('the line')")
    env = dict(os.environ, CODEMODE_HOME=str(tmp_path / "state"))
    master, slave = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-m", "codemode", "run", str(tmp_path / "p.js"), *flags],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=workspace,
        env=env,
    ) as proc:
        os.close(slave)
        err = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            err += chunk
        out = proc.stdout.read() if proc.stdout is not None else b""
        proc.wait(timeout=120)
    os.close(master)
    assert proc.returncode == 0, err
    return out.decode(), err.decode().replace("\r\n", "\n")


def test_run_streams_on_a_terminal_unless_no_stream(tmp_path: Path, workspace: Path) -> None:
    out, err = _run_with_terminal_stderr(tmp_path, workspace)
    assert out == "the line\n" and "the line\n" in err
    out, err = _run_with_terminal_stderr(tmp_path, workspace, "--no-stream")
    assert out == "the line\n" and "the line" not in err
    done = codemode(tmp_path, workspace, "run", "-", stdin="print('the line')")  # stderr not a terminal
    assert done.stdout == "the line\n" and "the line" not in done.stderr
