"""The bash tool's limits and defaults: plain numbers, shared by its argument models (`_tool`)
and the process manager, which must not import those models to start (they load at the
tool's first use: `ToolRegistry` and `LazyExtension`)."""

MAX_TIMEOUT_SECONDS = 3600
DEFAULT_TIMEOUT_SECONDS = 300
DEFAULT_READ_BYTES = 32768
MAX_READ_BYTES = 1 << 20
MAX_WAIT_MS = 300_000
DEFAULT_WAIT_MS = 30_000
MAX_REPORT_KEYWORDS = 50
