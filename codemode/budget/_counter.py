"""Token counting with tiktoken, offline-safe.

tiktoken downloads an encoding's BPE file unless it is already in its cache
(``TIKTOKEN_CACHE_DIR``, else ``DATA_GYM_CACHE_DIR``, else ``<tmp>/data-gym-cache``; the file
name is the sha1 of the blob URL). `TokenCounter` never waits for that download: it looks for
the cached file first and loads it in a worker thread with a bounded wait; when the file is
missing it lets tiktoken try the download in the background and counts conservatively until
(if ever) it lands. When the encoding
cannot be loaded it falls back to counting UTF-8 bytes, which never undercounts (every BPE
token of a byte-level encoding covers at least one byte), and says why in ``fallback_reason``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from codemode.errors import UserError

__all__ = ["LOAD_TIMEOUT_SECONDS", "TokenCounter"]

LOAD_TIMEOUT_SECONDS = 30.0
"""Longest wait for an encoding to load from the cache before falling back."""

_BLOB = "https://openaipublic.blob.core.windows.net"
# The files each openai_public encoding reads (see tiktoken_ext/openai_public.py).
_ENCODING_FILES: dict[str, tuple[str, ...]] = {
    "gpt2": (f"{_BLOB}/gpt-2/encodings/main/vocab.bpe", f"{_BLOB}/gpt-2/encodings/main/encoder.json"),
    "r50k_base": (f"{_BLOB}/encodings/r50k_base.tiktoken",),
    "p50k_base": (f"{_BLOB}/encodings/p50k_base.tiktoken",),
    "p50k_edit": (f"{_BLOB}/encodings/p50k_base.tiktoken",),
    "cl100k_base": (f"{_BLOB}/encodings/cl100k_base.tiktoken",),
    "o200k_base": (f"{_BLOB}/encodings/o200k_base.tiktoken",),
    "o200k_harmony": (f"{_BLOB}/encodings/o200k_base.tiktoken",),
}


class _Loaded:
    """The outcome of loading one encoding (shared by every counter in the process)."""

    def __init__(self, encoding: Any, reason: str | None) -> None:
        self.encoding = encoding
        self.reason = reason
        self.max_token_bytes = 1
        if encoding is not None:
            self.max_token_bytes = max(len(b) for b in encoding.token_byte_values())


_CACHE: dict[str, _Loaded] = {}
_CACHE_LOCK = threading.Lock()


def _cache_dir() -> str | None:
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"]
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _missing_cache_reason(name: str) -> str | None:
    urls = _ENCODING_FILES.get(name)
    if urls is None:
        return None  # a plugin encoding: we cannot know its files; rely on the bounded wait
    cache_dir = _cache_dir()
    if not cache_dir:
        return f"tiktoken caching is disabled (TIKTOKEN_CACHE_DIR is empty), so {name} would be downloaded"
    for url in urls:
        path = Path(cache_dir) / hashlib.sha1(url.encode()).hexdigest()
        if not path.is_file():
            return (
                f"encoding {name} is not in the tiktoken cache ({path} missing; set TIKTOKEN_CACHE_DIR to a "
                f"directory holding it)"
            )
    return None


def _download_in_background(name: str) -> str:
    """Let tiktoken fetch (and cache) a missing encoding without anyone waiting for it.

    Counting stays conservative until the download lands; offline it simply never does.
    ``CODEMODE_TIKTOKEN_DOWNLOAD=0`` turns the attempt off.

    Returns:
        What happens about the download, for the fallback reason.
    """
    if os.environ.get("CODEMODE_TIKTOKEN_DOWNLOAD", "1") == "0":
        return "downloading it is off (CODEMODE_TIKTOKEN_DOWNLOAD=0)"

    def work() -> None:
        try:
            import tiktoken

            encoding = tiktoken.get_encoding(name)
        except Exception:  # offline or blocked: keep the conservative counter
            return
        with _CACHE_LOCK:
            _CACHE[name] = _Loaded(encoding, None)

    threading.Thread(target=work, name=f"tiktoken-download-{name}", daemon=True).start()
    return "tiktoken is trying to download it in the background"


def _load(name: str) -> _Loaded:
    reason = _missing_cache_reason(name)
    if reason is not None:
        return _Loaded(None, f"{reason}; {_download_in_background(name)}")
    loaded: list[_Loaded] = []  # what the loading thread found, once it is done

    def work() -> None:
        try:
            import tiktoken

            loaded.append(_Loaded(tiktoken.get_encoding(name), None))
        except Exception as exc:  # any failure means: fall back, and say why
            loaded.append(_Loaded(None, f"encoding {name} could not be loaded: {type(exc).__name__}: {exc}"))

    thread = threading.Thread(target=work, name=f"tiktoken-load-{name}", daemon=True)
    thread.start()
    thread.join(LOAD_TIMEOUT_SECONDS)
    if thread.is_alive():
        return _Loaded(None, f"loading encoding {name} took over {LOAD_TIMEOUT_SECONDS:.0f} s")
    return loaded[0]


def _get(name: str) -> _Loaded:
    loaded = _CACHE.get(name)
    if loaded is not None:
        return loaded
    with _CACHE_LOCK:
        loaded = _CACHE.get(name)
        if loaded is None:
            loaded = _load(name)
            _CACHE[name] = loaded
    return loaded


class TokenCounter:
    """Counts tokens of text with a tiktoken encoding, or conservatively without one.

    The encoding loads lazily, at the first count that needs it, once per process.

    Args:
        encoding: A tiktoken encoding name (default ``o200k_base``).

    Raises:
        UserError: ``encoding`` is not an encoding tiktoken knows.
    """

    def __init__(self, encoding: str = "o200k_base") -> None:
        if encoding not in _ENCODING_FILES:
            import tiktoken

            if encoding not in tiktoken.list_encoding_names():
                known = ", ".join(sorted(tiktoken.list_encoding_names()))
                raise UserError(f"unknown tiktoken encoding {encoding!r}; known: {known}")
        self._name = encoding

    @property
    def encoding_name(self) -> str:
        """The encoding asked for."""
        return self._name

    @property
    def loaded(self) -> bool:
        """Whether the encoding was loaded (or given up on) already: counting will not wait."""
        return self._name in _CACHE

    @property
    def exact(self) -> bool:
        """True when counts come from the real encoding (loads it if needed)."""
        return _get(self._name).encoding is not None

    @property
    def fallback_reason(self) -> str | None:
        """Why counts are UTF-8 byte counts instead of tokens, or ``None`` when exact."""
        return _get(self._name).reason

    @property
    def max_token_bytes(self) -> int:
        """Most UTF-8 bytes one token can cover (1 in fallback mode: a token per byte)."""
        return _get(self._name).max_token_bytes

    def count(self, text: str) -> int:
        """Tokens in ``text`` (UTF-8 bytes when the encoding is unavailable: never fewer)."""
        if not text:
            return 0
        encoding = _get(self._name).encoding
        if encoding is None:
            return len(text.encode("utf-8", "surrogatepass"))
        return len(encoding.encode_ordinary(text))

    def encode(self, text: str) -> list[int] | None:
        """Token ids of ``text``, or ``None`` in fallback mode."""
        encoding = _get(self._name).encoding
        return None if encoding is None else list(encoding.encode_ordinary(text))

    def decode_bytes(self, tokens: list[int]) -> bytes:
        """The bytes of ``tokens`` (exact mode only)."""
        encoding = _get(self._name).encoding
        assert encoding is not None
        return bytes(encoding.decode_bytes(tokens))
