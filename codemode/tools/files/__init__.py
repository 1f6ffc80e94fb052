"""File tools: read_file (paged), edit_file (exact replacement), write_file (whole file).

Decisions worth knowing:

* Lines are separated by ``\\n``; a ``\\r\\n`` pair is one line ending (a lone ``\\r`` is text).
* read_file pages by lines: at most `MAX_LINES` lines and `MAX_PAGE_BYTES` bytes of raw file
  per page, whichever comes first. A single line longer than the byte cap is cut at a character
  boundary; the page then says how to read the rest of that line with bash, and the next page
  starts at the following line. Total lines are counted (and UTF-8 validity checked) for files
  up to `SCAN_LIMIT` bytes; beyond that ``total_lines`` is ``None`` and pages are decoded on
  their own (invalid bytes shown as U+FFFD and flagged).
* Text is UTF-8, UTF-8 with BOM, or (when not valid UTF-8) Latin-1, which round-trips every
  byte. NUL bytes in the first 8 KiB, or a UTF-16/32 BOM, mean binary: refused.
* edit_file keeps the encoding, BOM, line endings (a CRLF file is matched and written in LF form
  and converted back) and a missing final newline. write_file writes ``content`` as UTF-8,
  exactly as given.
* Paths are resolved by descriptor (`codemode.sandbox._fs`): each component opened without
  following symlinks, a symlink's target resolved the same way (so the sandbox checks the real
  path), and every read, ``mkdirat``, temp file and ``renameat`` goes through the descriptors the
  check was made on, so a component swapped for a symlink after the check redirects nothing.
* Only regular files on real file systems are opened. The target is first held as an ``O_PATH``
  descriptor (which opens nothing) and ``fstat``-ed: devices, FIFOs, sockets and files of kernel
  pseudo file systems (``/proc``, ``/sys``, ...) are refused before any open, so nothing blocks a
  host thread or consumes data (``/proc/kmsg``). The file is then opened non-blocking, by name
  under the pinned directory with ``O_NOFOLLOW``, and must be the inode that was checked.
* Writes are atomic: a temp file in the same directory, fsync, ``renameat``, fsync of the
  directory. A new file is renamed into place with ``RENAME_NOREPLACE``, an existing one only if
  its name still holds the file that was read; otherwise nothing is written and the error says
  so. An existing file keeps its mode; new files get 0644 minus umask. Replacing the file gives it
  a new inode, so a hard link to it elsewhere keeps the old content.

Modules, by concern (each imports only the ones above it):

* ``_limits``: every size cap. ``_messages``: how a path, a size and an OS error are worded.
* ``_text``: binary and encoding sniffing, line endings, UTF-8 cutting, decoding and encoding.
* ``_located``: the kinds of file refused, and opening, reading and atomically replacing the
  located file through the walk's descriptors.
* ``_diff``: unified diffs over the changed region. ``_models``: argument and result models.
* ``_read``, ``_edit`` (with the near-miss search), ``_write``: one tool each.
* ``_tools``: ``file_tools()``, the three tools as registry entries.
"""

from codemode.tools.files._edit import edit_file
from codemode.tools.files._limits import MAX_LINES, MAX_PAGE_BYTES, OVERWRITE_THRESHOLD
from codemode.tools.files._models import (
    EditFileArgs,
    EditFileResult,
    ReadFileArgs,
    ReadFileResult,
    WriteFileArgs,
    WriteFileResult,
)
from codemode.tools.files._read import read_file
from codemode.tools.files._tools import file_tools
from codemode.tools.files._write import write_file

__all__ = [
    "MAX_LINES",
    "MAX_PAGE_BYTES",
    "OVERWRITE_THRESHOLD",
    "EditFileArgs",
    "EditFileResult",
    "ReadFileArgs",
    "ReadFileResult",
    "WriteFileArgs",
    "WriteFileResult",
    "edit_file",
    "file_tools",
    "read_file",
    "write_file",
]
