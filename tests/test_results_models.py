"""The public result and configuration types of codemode/_results.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest

from codemode._results import CallResult, HostConfig, RunError, RunResult, Usage, default_state_dir
from codemode.sandbox import SandboxMode
from codemode.state import MIN_LOG_CAP_BYTES, MIN_QUOTA_BYTES


def test_defaults_work_without_arguments() -> None:
    config = HostConfig()
    assert config.sandbox is SandboxMode.WORKSPACE_WRITE
    assert config.max_output_tokens <= config.max_output_tokens_limit
    assert config.log_cap_bytes >= MIN_LOG_CAP_BYTES and config.state_quota_bytes >= MIN_QUOTA_BYTES


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_output_tokens", 63),
        ("max_output_tokens_limit", 0),
        ("timeout_seconds", 0),
        ("max_timeout_seconds", -1),
        ("cpu_seconds", 0),
        ("memory_mb", 15),
        ("tool_concurrency", 0),
        ("tool_data_mb", 0),
        ("max_background_per_session", 0),
        ("log_cap_bytes", MIN_LOG_CAP_BYTES - 1),
        ("state_quota_bytes", MIN_QUOTA_BYTES - 1),
        ("sandbox", "wide-open"),
        ("memory_mb", "lots"),
    ],
)
def test_bad_values_are_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        HostConfig(**{field: value})
    errors = caught.value.errors()
    assert [e["loc"] for e in errors] == [(field,)]
    assert field in str(caught.value)


def test_an_unknown_option_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        HostConfig(max_tokens=100)  # type: ignore[call-arg]
    (error,) = caught.value.errors()
    assert error["type"] == "extra_forbidden" and error["loc"] == ("max_tokens",)


def test_the_config_is_frozen() -> None:
    config = HostConfig()
    with pytest.raises(pydantic.ValidationError):
        config.memory_mb = 1024  # type: ignore[misc]


def test_values_are_coerced_to_their_types(tmp_path: Path) -> None:
    config = HostConfig(
        workspace=str(tmp_path),  # type: ignore[arg-type]
        sandbox="read-only",  # type: ignore[arg-type]
        writable_roots=[str(tmp_path)],  # type: ignore[arg-type]
        handoff_seconds=None,
    )
    assert config.workspace == tmp_path
    assert config.sandbox is SandboxMode.READ_ONLY
    assert config.writable_roots == (tmp_path,)
    assert config.handoff_seconds is None


def test_default_state_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CODEMODE_HOME", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "explicit"
    assert HostConfig().state_dir == tmp_path / "explicit"
    monkeypatch.delenv("CODEMODE_HOME")
    assert default_state_dir() == tmp_path / "xdg" / "codemode"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir() == tmp_path / "home" / ".local" / "state" / "codemode"


def _usage() -> Usage:
    return Usage(
        output_tokens=12, max_output_tokens=100, printed_bytes=40, tool_calls=2, cpu_ms=1.5, wall_ms=3.25
    )


def test_run_result_round_trips_through_json() -> None:
    result = RunResult(
        call_id="c1",
        session_id="s1",
        ok=False,
        text="out\nUncaught TypeError: x (line 2:3)",
        truncated=True,
        refs=["A_1"],
        error=RunError(
            kind="uncaught", name="TypeError", message="x", line=2, column=3, stack="at <input>:2:3"
        ),
        cancelled_calls=["slow"],
        notices=["budget clamped"],
        usage=_usage(),
    )
    again = RunResult.model_validate_json(result.model_dump_json())
    assert again == result
    assert again.error is not None and again.error.line == 2


def test_run_result_defaults_and_required_fields() -> None:
    result = RunResult(call_id="c", session_id="s", ok=True, text="", usage=_usage())
    assert (result.truncated, result.refs, result.error, result.cancelled_calls, result.notices) == (
        False,
        [],
        None,
        [],
        [],
    )
    with pytest.raises(pydantic.ValidationError) as caught:
        RunResult(call_id="c", session_id="s", ok=True, text="")  # type: ignore[call-arg]
    assert [e["loc"] for e in caught.value.errors()] == [("usage",)]


def test_default_lists_are_not_shared() -> None:
    a = RunResult(call_id="a", session_id="s", ok=True, text="", usage=_usage())
    b = RunResult(call_id="b", session_id="s", ok=True, text="", usage=_usage())
    a.refs.append("A_x")
    assert b.refs == []


def test_call_result_round_trips_with_any_structured_content() -> None:
    result = CallResult(tool="t", text="hi", structured_content={"n": [1, 2.5, None, "x"]}, is_error=True)
    assert CallResult.model_validate_json(result.model_dump_json()) == result
    plain = CallResult(tool="t", text="hi")
    assert (plain.structured_content, plain.is_error, plain.truncated, plain.refs) == (None, False, False, [])
