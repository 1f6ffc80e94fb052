"""The stores sessions share, on both backends: the state directory's SQLite, and a shared
PostgreSQL database that two hosts with state directories of their own (two machines) use at
once. Store values, run records, sessions, approvals, operators' actions, learned types, held
sessions and their resume secrets; what one host writes the other reads."""

from __future__ import annotations

import threading

import pytest

from codemode.errors import ToolError
from codemode.state import JournalEntry, OperatorAction, State
from codemode.state import session_holds as holds
from tests.state.conftest import MakeState


def test_store_values_are_shared_and_bounded(make_state: MakeState) -> None:
    here = make_state("a")
    there = make_state("b") if here.is_shared else here
    here.values.set("s1", "k", '{"n": 1}')
    here.values.set("s1", "k", '{"n": 2}')  # replaced
    here.values.set("s1", "é", '"x"')
    here.values.set("s2", "k", "3")
    assert there.values.get("s1", "k") == '{"n": 2}'
    assert there.values.keys("s1") == ["k", "é"]
    assert there.values.delete("s1", "é") and not there.values.delete("s1", "é")
    assert here.values.keys("s1") == ["k"] and here.values.get("s2", "k") == "3"
    # The per-session total counts keys' UTF-8 bytes too, on both databases: 15 values of
    # 1 MiB - 1 byte and one more fit in 16 MiB by 16 bytes, but not with their keys' bytes.
    value = '"' + "x" * (1024 * 1024 - 3) + '"'
    for n in range(15):
        here.values.set("full", f"k{n}", value)
    with pytest.raises(ToolError, match="store is full for this session"):
        there.values.set("full", "ключ", value)
    assert here.values.get("s1", "k") == '{"n": 2}'  # a refused write changed nothing else


def test_run_records_and_sessions(make_state: MakeState) -> None:
    here = make_state("a")
    there = make_state("b") if here.is_shared else here
    assert not there.has_session("s1")
    here.runs.record("s1", "call-1", '{"text": "first"}', "abc")
    here.runs.record("s1", "call-1", '{"text": "second"}', "def")  # the first record wins
    record = there.runs.get("s1", "call-1")
    assert record is not None and record.result_json == '{"text": "first"}' and record.source_sha256 == "abc"
    assert there.has_session("s1") and there.runs.get("s1", "call-2") is None
    here.runs.note_session("s2")
    here.runs.note_session("s2")
    assert there.has_session("s2")
    assert there.runs.expire(before=float("inf")) == 1
    assert here.runs.get("s1", "call-1") is None


def test_approvals_operators_and_learned_types(make_state: MakeState) -> None:
    here = make_state("a")
    there = make_state("b") if here.is_shared else here
    for verdict in ("pending", "allow"):  # the decision replaces the request's row
        here.approvals.record(
            request_id="r1",
            session_id="s1",
            kind="command",
            tool="bash",
            summary="rm -rf build",
            arguments_json='{"command": "rm -rf build"}',
            rule="ask",
            verdict=verdict,
            reason=None,
        )
    (row,) = there.approvals.for_session("s1")
    assert (row["id"], row["verdict"], row["tool"], row["reason"]) == ("r1", "allow", "bash", None)
    for n in range(3):
        here.operators.record(
            OperatorAction(float(n), "alice" if n else "bob", "s1", "stop", f"p{n}", "x" * 3000)
        )
    recent = there.operators.recent(10)
    assert [a.target for a in recent] == ["p2", "p1", "p0"] and len(recent[0].detail) == 2000
    assert [a.target for a in there.operators.recent(10, tenant="bob")] == ["p0"]
    here.learned.put("github", "search", {"type": "object"})
    here.learned.put("github", "search", {"type": "array"})
    assert there.learned.for_server("github") == {"search": {"type": "array"}}


def test_held_sessions_and_resume_secrets(make_state: MakeState) -> None:
    here = make_state("a")
    there = make_state("b") if here.is_shared else here
    with here.shared.connection() as mine, there.shared.connection() as theirs:
        holds.hold(mine, "mcp-a", "1t1@elsewhere", "alice", "client")
        secret = holds.issue_resume(mine, "mcp-a", "alice")
        assert holds.resume_target(theirs, secret, "alice") == ("mcp-a", True)
        assert holds.resume_target(theirs, secret, "bob") is None
        assert [h.session_id for h in holds.open_holds(theirs, 10)] == ["mcp-a"]
        # Only its holder ends a hold: a front whose session moved to another leaves it held.
        holds.hold(theirs, "mcp-a", "2t2@there", "alice", "client")
        assert not holds.end(mine, "mcp-a", "1t1@elsewhere", "expired")
        assert holds.held_by(mine, "2t2@there") == {"mcp-a"} and holds.held_by(mine, "1t1@elsewhere") == set()
        assert holds.end(theirs, "mcp-a", "2t2@there", "closed")
        assert not holds.end(mine, "mcp-a", "2t2@there", "expired")  # the first end recorded wins
        ended = holds.ending(mine, "mcp-a")
        assert ended is not None and ended.reason == "closed" and ended.holder_pid == 2
        assert holds.resume_target(mine, secret, "alice") == ("mcp-a", False)
        assert holds.expire(theirs, before=float("inf")) == 1
        assert holds.resume_target(mine, secret, "alice") is None


def test_journal_writers_on_two_hosts_never_share_a_seq(make_state: MakeState) -> None:
    """Writes of two hosts at once are serialised (SQLite's write lock, PostgreSQL's advisory
    lock): every write gets its own ``seq``, so a console polling by ``seq`` misses none."""
    here = make_state("a")
    there = make_state("b") if here.is_shared else make_state("a")

    def write(state: State, front: str) -> None:
        journal = state.journal
        for n in range(20):
            summary: dict[str, object] = {"n": n}
            journal.write(
                front, [JournalEntry(f"s-{front}", f"r{n}", None, float(n), "ok", summary, summary)]
            )

    threads = [threading.Thread(target=write, args=(s, f)) for s, f in ((here, "one"), (there, "two"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    changes = here.journal.changes(0, limit=100)
    assert len(changes) == 40 and len({c.seq for c in changes}) == 40
    assert here.journal.counts(["s-one", "s-two", "s-none"]) == {"s-one": (20, 19.0), "s-two": (20, 19.0)}
