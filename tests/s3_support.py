"""A throw-away S3-compatible server for the tests: moto's, in a process of its own, on loopback
only (an ephemeral port), one bucket per test. An object store is outside the system, like the
internet: this stands in for AWS S3 or a MinIO, and boto3 speaks real HTTP (signed requests) to
it. The server ends when the test process closes its stdin."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

__all__ = ["S3Server", "start_s3"]

_KEY, _SECRET = "codemode-test", "codemode-test-secret"

# The server's process: start it, print its port, serve until stdin closes.
_SERVER = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()
server.stop()
"""


@dataclass
class S3Server:
    """A running server: its process and its endpoint (``http://127.0.0.1:<port>``)."""

    process: subprocess.Popen[str]
    endpoint: str

    def client(self) -> Any:
        """A boto3 client of this server (the tests' own, to look at what codemode stored)."""
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=_KEY,
            aws_secret_access_key=_SECRET,
        )

    def new_bucket(self) -> str:
        """A new empty bucket's name: each test its own objects."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def url(self, bucket: str, prefix: str = "archive") -> str:
        """The archive store URL of ``bucket`` (keys in it, as a URL file holds them)."""
        return f"s3://{_KEY}:{_SECRET}@{bucket}/{prefix}?endpoint={self.endpoint}&region=us-east-1"

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_s3() -> S3Server:
    """Start a server (moto) and wait until it listens; skip the test when moto is missing."""
    if importlib.util.find_spec("moto") is None:
        pytest.skip(
            "moto's S3 server is not installed (pip install 'moto[server]'): archive store tests skip"
        )
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    if not port.isdigit():
        process.kill()
        process.wait()
        raise RuntimeError("the test S3 server (moto) did not start")
    return S3Server(process, f"http://127.0.0.1:{port}")
