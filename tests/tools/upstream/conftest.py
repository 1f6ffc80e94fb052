"""Fixtures for the upstream tests: the SDK-written server of upstream_server.py, over stdio
or streamable HTTP, started as a real subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tools.upstream.upstream_support import SERVER


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    return tmp_path / "marks.txt"


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The test server over streamable HTTP; yields (url, token). Requests need the token."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "tok-" + os.urandom(8).hex()
    errors = tmp_path_factory.mktemp("http-server") / "stderr.txt"
    with open(errors, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port), token], stderr=err)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the HTTP test server did not start: {errors.read_text()}") from None
            time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        proc.terminate()
        proc.wait(10)
