"""`build_result`: the text blocks the model reads and the envelope clients keep, for one run."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from codemode.sandbox import SandboxMode, SandboxPolicy
from codemode.state import ArchiveRef, Redactor
from codemode.tools._capture import Excerpt, StreamCapture
from codemode.tools.bash._shape import build_result


def _excerpt(data: bytes, *, head: int = 16384, tail: int = 16384) -> Excerpt:
    capture = StreamCapture(head_bytes=head, tail_bytes=tail)
    capture.feed(data)
    return capture.excerpt()


@pytest.fixture
def policy(tmp_path: Path) -> SandboxPolicy:
    return SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, writable_roots=(tmp_path,), temp_dir=tmp_path)


def _build(policy: SandboxPolicy, tmp_path: Path, **overrides: Any) -> tuple[list[str], dict[str, Any]]:
    args: dict[str, Any] = {
        "command": "cmd",
        "cwd": tmp_path,
        "policy": policy,
        "redactor": Redactor({}),
        "stdout": _excerpt(b""),
        "stderr": _excerpt(b""),
        "exit_code": 0,
        "signal_name": None,
        "timed_out": False,
        "timeout_seconds": 120,
        "duration_ms": 5,
        "log": None,
        "log_ref": None,
        "classification": None,
        "revision": None,
        "purpose": None,
        "scope": None,
    }
    args.update(overrides)
    return build_result(**args)


def test_stdout_and_stderr_are_separate_blocks_and_a_clean_exit_adds_no_status(
    policy: SandboxPolicy, tmp_path: Path
) -> None:
    blocks, data = _build(
        policy,
        tmp_path,
        stdout=_excerpt(b"out line\n"),
        stderr=_excerpt(b"err line\n"),
        purpose="p",
        scope="s",
    )
    assert blocks == ["out line", "err line"]
    assert data["exit_code"] == 0
    assert data["stdout"] == {"excerpt": "out line\n", "bytes": 9, "truncated": False}
    assert data["stderr"] == {"excerpt": "err line\n", "bytes": 9, "truncated": False}
    assert (data["purpose"], data["scope"], data["cwd"]) == ("p", "s", str(tmp_path))
    assert "signal" not in data and "cancelled" not in data and "promoted_process_id" not in data


def test_nothing_printed_and_exit_zero_is_no_blocks_and_the_empty_log(
    policy: SandboxPolicy, tmp_path: Path
) -> None:
    blocks, data = _build(policy, tmp_path)
    assert blocks == []
    assert data["log"] == {"ref": None, "sha256": hashlib.sha256(b"").hexdigest(), "bytes": 0}


def test_a_failed_exit_and_a_signal_are_said_once_after_the_output(
    policy: SandboxPolicy, tmp_path: Path
) -> None:
    blocks, data = _build(policy, tmp_path, stdout=_excerpt(b"x\n"), exit_code=3)
    assert blocks == ["x", "Exit code 3"]
    blocks, data = _build(policy, tmp_path, exit_code=137, signal_name="SIGKILL")
    assert blocks == ["Exit code 137 (killed by SIGKILL)"]
    assert data["signal"] == "SIGKILL"
    blocks, data = _build(policy, tmp_path, exit_code=None)
    assert blocks == ["Exit code unknown"]
    assert data["exit_code"] is None


def test_timeout_and_cancel_say_the_tree_was_stopped(policy: SandboxPolicy, tmp_path: Path) -> None:
    blocks, data = _build(policy, tmp_path, exit_code=None, timed_out=True, timeout_seconds=7)
    assert len(blocks) == 1 and blocks[0].startswith("Timed out after 7 s")
    assert "run_in_background" in blocks[0]
    assert data["timed_out"] is True
    blocks, data = _build(policy, tmp_path, exit_code=None, cancelled=True)
    assert blocks == ["Cancelled: the command and every process it started were stopped."]
    assert data["cancelled"] is True


def test_cut_output_names_the_full_log(policy: SandboxPolicy, tmp_path: Path) -> None:
    big = b"".join(b"line %05d\n" % i for i in range(5000))
    stdout = _excerpt(big, head=200, tail=200)
    assert stdout.truncated
    blocks, data = _build(policy, tmp_path, stdout=stdout, log_ref="A_ref123")
    assert blocks[0].startswith("line 00000") and blocks[0].rstrip().endswith("line 04999")
    assert "Output was cut; the full log:" in blocks[-1] and "A_ref123" in blocks[-1]
    assert data["stdout"]["truncated"] is True and data["stdout"]["bytes"] == len(big)
    assert data["log"] == {"ref": "A_ref123", "sha256": None, "bytes": None}


def test_a_log_past_its_cap_says_which_bytes_were_dropped(policy: SandboxPolicy, tmp_path: Path) -> None:
    stdout = _excerpt(b"y" * 100_000, head=100, tail=100)
    log = ArchiveRef("A_log", total_bytes=3_000_000, sha256="ab" * 32, dropped=(1_000_000, 2_000_000))
    blocks, data = _build(policy, tmp_path, stdout=stdout, log=log, log_ref="A_log")
    assert "kept 2,000,000 of 3,000,000 bytes (bytes 1,000,000 to 2,000,000 were dropped)" in blocks[-1]
    assert data["log"] == {
        "ref": "A_log",
        "sha256": "ab" * 32,
        "bytes": 3_000_000,
        "kept_bytes": 2_000_000,
        "dropped": {"from": 1_000_000, "to": 2_000_000},
    }


def test_output_that_was_not_cut_does_not_mention_the_log(policy: SandboxPolicy, tmp_path: Path) -> None:
    blocks, _ = _build(policy, tmp_path, stdout=_excerpt(b"short\n"), exit_code=1, log_ref="A_ref")
    assert blocks == ["short", "Exit code 1"]


def test_both_the_text_and_the_envelope_are_redacted(policy: SandboxPolicy, tmp_path: Path) -> None:
    secret = "s3cr3t-value-xyz"
    redactor = Redactor({"MY_API_KEY": secret})
    blocks, data = _build(
        policy,
        tmp_path,
        redactor=redactor,
        stdout=_excerpt(f"key={secret}\n".encode()),
        stderr=_excerpt(f"err {secret}\n".encode()),
    )
    assert secret not in "\n".join(blocks)
    assert secret not in data["stdout"]["excerpt"] and secret not in data["stderr"]["excerpt"]
    assert "[REDACTED:env:MY_API_KEY]" in blocks[0]


def test_a_promoted_run_says_how_to_read_and_stop_it(policy: SandboxPolicy, tmp_path: Path) -> None:
    blocks, data = _build(
        policy,
        tmp_path,
        stdout=_excerpt(b"partial\n"),
        exit_code=None,
        duration_ms=10_000,
        promoted_process_id="p_abc",
        next_offset=8,
    )
    assert blocks[0] == "partial"
    assert "moved to the background as process p_abc" in blocks[1]
    assert "offset_bytes: 8" in blocks[1] and 'action: "stop", process_id: "p_abc"' in blocks[1]
    assert data["exit_code"] == -1
    assert (data["promoted_process_id"], data["next_offset"]) == ("p_abc", 8)
