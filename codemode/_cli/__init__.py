"""The ``codemode`` command line's subcommands, one module per group (`codemode.cli` is the
entry point: it builds the parser of just the subcommand named, and dispatches)."""
