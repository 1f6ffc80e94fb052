"""What ``codemode run`` shows on standard error while a program prints: redacted, capped.

The budgeted result still goes to standard output at the end; this is for the person watching.
"""

from __future__ import annotations

from typing import TextIO

from codemode.state import Redactor, StreamRedactor

__all__ = ["STREAM_CAP_BYTES", "PrintStream"]

STREAM_CAP_BYTES = 1024 * 1024
"""Most bytes of printed text shown while a program runs; then one line says the rest was cut."""


class PrintStream:
    """Writes a program's printed text to ``out`` as it comes, through the host's redactor.

    A `StreamRedactor` holds text back to the last line end, so a secret split across two
    pieces is still seen whole. Past ``cap`` bytes one line says the rest was cut (the result
    on standard output is unchanged).

    Args:
        redactor: The host's redactor.
        out: Where to write (standard error).
        cap: Most bytes written before the cut line.
    """

    def __init__(self, redactor: Redactor, out: TextIO, cap: int = STREAM_CAP_BYTES) -> None:
        self._stream = StreamRedactor(redactor)
        self._out = out
        self._cap = cap
        self._written = 0
        self._cut = False

    def feed(self, text: str) -> None:
        """Take the next piece of printed text (called on the event loop's thread)."""
        if not self._cut:
            self._write(self._stream.feed(text.encode("utf-8", "surrogatepass")))

    def close(self) -> None:
        """Write what was held back (the last line without a line end)."""
        if not self._cut:
            self._write(self._stream.flush())

    def _write(self, data: bytes) -> None:
        if not data:
            return
        room = self._cap - self._written
        if len(data) > room:
            data = data[:room]
            self._cut = True
        self._written += len(data)
        text = data.decode("utf-8", "replace")
        if self._cut:
            text = text.rstrip("\ufffd")
            text += (
                f"{'' if not text or text.endswith(chr(10)) else chr(10)}"
                f"[codemode: streamed output cut after {self._cap:,} bytes; the result follows on stdout]\n"
            )
        self._out.write(text)
        self._out.flush()
