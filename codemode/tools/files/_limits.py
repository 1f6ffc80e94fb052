"""Every size cap of the file tools, in one place.

The tools read them as ``limits.NAME`` when they run (not ``from ... import NAME``), so a test
can lower one with ``monkeypatch.setattr``.
"""

MAX_LINES = 2000  # lines per read_file page
MAX_PAGE_BYTES = 256 * 1024  # raw file bytes per read_file page
SCAN_LIMIT = 64 * 1024 * 1024  # files up to this size get their lines counted and UTF-8 checked
EDIT_MAX_BYTES = 64 * 1024 * 1024  # largest file edit_file edits, and write_file diffs against
OVERWRITE_THRESHOLD = 32 * 1024  # write_file needs overwrite: true to replace a larger file
SNIFF_BYTES = 8192  # head of a file checked for NUL bytes and BOMs
DIFF_TEXT_MAX_LINES = 300  # diff lines in a result's text (the structured diff has them all)
DIFF_MAX_CHARS = 1024 * 1024  # a diff is cut at this many characters
NEAR_MISS_CANDIDATES = 40  # windows of the file compared exactly with old_text
NEAR_MISS_FUZZY_CHARS = 1024 * 1024  # the character-similarity fallback runs on files up to this
NEAR_MISS_MAX_LINES = 200_000  # no near-miss search in files with more lines
