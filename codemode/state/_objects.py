"""Copies of archived text in an S3-compatible object store (the ``s3`` extra: boto3).

With a shared database, archived text is copied there (`codemode.state._shared_archive`); an
object store configured beside it holds those copies' bytes instead, and the database only
their rows, so the database stays small while the copies may be larger (their caps are the
object store's in `_shared_archive`). One URL says where::

    s3://[ACCESS_KEY:SECRET_KEY@]BUCKET[/PREFIX][?endpoint=URL&region=NAME]

``endpoint`` names an S3-compatible server other than AWS (MinIO, Ceph, R2, ...; its objects
are then addressed by path); ``region`` defaults to ``AWS_REGION`` or ``us-east-1``. Without
keys in the URL, the store takes ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and
``AWS_SESSION_TOKEN`` out of this process's environment when it opens (so no command started
afterwards inherits them), else boto3 finds credentials as it does (its files, a role).

Every call has a time limit and at most three attempts; a failure raises `HostFault` naming
the store (never its keys). What is read back is checked by the caller against the digest the
database keeps, and never read past the size the database gives.
"""

from __future__ import annotations

import dataclasses
import functools
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol

from codemode._host_secrets import take_host_secret
from codemode.errors import HostFault, StateDirError

__all__ = ["ObjectStore", "ObjectStoreUrl", "S3Store", "parse_object_store_url"]

_CONNECT_TIMEOUT_SECONDS = 5.0
_READ_TIMEOUT_SECONDS = 30.0
_ATTEMPTS = 3
_DELETE_BATCH = 1000  # S3's DeleteObjects takes at most 1,000 keys
_URL_SHAPE = "s3://[ACCESS_KEY:SECRET_KEY@]BUCKET[/PREFIX][?endpoint=URL&region=NAME]"


@dataclasses.dataclass(frozen=True)
class ObjectStoreUrl:
    """An object store URL, parsed. ``prefix`` is empty or ends with ``/``."""

    bucket: str
    prefix: str
    endpoint: str | None
    region: str | None
    access_key: str | None = dataclasses.field(default=None, repr=False)
    secret_key: str | None = dataclasses.field(default=None, repr=False)

    def describe(self) -> str:
        """Where it is, without its keys: ``s3://bucket/prefix/ at endpoint``."""
        at = f" at {self.endpoint}" if self.endpoint else ""
        return f"s3://{self.bucket}/{self.prefix}{at}"


def parse_object_store_url(url: str) -> ObjectStoreUrl:
    """Parse an object store URL (its shape is the module's).

    Raises:
        ValueError: It is not such a URL; the message shows the expected shape, never the keys.
    """
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme != "s3":
        raise ValueError(f"an archive store URL starts with s3:// (expected {_URL_SHAPE})")
    bucket = parts.hostname or ""
    if not bucket or parts.port is not None or parts.fragment:
        raise ValueError(f"an archive store URL names its bucket after s3:// (expected {_URL_SHAPE})")
    if (parts.username is None) != (parts.password is None) or (parts.username == "" or parts.password == ""):
        raise ValueError(f"an archive store URL gives both keys or neither (expected {_URL_SHAPE})")
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    unknown = sorted(set(query) - {"endpoint", "region"})
    if unknown or any(len(values) != 1 for values in query.values()):
        raise ValueError(
            f"an archive store URL takes endpoint= and region= once each, not {', '.join(unknown) or 'twice'} "
            f"(expected {_URL_SHAPE})"
        )
    endpoint = query.get("endpoint", [None])[0]
    if endpoint is not None and urllib.parse.urlsplit(endpoint).scheme not in ("http", "https"):
        raise ValueError("an archive store URL's endpoint= is an http:// or https:// URL")
    prefix = parts.path.strip("/")
    return ObjectStoreUrl(
        bucket=bucket,
        prefix=f"{prefix}/" if prefix else "",
        endpoint=endpoint,
        region=query.get("region", [None])[0],
        access_key=None if parts.username is None else urllib.parse.unquote(parts.username),
        secret_key=None if parts.password is None else urllib.parse.unquote(parts.password),
    )


class ObjectStore(Protocol):
    """What the shared archive asks of an object store. Each method raises `HostFault` when the
    store fails."""

    prefix: str
    """What the name of every object of this store starts with (empty, or ending with ``/``)."""

    def describe(self) -> str: ...

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str, size: int) -> bytes | None:
        """The object's first ``size + 1`` bytes at most; None when there is no such object."""
        ...

    def delete(self, keys: list[str]) -> None: ...

    def delete_older(self, before: float) -> int:
        """Remove every object of the store's prefix last written before ``before`` (a Unix
        time); how many."""
        ...

    def close(self) -> None: ...


class S3Store:
    """The objects under ``url.prefix`` of an S3 bucket (boto3, loaded only here).

    Raises:
        StateDirError: boto3 is not installed, or the bucket cannot be reached.
    """

    def __init__(self, url: ObjectStoreUrl) -> None:
        try:
            import boto3
            import botocore.config
            import botocore.exceptions
        except ImportError as exc:
            raise StateDirError(
                f"an archive store was asked for, but its driver is not installed ({exc.name}): "
                "install codemode with the s3 extra (pip install 'codemode[s3]')"
            ) from exc
        self.url = url
        self.prefix = url.prefix
        self._errors: tuple[type[Exception], ...] = (
            botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError,
        )
        self._client_error = botocore.exceptions.ClientError
        keys: dict[str, str] = {}
        if url.access_key is not None and url.secret_key is not None:
            keys = {"aws_access_key_id": url.access_key, "aws_secret_access_key": url.secret_key}
        else:
            # Taken out of the environment: the host's credentials never reach a command.
            taken = {
                "aws_access_key_id": take_host_secret("AWS_ACCESS_KEY_ID"),
                "aws_secret_access_key": take_host_secret("AWS_SECRET_ACCESS_KEY"),
                "aws_session_token": take_host_secret("AWS_SESSION_TOKEN"),
            }
            keys = {name: value for name, value in taken.items() if value}
        config = botocore.config.Config(
            connect_timeout=_CONNECT_TIMEOUT_SECONDS,
            read_timeout=_READ_TIMEOUT_SECONDS,
            retries={"max_attempts": _ATTEMPTS, "mode": "standard"},
            s3={"addressing_style": "path" if url.endpoint else "auto"},
            max_pool_connections=16,
        )
        # A session of its own: boto3's default one is shared, and not safe to create clients
        # from on several threads at once. The client itself is safe to share between threads.
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=url.endpoint, region_name=url.region or None, config=config, **keys
        )
        self._call("reach the bucket", lambda: self._client.head_bucket(Bucket=url.bucket), StateDirError)

    def describe(self) -> str:
        return self.url.describe()

    def _call(self, what: str, call: Callable[[], Any], error: type[HostFault] = HostFault) -> Any:
        try:
            return call()
        except self._errors as exc:
            raise error(f"the archive store {self.describe()} failed to {what}: {_reason(exc)}") from None

    def put(self, key: str, data: bytes) -> None:
        self._call(
            f"store {key}",
            lambda: self._client.put_object(Bucket=self.url.bucket, Key=key, Body=data),
        )

    def get(self, key: str, size: int) -> bytes | None:
        try:
            answer = self._client.get_object(Bucket=self.url.bucket, Key=key, Range=f"bytes=0-{size}")
            body = answer["Body"]
            try:
                return bytes(body.read(size + 1))
            finally:
                body.close()
        except self._client_error as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            if exc.response.get("Error", {}).get("Code") == "InvalidRange" and size == 0:
                return b""  # an empty object has no byte 0
            raise HostFault(
                f"the archive store {self.describe()} failed to read {key}: {_reason(exc)}"
            ) from None
        except self._errors as exc:
            raise HostFault(
                f"the archive store {self.describe()} failed to read {key}: {_reason(exc)}"
            ) from None

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": key} for key in keys[start : start + _DELETE_BATCH]]
            request = {"Objects": batch, "Quiet": True}
            answer = self._call(
                f"remove {len(batch)} objects",
                functools.partial(self._client.delete_objects, Bucket=self.url.bucket, Delete=request),
            )
            failed = answer.get("Errors") or []
            if failed:
                raise HostFault(
                    f"the archive store {self.describe()} failed to remove {len(failed)} objects "
                    f"({failed[0].get('Key')}: {failed[0].get('Code')})"
                )

    def delete_older(self, before: float) -> int:
        pages = self._call(
            "list its objects",
            lambda: list(
                self._client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.url.bucket, Prefix=self.prefix
                )
            ),
        )
        old = [
            item["Key"]
            for page in pages
            for item in page.get("Contents", [])
            if item["LastModified"].timestamp() < before
        ]
        self.delete(old)
        return len(old)

    def close(self) -> None:
        self._client.close()


def _reason(exc: Exception) -> str:
    """A store's error in a few words (a `ClientError`'s code and message; no keys in either)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": ")
    return str(exc) or type(exc).__name__
