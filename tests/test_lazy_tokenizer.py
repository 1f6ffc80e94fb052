"""A host opened without preload_tokenizer (the CLI's one-shot commands, the one-shot
``codemode.run_code()``) loads the tokenizer only for an output near its budget.

Each case runs in a fresh interpreter: the tokenizer, once loaded, stays for the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import json, sys
import codemode
from codemode.budget import TokenCounter

source, budget = sys.argv[1], int(sys.argv[2])
options = {"workspace": sys.argv[3], "state_dir": sys.argv[4], "max_output_tokens": budget}
if sys.argv[5] != "default":
    options["preload_tokenizer"] = sys.argv[5] == "on"
result = codemode.run_code(source, **options)
counter = TokenCounter()
print(json.dumps({"text": result.text, "tokens": result.usage.output_tokens, "loaded": counter.loaded,
                  "exact": counter.exact, "why": counter.fallback_reason}))
"""


def run_child(tmp_path: Path, source: str, budget: int, preload: str) -> dict[str, object]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, source, str(budget), str(workspace), str(tmp_path / "state"), preload],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
        timeout=120,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_one_shot_small_output_counts_bytes_without_the_tokenizer(tmp_path: Path) -> None:
    out = run_child(tmp_path, "print('hello world')", 10_000, "default")
    assert {k: out[k] for k in ("text", "tokens", "loaded")} == {
        "text": "hello world\n",
        "tokens": len("hello world\n"),
        "loaded": False,
    }


def test_output_near_the_budget_is_counted_exactly(tmp_path: Path) -> None:
    # 2,000 words: 12,000 bytes, far fewer tokens; over the 10,000-token budget by size alone.
    out = run_child(tmp_path, "print(Array(2000).fill('hello').join(' '))", 10_000, "default")
    assert out["loaded"] is True
    assert isinstance(out["tokens"], int) and out["tokens"] < 12_000


def test_preloading_host_counts_every_result(tmp_path: Path) -> None:
    out = run_child(tmp_path, "print('hello world')", 10_000, "on")
    assert out["loaded"] is True
    if not out["exact"]:  # a fresh machine: no cached encoding, downloads off
        pytest.skip(f"needs the o200k_base encoding (CI has it): {out['why']}")
    assert out["tokens"] == 3  # "hello", " world", "\n" in o200k_base
