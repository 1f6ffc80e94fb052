"""Black-box tests of the Host: options, budget cut + archive, replay, store, sync entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import codemode
from codemode import Extension, Host, UserError, make_tool
from tests.host_support import MakeHost, Probe, assert_healthy

pytestmark = pytest.mark.anyio


async def run(host: Host, source: str, **kwargs: Any) -> codemode.RunResult:
    with anyio.fail_after(60):
        return await host.run_code(source, **kwargs)


# -- the options header -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ('// @run_code: {"max_output_tokens": 100', "not valid JSON"),
        ('// @run_code: {"budget": 100}', "unknown option 'budget'"),
        ('// @run_code: {"timeout_seconds": -1}', "timeout_seconds must be a positive number"),
        (
            '// @run_code: {"max_output_tokens": "lots"}',
            "max_output_tokens must be an integer of at least 80",
        ),
        (
            '// @run_code: {"max_output_tokens": 20}',
            "at least 80 (room for the line naming the archived rest), got 20",
        ),
    ],
)
async def test_a_bad_header_is_a_clear_error_and_nothing_runs(
    host: Host, probe: Probe, header: str, expected: str
) -> None:
    result = await run(host, header + '\nawait tools.bump({}); print("ran")')
    assert not result.ok
    assert result.error is not None
    assert (result.error.kind, result.error.name) == ("options", "OptionsError")
    assert expected in result.text
    assert "nothing ran" in result.text
    assert "ran\n" not in result.text
    assert probe.bumps == 0
    await assert_healthy(host)


async def test_a_budget_above_the_host_limit_is_clamped_and_said(make_host: MakeHost) -> None:
    async with make_host(max_output_tokens=500, max_output_tokens_limit=1000) as (host, _probe):
        result = await run(host, '// @run_code: {"max_output_tokens": 999999}\nprint("hi")')
        assert result.ok, result.text
        assert result.usage.max_output_tokens == 1000
        assert result.text.startswith("hi\n")
        assert "max_output_tokens 999999 is above this host's limit; clamped to 1000" in result.text
        assert result.notices and "clamped to 1000" in result.notices[0]
        plain = await run(host, 'print("hi")')
        assert plain.usage.max_output_tokens == 500
        assert plain.text == "hi\n" and not plain.notices


async def test_a_timeout_above_the_host_limit_is_clamped_and_said(make_host: MakeHost) -> None:
    async with make_host(max_timeout_seconds=5) as (host, _probe):
        result = await run(host, '// @run_code: {"timeout_seconds": 100}\nprint("hi")')
        assert result.ok
        assert "timeout_seconds 100 is above this host's limit; clamped to 5" in result.text


# -- the budget cut and the archive -------------------------------------------------------


async def _read_all(host: Host, ref: str, limit: int) -> bytes:
    pages: list[bytes] = []
    offset = 0
    for _ in range(10_000):
        page = await host.call_tool("read_archive", {"ref": ref, "offset": offset, "limit": limit})
        assert not page.is_error, page.text
        data = page.structured_content
        assert data["offset"] == offset
        pages.append(data["text"].encode("utf-8"))
        offset = data["next_offset"]
        if data["eof"]:
            break
    else:  # pragma: no cover - the archive never said eof
        pytest.fail("read_archive never reached eof")
    return b"".join(pages)


@pytest.mark.parametrize("unit", ["line", "ünï😀日本"])
async def test_output_over_the_budget_is_archived_and_reads_back_exactly(
    make_host: MakeHost, unit: str
) -> None:
    async with make_host(max_output_tokens=400) as (host, _probe):
        source = f'for (let i = 0; i < 3000; i++) print({json.dumps(unit)} + " " + i);'
        expected = "".join(f"{unit} {i}\n" for i in range(3000))
        result = await run(host, source)
        assert result.ok, result.text
        assert result.truncated
        assert len(result.refs) == 1
        ref = result.refs[0]
        assert host.counter.count(result.text) <= 400
        assert result.usage.output_tokens <= 400
        assert result.usage.printed_bytes == len(expected.encode("utf-8"))
        lines = result.text.splitlines()
        assert lines[0] == f"{unit} 0"
        assert lines[-1] == f"{unit} 2999"
        notice = [line for line in lines if ref in line]
        assert len(notice) == 1 and "read_archive" in notice[0]
        assert await _read_all(host, ref, limit=1000) == expected.encode("utf-8")


async def test_an_error_after_a_long_output_still_shows_and_fits(make_host: MakeHost) -> None:
    async with make_host(max_output_tokens=300) as (host, _probe):
        result = await run(
            host, 'for (let i = 0; i < 2000; i++) print("row " + i);\nthrow new Error("late");'
        )
        assert not result.ok and result.truncated
        assert "Uncaught Error: late (line 2:" in result.text
        assert host.counter.count(result.text) <= 300


@pytest.mark.parametrize(
    "source",
    [
        'throw new Error("word ".repeat(100000))',
        'for (let i = 0; i < 1000; i++) print("row " + i);\nthrow new Error("abc ".repeat(200));',
    ],
)
async def test_a_long_error_message_also_fits_the_budget(make_host: MakeHost, source: str) -> None:
    async with make_host(max_output_tokens=300) as (host, _probe):
        result = await run(host, source)
        assert host.counter.count(result.text) <= 300
        assert result.error is not None and result.error.name == "Error"
        assert result.refs  # what was cut is archived, not dropped


async def test_output_under_the_budget_is_untouched(host: Host) -> None:
    result = await run(host, 'for (let i = 0; i < 50; i++) print("row " + i);')
    assert not result.truncated and result.refs == []
    assert result.text == "".join(f"row {i}\n" for i in range(50))


async def test_reading_an_unknown_ref_is_a_clear_error(host: Host) -> None:
    page = await host.call_tool("read_archive", {"ref": "ar_doesnotexist"})
    assert page.is_error
    assert "ar_doesnotexist" in page.text
    js = await run(
        host, 'try { await tools.read_archive({ref: "ar_nope"}) } catch (e) { print(e.name, e.tool) }'
    )
    assert js.text == "ToolError read_archive\n"


# -- replay ---------------------------------------------------------------------------------


async def test_the_same_call_id_replays_the_recorded_result_without_running(host: Host, probe: Probe) -> None:
    source = 'const n = await tools.bump({}); print("bumped", n); return {n};'
    first = await run(host, source, call_id="call-1")
    assert first.ok and probe.bumps == 1
    again = await run(host, source, call_id="call-1")
    assert probe.bumps == 1
    assert again == first
    other_source = await run(host, 'print("different")', call_id="call-1")
    assert other_source.error is not None and other_source.error.name == "CallIdReused"  # nothing ran
    assert "'call-1'" in other_source.text and probe.bumps == 1
    fresh = await run(host, source, call_id="call-2")
    assert probe.bumps == 2 and fresh.text.startswith("bumped 2")


async def test_a_failed_run_replays_too(host: Host, probe: Probe) -> None:
    first = await run(host, "await tools.bump({}); throw new Error('x')", call_id="failing")
    again = await run(host, "await tools.bump({}); throw new Error('x')", call_id="failing")
    assert not first.ok and again == first and probe.bumps == 1


async def test_a_call_id_from_another_session_does_not_replay_its_output(host: Host) -> None:
    await run(host, 'print("secret of session A")', session_id="A", call_id="1")
    other = await run(host, 'print("session B")', session_id="B", call_id="1")
    assert other.text == "session B\n"
    assert other.session_id == "B"
    replay_a = await run(host, 'print("secret of session A")', session_id="A", call_id="1")
    assert replay_a.text == "secret of session A\n"
    reused = await run(host, 'print("not run")', session_id="A", call_id="1")
    assert reused.error is not None and reused.error.name == "CallIdReused" and "not run" not in reused.text


async def test_two_concurrent_runs_with_one_call_id_run_once(host: Host, probe: Probe) -> None:
    results: list[codemode.RunResult] = []

    async def one() -> None:
        results.append(await host.run_code("await sleep(20); print(await tools.bump({}))", call_id="same"))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            tg.start_soon(one)
    assert probe.bumps == 1
    assert results[0] == results[1]


async def test_replay_survives_a_new_host_on_the_same_state_dir(make_host: MakeHost, tmp_path: Path) -> None:
    state = tmp_path / "shared-state"
    async with make_host(state_dir=state) as (host, probe):
        first = await run(host, "print(await tools.bump({}))", call_id="durable")
    async with make_host(state_dir=state) as (host2, probe2):
        again = await run(host2, "print(await tools.bump({}))", call_id="durable")
    assert again == first
    assert probe.bumps == 1 and probe2.bumps == 0


# -- store ----------------------------------------------------------------------------------


async def test_store_across_programs_of_one_session_and_isolated_between_sessions(host: Host) -> None:
    first = await run(
        host,
        'await store.set("handle", {pid: "p_1", tags: ["a"]}); await store.set("n", 3); '
        'await store.set("nothing", null); print("saved")',
        session_id="s1",
    )
    assert first.ok, first.text
    second = await run(
        host,
        'const h = await store.get("handle"); print(h.pid, h.tags[0], await store.get("n"), '
        'await store.get("nothing"), await store.get("missing")); '
        "print(JSON.stringify((await store.keys()).sort())); "
        'print(await store.delete("n"), await store.delete("n")); print(JSON.stringify((await store.keys()).sort()))',
        session_id="s1",
    )
    assert second.ok, second.text
    assert second.text.splitlines() == [
        "p_1 a 3 null null",
        '["handle","n","nothing"]',
        "true false",
        '["handle","nothing"]',
    ]
    other = await run(
        host, 'print(await store.get("handle"), JSON.stringify(await store.keys()))', session_id="s2"
    )
    assert other.text == "null []\n"


async def test_store_limits_and_non_json_values_are_clear_errors(host: Host) -> None:
    source = """
for (const attempt of [
  () => store.set("big", "x".repeat(2 * 1024 * 1024)),
  () => store.set("", 1),
  () => store.set("f", () => 1),
  () => store.set("c", (() => { const a = {}; a.a = a; return a; })()),
]) {
  try { await attempt(); print("stored"); } catch (e) { print(e.name + ": " + e.message); }
}
for (const attempt of [() => store.get(), () => store.set(1, 2), () => store.delete({}), () => describeTool(7)]) {
  try { await attempt(); print("accepted"); } catch (e) { print(e.name + ": " + e.message); }
}
print(JSON.stringify(await store.keys()));
"""
    result = await run(host, source)
    assert result.ok, result.text
    lines = result.text.splitlines()
    assert lines[0].startswith("ToolError: ") and "1 MiB" in lines[0] and "split it" in lines[0]
    assert lines[1].startswith("ToolError: ") and "1 to 256 characters" in lines[1]
    assert lines[2].startswith("TypeError: ") and "value is a function" in lines[2]
    assert lines[3].startswith("TypeError: ") and "cycle" in lines[3]
    assert lines[4:8] == [
        "TypeError: store.get: the key must be a string, got undefined",
        "TypeError: store.set: the key must be a string, got 1",
        "TypeError: store.delete: the key must be a string, got object",
        "TypeError: describeTool: the tool name must be a string, got 7",
    ]
    assert lines[8] == "[]"
    await assert_healthy(host)


async def test_store_persists_across_hosts(make_host: MakeHost, tmp_path: Path) -> None:
    state = tmp_path / "persist"
    async with make_host(state_dir=state) as (host, _probe):
        await run(host, 'await store.set("k", {v: "é😀"})', session_id="keep")
    async with make_host(state_dir=state) as (host2, _probe2):
        result = await run(host2, 'print((await store.get("k")).v)', session_id="keep")
    assert result.text == "é😀\n"


# -- tools, search, description -------------------------------------------------------------


async def test_search_tools_ranks_by_name_description_and_parameters(host: Host) -> None:
    assert host.search_tools("shout")[0]["name"] == "shout"
    assert host.search_tools("upper case")[0]["name"] == "shout"
    assert host.search_tools("read file")[0]["name"] == "read_file"
    assert len(host.search_tools("", limit=3)) == 3
    assert host.search_tools("zzzqqq") == []


async def test_describe_tool_gives_schema_and_signature(host: Host) -> None:
    described = host.describe_tool("nap")
    assert described["name"] == "nap"
    assert described["input_schema"]["properties"]["ms"]["type"] == "integer"
    assert described["signature"] == "tools.nap(args: { ms: number }): Promise<number>"
    with pytest.raises(codemode.ToolError, match="searchTools"):
        host.describe_tool("napp")


async def test_direct_calls_report_unknown_tools_and_bad_arguments(host: Host) -> None:
    unknown = await host.call_tool("shuot", {"text": "x"})
    assert unknown.is_error and "shout" in unknown.text and "searchTools" in unknown.text
    bad = await host.call_tool("shout", {"text": 3})
    assert bad.is_error and "$.text" in bad.text
    assert bad.structured_content["path"] == "$.text"
    crash = await host.call_tool("crash", {"message": "kaput"})
    assert crash.is_error and "RuntimeError: kaput" in crash.text and "Traceback" not in crash.text
    ok = await host.call_tool("echo", {"value": [1, "é"]})
    assert not ok.is_error and ok.structured_content == {"value": [1, "é"]}


async def test_run_code_description_lists_api_tools_and_extension_guidance(host: Host) -> None:
    @make_tool
    def ping() -> str:
        """Answer pong."""
        return "pong"

    host.add_extension(Extension("pinger", [ping], guidance="PINGER GUIDANCE: call ping first."))
    text = host.run_code_description()
    for needle in ("tools.NAME(args)", "searchTools", "store.get", "// @run_code:", "read_archive"):
        assert needle in text
    assert "- tools.shout" in text and "- tools.ping" in text and "Answer pong." in text  # a line each
    assert host.describe_tool("shout")["signature"] == "tools.shout(args: { text: string }): Promise<string>"
    assert "PINGER GUIDANCE" in text  # short guidance is inlined
    host.disable_extension("pinger")
    text = host.run_code_description()
    assert "PINGER GUIDANCE" not in text and "tools.ping" not in text
    result = await run(host, "await tools.ping({})")
    assert result.error is not None and "Unknown tool 'ping'" in result.error.message
    host.enable_extension("pinger")
    assert "PINGER GUIDANCE" in host.run_code_description()
    assert (await run(host, "print(await tools.ping())")).text == "pong\n"


async def test_five_thousand_tools_are_listed_by_group_within_two_thousand_tokens(
    make_host: MakeHost,
) -> None:
    async with make_host() as (host, _probe):
        for i in range(5000):
            host.add_tool(
                lambda: "x", name=f"svc{i // 10}_item_{i}", description=f"Item {i} of service {i // 10}."
            )
        text = host.run_code_description()
        if host.counter.exact:
            assert host.counter.count(text) < 2000
        else:  # offline the byte counter only bounds it from above; the listing is what grows
            assert len(text.encode()) < 8000
        assert f"{len(host.registry)} tools in " in text and "svc0 (10)" in text and "more groups" in text
        assert "searchTools(query)" in text and "svc499_item_4999" not in text
        found = host.search_tools("service 499 item 4999")
        assert found[0]["name"] == "svc499_item_4999"


async def test_many_tools_are_listed_by_name_with_a_pointer_to_search(make_host: MakeHost) -> None:
    async with make_host(builtin_tools=False) as (host, _probe):
        for i in range(40):
            host.add_tool(lambda: "x", name=f"extra_{i}", description=f"Extra tool {i}.")
        text = host.run_code_description()  # past a few dozen: groups and counts
        assert f"{len(host.registry)} tools in " in text and "extra (40)" in text
        assert "searchTools(query)" in text and "extra_39" not in text
        for i in range(25):
            host.registry.remove(f"extra_{i}")
        text = host.run_code_description()  # a few: one line each
        assert "- tools.extra_39: Extra tool 39." in text


# -- the sync entry point -------------------------------------------------------------------


async def test_sync_run_code_refuses_inside_a_running_loop(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="running event loop"):
        codemode.run_code("print(1)", workspace=tmp_path / "ws", state_dir=tmp_path / "state")


def test_sync_run_code_works_outside_a_loop(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    result = codemode.run_code(
        'await store.set("k", 1); print("sum", [1, 2, 3].reduce((a, b) => a + b))',
        workspace=tmp_path / "ws",
        state_dir=tmp_path / "state",
        session_id="sync",
    )
    assert result.ok, result.text
    assert result.text == "sum 6\n"
    assert result.session_id == "sync"


# -- review fixes: redacted errors, small budgets, reopen, bad run options -------------------


async def test_error_details_are_redacted_like_the_text(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-value-for-the-test-9f8e7d"
    monkeypatch.setenv("MY_API_TOKEN", secret)
    async with make_host() as (host, _probe):
        result = await run(host, f'throw new Error("leaked: {secret}")')
        assert not result.ok and result.error is not None
        assert secret not in result.text
        assert secret not in result.error.message and secret not in result.error.stack
        assert secret not in result.model_dump_json()


@pytest.mark.parametrize("budget", [256, 300])
async def test_a_long_error_after_output_fits_a_small_budget(make_host: MakeHost, budget: int) -> None:
    async with make_host() as (host, _probe):
        source = 'for (let i = 0; i < 500; i++) print("row " + i);\nthrow new Error("why ".repeat(400));'
        result = await run(host, source, max_output_tokens=budget)
        assert host.counter.count(result.text) <= budget
        assert result.refs  # what did not fit is archived, not dropped
        assert "Uncaught Error" in result.text


async def test_a_closed_host_opens_again_and_runs(make_host: MakeHost) -> None:
    async with make_host() as (host, _probe):
        assert (await run(host, "print(1)")).text == "1\n"
        await host.aclose()
        await host.open()
        assert (await run(host, "print(2)")).text == "2\n"


@pytest.mark.parametrize("timeout", [float("nan"), -1.0, 0.0, float("inf")])
async def test_bad_run_options_are_the_developers_mistake(host: Host, timeout: float) -> None:
    with pytest.raises(UserError, match="timeout_seconds"):
        await host.run_code("print(1)", timeout_seconds=timeout)


# -- honest numbers ------------------------------------------------------------------------


async def test_output_tokens_counts_what_the_model_receives(host: Host) -> None:
    result = await run(host, 'print("hello world, hello world, hello world")')
    assert result.ok
    assert result.usage.output_tokens == host.counter.count(result.text)
    if host.counter.exact:  # o200k_base: a few tokens, not the 42 bytes
        assert result.usage.output_tokens < result.usage.printed_bytes


async def test_a_budget_below_the_minimum_is_an_error_naming_it(host: Host, probe: Probe) -> None:
    result = await run(host, 'await tools.bump({}); print("ran")', max_output_tokens=50)
    assert result.error is not None and result.error.kind == "options"
    assert "max_output_tokens must be at least 80" in result.text and "got 50; nothing ran" in result.text
    assert probe.bumps == 0
    called = await host.call_tool("bump", {}, max_output_tokens=10)
    assert called.is_error and "must be at least 80" in called.text and "nothing ran" in called.text
    assert probe.bumps == 0
