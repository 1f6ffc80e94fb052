"""What a session leaves on one machine crosses to another through the shared database, and
only to its own session.

Two hosts on two state directories share one PostgreSQL database, as two replicas do. A
session's archived output and its command's log are read from the other machine by the same
session; another session asking for the same reference is told exactly what it would be told
of a reference that never existed; and a command's log (stored raw on its machine) reaches the
shared database with the secrets in it masked. The same holds for a background process: the
other machine tells its own session where it runs, and a stranger nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import pytest

from codemode import Host

pytestmark = pytest.mark.anyio

SECRET = "ghp_" + "M3n7B1v5C9x2Z6l0K4j8H2g6F1d5S9a3P7o1"


@asynccontextmanager
async def _machine(tmp_path: Path, name: str, database_url: str) -> AsyncIterator[Host]:
    workspace = tmp_path / f"ws-{name}"
    workspace.mkdir()
    async with Host(
        workspace=workspace, state_dir=tmp_path / f"state-{name}", database_url=database_url
    ) as host:
        yield host


async def _read(host: Host, session: str, ref: str) -> tuple[bool, str]:
    page = await host.call_tool("read_archive", {"ref": ref, "limit": 1_000_000}, session_id=session)
    return page.is_error, page.text


async def test_another_session_on_another_machine_cannot_tell_a_ref_exists(
    tmp_path: Path, database_url: str
) -> None:
    async with (
        _machine(tmp_path, "a", database_url) as a,
        _machine(tmp_path, "b", database_url) as b,
    ):
        printed = await a.run_code(
            'for (let i = 0; i < 3000; i++) print("row " + i);', session_id="alice", max_output_tokens=200
        )
        assert printed.truncated and printed.refs, printed.text
        ran = await a.run_code(
            "const r = await tools.bash({command: "
            + json.dumps(f"echo token={SECRET}; seq 1 40000")
            + "}); print(r.log.ref)",
            session_id="alice",
        )
        assert ran.ok, ran.text
        log_ref = ran.text.strip()
        assert a.archive.flush_copies()
        for ref, starts in ((printed.refs[0], "row 0\nrow 1\n"), (log_ref, "token=[REDACTED")):
            failed, text = await _read(b, "alice", ref)
            assert not failed and starts in text, text
            assert SECRET not in text
            stranger = await _read(b, "mallory", ref)
            never = await _read(b, "mallory", "ar_" + "Z" * 20)
            assert stranger[0] and stranger[1].replace(ref, "REF") == never[1].replace(
                "ar_" + "Z" * 20, "REF"
            )
        with psycopg.connect(database_url) as conn:
            rows = conn.execute("SELECT head, tail FROM shared_archive").fetchall()
        assert rows and all(SECRET.encode() not in bytes(head) + bytes(tail) for head, tail in rows)


async def test_another_session_on_another_machine_cannot_tell_a_process_exists(
    tmp_path: Path, database_url: str
) -> None:
    async with (
        _machine(tmp_path, "a", database_url) as a,
        _machine(tmp_path, "b", database_url) as b,
    ):
        started = await a.run_code(
            'const p = await tools.bash({command: "sleep 30", run_in_background: true}); print(p.process_id)',
            session_id="alice",
        )
        process_id = started.text.strip()
        a.held.beat()
        a.held.publish()
        ask = 'try {{ await tools.bash({{action: "read", process_id: "{}"}}) }} catch (e) {{ print(e.message) }}'
        own = await b.run_code(ask.format(process_id), session_id="alice")
        assert "runs on another machine" in own.text, own.text
        stranger = await b.run_code(ask.format(process_id), session_id="mallory")
        never = await b.run_code(ask.format("p_000000000000"), session_id="mallory")
        assert stranger.text.replace(process_id, "P") == never.text.replace("p_000000000000", "P")
        await a.run_code(
            f'await tools.bash({{action: "stop", process_id: "{process_id}"}})', session_id="alice"
        )
