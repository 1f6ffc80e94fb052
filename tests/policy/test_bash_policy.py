"""The command policy in front of real bash runs: argv mode, plain command lines without a shell,
denied commands, foreground watchers, masked values and protected deletes (real Host, real
QuickJS, real processes, real workspace and state dir)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import Host
from codemode.cli import main as cli_main
from codemode.policy import CommandPolicy, Trash
from codemode.sandbox import session_inbox
from tests.host_support import MakeHost

pytestmark = pytest.mark.anyio

TOKEN = "ghp_" + "Q1w2E3r4T5" * 3 + "zz9988"


async def run(host: Host, source: str) -> Any:
    with anyio.fail_after(60):
        result = await host.run_code(source)
    assert result.error is None, result.text
    value, _ = json.JSONDecoder().raw_decode(result.text)  # a completion line may follow
    return value


async def test_argv_runs_without_a_shell(make_host: MakeHost) -> None:
    async with make_host() as (host, _):
        out = await run(
            host,
            'const r = await tools.bash({argv: ["printf", "%s|", "a;b", "$(touch pwned)", "*", "it\'s"]});'
            "return {code: r.exit_code, out: r.stdout.excerpt};",
        )
        assert out == {"code": 0, "out": "a;b|$(touch pwned)|*|it's|"}
        assert not (host.workspace / "pwned").exists()
        missing = await host.call_tool("bash", {"argv": ["no-such-program-x"]})
        assert missing.is_error
        assert "could not start no-such-program-x" in missing.text and "not found on PATH" in missing.text


async def test_a_plain_command_line_runs_without_bash_and_the_same_as_with_it(make_host: MakeHost) -> None:
    async with make_host() as (host, _):
        (host.workspace / "sub").mkdir()
        # bash counts itself in SHLVL; a command started without a shell sees the host's count.
        direct = await host.call_tool("bash", {"command": "env", "cwd": "sub"})
        shell = await host.call_tool("bash", {"command": "env | cat", "cwd": "sub"})
        direct_env = dict(line.split("=", 1) for line in direct.text.splitlines() if "=" in line)
        shell_env = dict(line.split("=", 1) for line in shell.text.splitlines() if "=" in line)
        assert int(shell_env.get("SHLVL", "0")) == int(direct_env.get("SHLVL", "0")) + 1
        assert direct_env["PWD"] == shell_env["PWD"] == str(host.workspace / "sub")
        # Not on PATH: bash runs it after all and says what bash says.
        missing = await host.call_tool("bash", {"command": "no-such-program-x --help"})
        assert "no-such-program-x: command not found" in missing.text and "Exit code 127" in missing.text


async def test_background_argv(make_host: MakeHost) -> None:
    async with make_host() as (host, _):
        out = await run(
            host,
            'const s = await tools.bash({argv: ["sh", "-c", "echo \\"$0 $1\\"", "a;b", "$(x)"], run_in_background: true});'
            'const r = await tools.bash({action: "read", process_id: s.process_id, wait_ms: 20000});'
            "return {out: r.output.trim()};",
        )
        assert out == {"out": "a;b $(x)"}


async def test_denied_commands_never_start(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    policy = CommandPolicy(deny=frozenset({"curl"}))
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", command_policy=policy) as host:
        out = await run(
            host,
            "try { await tools.bash({command: \"touch made && sh -c 'c\\\\url -s x'\"}); return 'ran' }"
            "catch (e) { return {code: e.code, message: e.message} }",
        )
        assert out["code"] == "denied_by_policy"
        assert "`curl` (inside sh -c) is denied by this host's command policy" in out["message"]
        assert not (host.workspace / "made").exists()
        # No tool argument loosens the policy: the bash tool takes none that could.
        refused = await host.call_tool("bash", {"command": "curl x", "strict": False})
        assert refused.is_error and "$.strict: Extra inputs are not permitted" in refused.text
        assert (await host.call_tool("bash", {"command": "echo fine"})).text.strip() == "fine"


async def test_strict_policy_refuses_what_it_cannot_check(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    policy = CommandPolicy(strict=True)
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", command_policy=policy) as host:
        refused = await host.call_tool("bash", {"command": "c=touch; $c made"})
        assert refused.is_error
        assert "strict command policy cannot check a computed command name `$c`" in refused.text
        assert not (host.workspace / "made").exists()
        ok = await host.call_tool("bash", {"command": "c=touch; touch made"})
        assert not ok.is_error and (host.workspace / "made").exists()


async def test_watchers_through_npm_scripts_are_refused_in_the_foreground_only(make_host: MakeHost) -> None:
    async with make_host() as (host, _):
        scripts = {
            "dev": "npm run a",
            "a": "pnpm b",
            "b": "sh -c 'yarn run c'",
            "c": "touch started && nodemon server.js",
        }
        (host.workspace / "package.json").write_text(json.dumps({"scripts": scripts}))
        out = await run(
            host,
            'try { await tools.bash({command: "npm run dev"}); return "ran" }'
            "catch (e) { return {code: e.code, message: e.message} }",
        )
        assert out["code"] == "watcher_in_foreground"
        assert "`nodemon server.js`" in out["message"] and "run_in_background: true" in out["message"]
        assert not (host.workspace / "started").exists()
        # In the background the same kind of command starts (tail -f is a watcher too).
        started = await host.call_tool("bash", {"command": "tail -f /dev/null", "run_in_background": True})
        assert not started.is_error, started.text
        process_id = started.structured_content["process_id"]  # type: ignore[index]
        await host.call_tool("bash", {"action": "stop", "process_id": process_id})


async def test_redacted_values_cannot_be_passed_back(make_host: MakeHost) -> None:
    async with make_host() as (host, _):
        (host.workspace / "token.txt").write_text(TOKEN + "\n")
        out = await run(
            host,
            'const r = await tools.bash({command: "cat token.txt"});'
            "const seen = r.stdout.excerpt.trim();"
            "let code = null, message = null;"
            'try { await tools.bash({argv: ["sh", "-c", `echo ${seen} > copy.txt`]}) }'
            "catch (e) { code = e.code; message = e.message }"
            'const ok = await tools.bash({command: "tr a-z A-Z < token.txt > upper.txt && echo done"});'
            "return {seen, code, message, ok: ok.stdout.excerpt.trim()};",
        )
        assert out["seen"] == "[REDACTED:github-token]"
        assert out["code"] == "redacted_value"
        assert "cannot be used as an argument; read the secret inside the same command" in out["message"]
        assert not (host.workspace / "copy.txt").exists()
        assert out["ok"] == "done"  # read inside the command, the secret works
        assert (host.workspace / "upper.txt").read_text().strip() == TOKEN.upper()


async def test_rm_moves_workspace_files_to_the_trash_and_restore_puts_them_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace, outside, state = tmp_path / "ws", tmp_path / "other", tmp_path / "state"
    for folder in (workspace / "src" / "deep", outside):
        folder.mkdir(parents=True)
    (workspace / "notes.txt").write_text("keep me")
    (workspace / "src" / "deep" / "a.py").write_text("print(1)")
    (workspace / "b.o").write_text("obj")
    (workspace / "c.o").write_text("obj")
    (outside / "gone.txt").write_text("x")
    async with Host(workspace=workspace, state_dir=state, writable_roots=[outside]) as host:
        out = await run(
            host,
            "const r = await tools.bash({command: \"rm notes.txt && rm -r src && find . -name '*.o' -exec rm {} +\""
            f' + " && rm {outside}/gone.txt && rm missing.txt; echo status $?"}});'
            "return {out: r.stdout.excerpt, err: r.stderr.excerpt, trashed: r.trashed, text: r.exit_code};",
        )
        assert out["out"].strip() == "status 1"
        assert out["err"].strip() == "rm: cannot remove 'missing.txt': No such file or directory"
        paths = sorted(item["path"] for item in out["trashed"])
        assert paths == sorted(str(workspace / p) for p in ("notes.txt", "src", "b.o", "c.o"))
        assert not (workspace / "notes.txt").exists() and not (workspace / "src").exists()
        assert not (outside / "gone.txt").exists()  # outside the workspace: really deleted
        text = (
            await host.call_tool(
                "bash", {"command": "rm b-missing -f; rm -v ../ws/.. 2>&1; mkdir d; rm -d d"}
            )
        ).text
        assert "refusing to remove '.' or '..'" in text
        assert "[protected deletes: rm moved 1 path(s) to this workspace's trash: d/ (" in text
        entries = host.trash.entries()
    assert len(entries) == 5
    assert all(Path(e.location).parent.parent == Trash(state, workspace).root for e in entries)
    notes = next(e for e in entries if e.path.endswith("notes.txt"))
    source = next(e for e in entries if e.path.endswith("src"))
    assert cli_main(["trash", "list", "--workspace", str(workspace), "--state-dir", str(state)]) == 0
    listing = capsys.readouterr().out
    assert f"{notes.id}  " in listing and "directory  src/" in listing
    for entry in (notes, source):
        assert (
            cli_main(["trash", "restore", entry.id, "--workspace", str(workspace), "--state-dir", str(state)])
            == 0
        )
    assert (workspace / "notes.txt").read_text() == "keep me"
    assert (workspace / "src" / "deep" / "a.py").read_text() == "print(1)"
    # A path that exists again is not overwritten; an unknown id is a clear error.
    (workspace / "b.o").write_text("new")
    b = next(e for e in entries if e.path.endswith("b.o"))
    capsys.readouterr()
    assert cli_main(["trash", "restore", b.id, "--workspace", str(workspace), "--state-dir", str(state)]) == 1
    assert "exists now; move it away first" in capsys.readouterr().err
    assert (workspace / "b.o").read_text() == "new"
    assert (
        cli_main(["trash", "restore", "nope", "--workspace", str(workspace), "--state-dir", str(state)]) == 1
    )
    assert (
        cli_main(["trash", "empty", "--workspace", str(workspace), "--state-dir", str(state), "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"removed": 3}
    assert Trash(state, workspace).entries() == []


async def test_rm_from_anywhere_on_path_is_protected_but_an_absolute_rm_is_not(make_host: MakeHost) -> None:
    async with make_host() as (host, _):
        for name in ("a", "b", "c", "d"):
            (host.workspace / name).write_text(name)
        result = await host.call_tool(
            "bash", {"command": "printf 'a\\n' | xargs rm && sh -c 'command rm b' && env rm c && /bin/rm d"}
        )
        trashed = sorted(Path(t["path"]).name for t in result.structured_content["trashed"])  # type: ignore[index]
        assert trashed == ["a", "b", "c"]  # /bin/rm d bypasses the shim: not a sandbox boundary
        assert not any((host.workspace / n).exists() for n in "abcd")


async def test_a_session_that_ends_files_its_own_inbox_and_no_other(make_host: MakeHost) -> None:
    """What a session's commands moved to its trash inboxes after the last filing (a background
    ``rm``) is filed when the session ends; another session's inbox waits for its own end."""
    async with make_host() as (host, _):
        inboxes: dict[str, Path] = {}
        for session in ("s1", "s2"):
            shown = await host.call_tool("bash", {"command": 'printf %s "$TMPDIR"'}, session_id=session)
            temp = Path(shown.text.strip())
            # s1's in its inbox beside its temp dir (the shim's), s2's in the one inside it
            inboxes[session] = session_inbox(temp) if session == "s1" else host.trash.inbox(temp)
            entry = inboxes[session] / f"late-{session}"  # as the rm shim leaves one
            entry.mkdir(parents=True, exist_ok=True)
            (entry / "item").write_text(session)
            (entry / "meta.json").write_text(
                json.dumps({"path": str(host.workspace / session), "kind": "file"})
            )
        await host.close_session("s1")
        assert [e.id for e in host.trash.entries()] == ["late-s1"]
        assert (inboxes["s2"] / "late-s2").is_dir()
        await host.close_session("s2")
        assert sorted(e.id for e in host.trash.entries()) == ["late-s1", "late-s2"]
        host.trash.restore("late-s2")
        assert (host.workspace / "s2").read_text() == "s2"


async def test_restore_never_writes_outside_the_workspace(tmp_path: Path) -> None:
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", workspace / "link")
    trash = Trash(state, workspace)
    (state / "tmp" / "s-x").mkdir(parents=True)
    (state / "tmp" / "s-x.workspace").write_text(str(trash.workspace))  # its host's record
    inbox = trash.inbox(state / "tmp" / "s-x")
    # A confined command can write its inbox: an entry claiming a path outside is never filed.
    for entry_id, path in (("forged", str(tmp_path / "victim")), ("via-link", str(workspace / "link" / "x"))):
        (inbox / entry_id).mkdir()
        (inbox / entry_id / "meta.json").write_text(json.dumps({"path": path, "kind": "file"}))
        (inbox / entry_id / "item").write_text("evil")
    trash.file_all()
    assert [e.id for e in trash.entries()] == ["via-link"]
    with pytest.raises(Exception, match="leads out of the workspace"):
        trash.restore("via-link")
    assert not (tmp_path / "victim").exists() and not (tmp_path / "elsewhere" / "x").exists()
    assert (inbox / "forged").exists()  # left where it was


def test_cli_deny_command_and_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ws").mkdir()
    common = ["--workspace", str(tmp_path / "ws"), "--state-dir", str(tmp_path / "state")]
    args = ["call", "bash", json.dumps({"command": "wget -q x; echo hi"})]
    assert cli_main([*args, *common, "--deny-command", "curl", "--deny-command", "wget"]) == 1
    assert "`wget` is denied by this host's command policy" in capsys.readouterr().out
    assert cli_main(["call", "bash", json.dumps({"command": "$x"}), *common, "--strict-commands"]) == 1
    assert "strict command policy cannot check" in capsys.readouterr().out
    assert (
        cli_main(["call", "bash", json.dumps({"command": "echo ok"}), *common, "--deny-command", "curl"]) == 0
    )
    assert capsys.readouterr().out.strip() == "ok"
