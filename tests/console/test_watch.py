"""What the console keeps of runs (`RunWatcher`), fed the host's spans in-process."""

from __future__ import annotations

import pytest

from codemode._trace import Trace, current
from codemode.console._watch import RunWatcher

Event = tuple[str, object, "str | None"]


def _watcher(events: list[Event]) -> RunWatcher:
    return RunWatcher(
        lambda name, data, tenant: events.append((name, data, tenant)), lambda s: "t", str.upper
    )


def _run(watcher: RunWatcher, session: str, source: str, calls: int = 1) -> None:
    trace = Trace(None, watcher=watcher)
    with trace.span("execute_tool run_code", {}) as program:
        inner = current()
        assert inner is not None
        inner.describe(session_id=session, call_id=None, source=source)
        for i in range(calls):
            with inner.span(
                "execute_tool bash", {"gen_ai.tool.name": "bash"}, {"args": {"command": f"c{i}"}}
            ):
                pass
        program.set_attributes({"codemode.limits.max_output_tokens": 100})


def test_a_run_its_calls_and_their_events_are_kept_in_order() -> None:
    events: list[Event] = []
    watcher = _watcher(events)
    _run(watcher, "s1", "print(1)", calls=2)
    (run,) = watcher.runs("s1")
    detail = run.detail()
    assert detail["status"] == "ok" and detail["source"] == "print(1)"
    calls = detail["calls"]
    assert isinstance(calls, list) and [c["args"] for c in calls] == [
        '{"COMMAND": "C0"}',
        '{"COMMAND": "C1"}',
    ]
    assert [name for name, _, _ in events] == ["run", "call", "call", "call", "call", "run"]
    assert all(tenant == "t" for _, _, tenant in events)


def test_kept_text_stays_within_its_budget_the_oldest_going_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("codemode.console._watch._BYTES_KEPT", 10_000)
    watcher = _watcher([])
    for i in range(30):
        _run(watcher, f"s{i % 3}", f"// {i}\n" + "x" * 1000)
    kept = [run for s in ("s0", "s1", "s2") for run in watcher.runs(s)]
    assert 5 <= len(kept) <= 10 and sum(run.size for run in kept) <= 10_000
    assert "// 29" in watcher.runs("s2")[0].source  # the newest stays
    assert all("// 0\n" not in run.source for run in kept)  # the oldest went
