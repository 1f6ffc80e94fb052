"""TokenCounter: real tiktoken from the offline cache, and the conservative fallback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codemode.budget import TokenCounter
from codemode.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def _exact(encoding: str = "o200k_base") -> TokenCounter:
    counter = TokenCounter(encoding)
    if not counter.exact:  # a fresh machine offline; CI points TIKTOKEN_CACHE_DIR at a cache
        pytest.skip(f"needs the {encoding} encoding: {counter.fallback_reason}")
    return counter


def test_exact_counts_with_cached_encoding() -> None:
    counter = _exact()
    assert counter.encoding_name == "o200k_base"
    assert counter.exact and counter.fallback_reason is None
    import tiktoken

    text = "Hello, world! 数字 🎉\n" * 50
    assert counter.count(text) == len(tiktoken.get_encoding("o200k_base").encode_ordinary(text))
    assert counter.count("") == 0
    assert counter.count("<|endoftext|>") > 1  # special tokens are plain text here


def test_cl100k_too() -> None:
    assert _exact("cl100k_base").count("hello world") == 2


def test_unknown_encoding_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown tiktoken encoding 'nope'"):
        TokenCounter("nope")


def run_isolated(code: str, cache_dir: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TIKTOKEN_CACHE_DIR": cache_dir}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_fallback_without_cache_never_undercounts(tmp_path: Path) -> None:
    # A fresh process (encodings load once per process) with an empty cache: no download is
    # attempted, counting falls back to UTF-8 bytes and says why.
    out = run_isolated(
        "from codemode.budget import TokenCounter\n"
        "c = TokenCounter()\n"
        "print(c.exact)\n"
        "print(c.count('héllo 🎉'))\n"
        "print(c.fallback_reason)\n",
        str(tmp_path),
    )
    exact, count, reason = out.splitlines()
    assert exact == "False"
    assert int(count) == len("héllo 🎉".encode())
    assert "not in the tiktoken cache" in reason and str(tmp_path) in reason


def test_fallback_when_cached_file_is_corrupt(tmp_path: Path) -> None:
    # The cache file exists but holds garbage: tiktoken would delete it and try to download;
    # the download fails offline, and the counter falls back instead of crashing.
    import hashlib

    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(b"garbage")
    env_code = (
        "import socket\n"
        "def refuse(*a, **k):\n"
        "    raise OSError('network disabled in this test')\n"
        "socket.create_connection = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "from codemode.budget import TokenCounter\n"
        "c = TokenCounter()\n"
        "print(c.exact, c.count('abcd'))\n"
        "print(c.fallback_reason)\n"
    )
    first, reason = run_isolated(env_code, str(tmp_path)).splitlines()
    assert first == "False 4"
    assert "could not be loaded" in reason
