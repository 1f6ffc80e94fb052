"""What the model reads (text) and what clients keep (structured) for a finished or handed-off run."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from codemode.budget import read_archive_call
from codemode.state import ArchiveRef, Redactor
from codemode.tools._capture import Excerpt, shape_output
from codemode.tools._verification import Classification, StreamScan, failure_summary, parse_verification

if TYPE_CHECKING:
    from codemode.sandbox import SandboxPolicy
    from codemode.tools.bash._env import RevisionData

_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class StreamData(TypedDict):
    """One output stream of a run (`_results.Stream`)."""

    excerpt: str
    bytes: int
    truncated: bool


def _stream(excerpt: Excerpt, text: str) -> StreamData:
    return {"excerpt": text, "bytes": excerpt.total_bytes, "truncated": excerpt.truncated}


def build_result(
    *,
    command: str,
    cwd: Path,
    policy: SandboxPolicy,
    redactor: Redactor,
    stdout: Excerpt,
    stderr: Excerpt,
    exit_code: int | None,
    signal_name: str | None,
    timed_out: bool,
    timeout_seconds: int,
    duration_ms: int,
    log: ArchiveRef | None,
    log_ref: str | None,
    classification: Classification | None,
    revision: RevisionData | None,
    purpose: str | None,
    scope: str | None,
    promoted_process_id: str | None = None,
    next_offset: int | None = None,
    cancelled: bool = False,
    scan: StreamScan | None = None,
    limit_notes: tuple[str, ...] = (),
) -> tuple[list[str], dict[str, object]]:
    """Shape one foreground run into the model's text and the structured envelope.

    The text comes in blocks: the terminal view (stdout, then stderr, each cleaned, head and
    tail), then the status lines, only where they change the next step. A budget cut keeps
    each block's head and tail. Both are redacted.

    Returns:
        ``(text blocks, structured_content)``.
    """
    # One result: a value found by its context in one block is cut in the others too.
    known: dict[bytes, bytes] = {}
    out_text, err_text = redactor.redact_together([stdout.text, stderr.text], known)
    cut = stdout.truncated or stderr.truncated
    lines: list[str] = []

    verification = None
    if classification is not None and promoted_process_id is None:
        verification = parse_verification(classification, f"{stdout.text}\n{stderr.text}", exit_code, scan)

    if promoted_process_id is not None:
        lines.append(
            f"Still running after {duration_ms / 1000:.0f} s, so it was moved to the background as process "
            f"{promoted_process_id} (same process, output kept). Read more with "
            f'bash({{action: "read", process_id: "{promoted_process_id}", offset_bytes: {next_offset or 0}, '
            f'wait_ms: 10000}}); stop it with bash({{action: "stop", process_id: "{promoted_process_id}"}}).'
        )
    elif timed_out:
        lines.append(
            f"Timed out after {timeout_seconds} s: the command and every process it started were stopped. "
            "Raise timeout_seconds (max 3600) or use run_in_background for long commands."
        )
    elif cancelled:
        lines.append("Cancelled: the command and every process it started were stopped.")
    elif exit_code is None:
        lines.append("Exit code unknown")
    elif exit_code != 0:
        suffix = f" (killed by {signal_name})" if signal_name else ""
        lines.append(f"Exit code {exit_code}{suffix}")
    if cut:
        if verification is not None:
            summary = failure_summary(verification)
            if summary:
                lines.append(redactor.redact(summary, known))
        if log is not None and log.dropped is not None:
            start, end = log.dropped
            lines.append(
                f"Output was cut; the log outgrew its cap and kept {log.kept_bytes:,} of {log.total_bytes:,} "
                f"bytes (bytes {start:,} to {end:,} were dropped): {read_archive_call(log.ref, 0)}"
            )
        elif log_ref is not None:
            lines.append(f"Output was cut; the full log: {read_archive_call(log_ref, 0)}")
    from codemode.sandbox import explain_denial  # loads with the first command's result

    denial = explain_denial(f"{stdout.text}\n{stderr.text}", policy, cwd, exit_code=exit_code)
    if denial:
        lines.append(denial)
    lines.extend(limit_notes)  # a limit the command ran into (pids, a full $TMPDIR)
    blocks = shape_output(out_text, err_text)
    if lines:
        blocks.append("\n".join(lines))

    structured: dict[str, object] = {
        "exit_code": -1 if promoted_process_id is not None else exit_code,
        "timed_out": timed_out,
        "duration_ms": duration_ms,
        "stdout": _stream(stdout, out_text),
        "stderr": _stream(stderr, err_text),
        "classification": None if classification is None else classification.to_dict(),
        "verification": None if verification is None else verification.to_dict(),
        "workspace_revision": revision,
        "log": (
            {
                "ref": log.ref,
                "sha256": log.sha256,
                "bytes": log.total_bytes,
                "kept_bytes": log.kept_bytes,
                "dropped": None if log.dropped is None else {"from": log.dropped[0], "to": log.dropped[1]},
            }
            if log is not None
            else {
                "ref": log_ref,
                "sha256": None if log_ref else _EMPTY_SHA256,
                "bytes": None if log_ref else 0,
            }
        ),
        "cwd": str(cwd),
        "purpose": purpose,
        "scope": scope,
    }
    if signal_name:
        structured["signal"] = signal_name
    if cancelled:
        structured["cancelled"] = True
    if limit_notes:
        structured["limits_hit"] = list(limit_notes)
    if promoted_process_id is not None:
        structured["promoted_process_id"] = promoted_process_id
        structured["next_offset"] = next_offset
    return blocks, structured
