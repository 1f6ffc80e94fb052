"""Redaction of a byte stream that arrives in chunks (a command's output as it is printed, a
raw log scanned for the values found in it)."""

from __future__ import annotations

from codemode.state._redact import _PEM_BEGIN, _PEM_END, Redactor

__all__ = ["StreamRedactor"]

_HOLD = 4096  # bytes of a long line held back at a cut: a value they start is seen whole
_OVERLAP = 4096  # bytes released before a cut kept as context (``password = `` before it)


class StreamRedactor:
    """Redacts a byte stream that arrives in arbitrary chunks.

    Bytes are released up to the last line end (``\\n`` or ``\\r``), so a secret split across
    two chunks is still seen whole. A line longer than ``max_pending`` is released anyway, less
    its last 4 KiB (at a space where one is near), never in the middle of a secret found; the 4
    KiB released before the cut stay as context for the rest, so a value whose name came before
    the cut (``password = `` | ``'X'``) is still found, and one started before it is cut whole.
    A private key block that spans chunks is suppressed up to its END line.

    Args:
        redactor: The rules to apply.
        max_pending: Most bytes held back waiting for a line end.
    """

    def __init__(self, redactor: Redactor, max_pending: int = 64 * 1024) -> None:
        self._redactor = redactor
        self._max_pending = max(max_pending, 2 * _HOLD)
        self._pending = b""
        self._released = 0  # bytes at the start of _pending already released: context only
        self._in_private_key = False
        self._known: dict[bytes, bytes] = {}  # secret values seen: redacted in later chunks too

    @property
    def known(self) -> dict[bytes, bytes]:
        """The secret values found so far (and their markers): redacted in later chunks too."""
        return self._known

    def feed(self, data: bytes) -> bytes:
        """Take the next chunk; return the redacted bytes that are ready."""
        buf = self._pending + data if self._pending else data
        skip = self._released
        newline = buf.rfind(b"\n", skip)
        cut = max(newline, buf.rfind(b"\r", max(newline + 1, skip))) + 1
        if cut == 0:
            if len(buf) - skip <= self._max_pending:
                self._pending = buf
                return b""
            return self._release_long(buf, skip)
        self._pending, self._released = buf[cut:], 0
        return self._release(buf, skip, cut)

    def flush(self) -> bytes:
        """Release everything held back (at the end of the stream), redacted."""
        buf, skip = self._pending, self._released
        self._pending, self._released = b"", 0
        return self._release(buf, skip, len(buf)) if len(buf) > skip else b""

    def _release_long(self, buf: bytes, skip: int) -> bytes:
        """Release most of a line too long to hold: up to a cut that splits no secret."""
        cut = len(buf) - _HOLD
        space = buf.rfind(b" ", max(skip, cut - _HOLD), cut)
        cut = space + 1 if space > skip else cut
        for start, end, _marker in self._redactor.secret_spans(buf, dict(self._known)):
            if start < cut < end:
                # Cut before the secret; one that began in what was released goes out whole.
                cut = start if start > skip else end
        keep = max(cut - _OVERLAP, 0)
        self._pending, self._released = buf[keep:], cut - keep
        return self._release(buf, skip, cut)

    def _release(self, buf: bytes, skip: int, cut: int) -> bytes:
        """``buf[skip:cut]`` redacted, with ``buf[:skip]`` (released before) as its context."""
        if self._in_private_key:
            end = _PEM_END.search(buf, skip, cut)
            if end is None:
                return b""
            self._in_private_key = False
            skip = end.end()
        if buf.find(b"PRIVATE KEY", skip, cut) >= 0:
            begins = list(_PEM_BEGIN.finditer(buf, skip, cut))
            if begins and _PEM_END.search(buf, begins[-1].end(), cut) is None:
                self._in_private_key = True
        if skip == 0 and cut == len(buf):
            return self._redactor.redact_bytes(buf, self._known)
        return self._redactor.redact_range(buf[:cut], skip, cut, self._known)
