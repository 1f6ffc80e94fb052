"""Copies of archived text in an S3-compatible object store (the ``s3`` extra: boto3).

With a shared database, archived text is copied there (`codemode.state._shared_archive`); an
object store configured beside it holds those copies' bytes instead, and the database only
their rows, so the database stays small while the copies may be larger (their caps are the
object store's in `_shared_archive`). One URL says where::

    s3://[ACCESS_KEY:SECRET_KEY@]BUCKET[/PREFIX][?endpoint=URL&region=NAME]

``endpoint`` names an S3-compatible server other than AWS (MinIO, Ceph, R2, ...; its objects
are then addressed by path); ``region`` defaults to boto3's (``AWS_DEFAULT_REGION``, its
files) or ``us-east-1``. Keys are percent-encoded (``/`` as ``%2F``). Objects are named
``PREFIX/codemode-archive/<ref>.<16 hex>``; only names of that shape are ever removed, so a
bucket shared with anything else loses nothing of it.

Credentials: the keys in the URL (a file in the state directory, which no command can read);
else the ones boto3 finds, resolved when the store opens, after which the variables that hold
or point to them (`_CREDENTIAL_VARIABLES`) leave this process's environment, so no command
started afterwards inherits them.

Every call has a time limit and at most three attempts in all; a failure raises `HostFault`
naming the store (never its keys). What is read back is checked by the caller against the size
and digest the database keeps, and never read past that size.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol

from codemode._host_secrets import take_host_secret
from codemode.errors import HostFault, StateDirError

__all__ = ["ObjectStore", "ObjectStoreUrl", "S3Store", "parse_object_store_url"]

_CONNECT_TIMEOUT_SECONDS = 5.0
_READ_TIMEOUT_SECONDS = 20.0
_ATTEMPTS = 3  # in all (botocore's total_max_attempts: the first try and two retries)
_DELETE_BATCH = 1000  # S3's DeleteObjects takes at most 1,000 keys
_SWEEP_SECONDS = 60.0  # the most one sweep of old objects spends listing and removing
# Every server opening the state expires what is old; the store's objects are listed at most
# once a day, by whichever server comes first (an object's age is counted in days: a listing
# of a large bucket at each open bought nothing). The marker object's time says when the last
# sweep began; its name is not of codemode's archive shape, so no sweep removes it.
_SWEEP_EVERY_SECONDS = 24 * 3600.0
_SWEPT = "last-sweep"
_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})  # the error codes of a missing object
_URL_SHAPE = "s3://[ACCESS_KEY:SECRET_KEY@]BUCKET[/PREFIX][?endpoint=URL&region=NAME]"
_FOLDER = "codemode-archive/"  # under the URL's prefix: every object this store names
_OBJECT_NAME = re.compile(r"ar_[A-Za-z0-9_-]{20}\.[0-9a-f]{16}")
# S3's rules for a bucket's name (lower case: S3 refuses upper case, which a URL would hide).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_REGION = re.compile(r"[a-z0-9-]{1,32}")
# The environment variables that hold credentials boto3 may use, or point to them: taken out
# of the environment once the store has resolved its own (none when the URL has its keys).
_CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
)


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


def _refuse(what: str) -> ValueError:
    return ValueError(f"an archive store URL {what} (expected {_URL_SHAPE})")


def parse_object_store_url(url: str) -> ObjectStoreUrl:
    """Parse an object store URL (its shape is the module's).

    Raises:
        ValueError: It is not such a URL; the message shows the expected shape, never a part of
            the keys.
    """
    text = url.strip()
    if not text.startswith("s3://"):
        raise _refuse("starts with s3://")
    rest = text[len("s3://") :]
    before_query, _, query_text = rest.partition("?")
    authority, _, path = before_query.partition("/")
    userinfo, at, bucket = authority.rpartition("@")
    stray_at = "@" in query_text and not set(urllib.parse.parse_qs(query_text, keep_blank_values=True)) <= {
        "endpoint",
        "region",
    }
    if "@" in path or stray_at or "#" in text or (at and ":" not in userinfo):
        # A key with an unencoded / ? # or @ cuts the URL elsewhere than meant.
        raise _refuse(
            "gives its keys as KEY:SECRET@, each percent-encoded (/ as %2F, ? as %3F, # as %23, @ as %40)"
        )
    access_key, _, secret_key = userinfo.partition(":")
    if at and (not access_key or not secret_key):
        raise _refuse("gives both keys or neither")
    if not _BUCKET.fullmatch(bucket):
        raise _refuse(
            "names its bucket after s3:// (3-63 lower-case letters, digits, dots and hyphens; no port)"
        )
    query = urllib.parse.parse_qs(query_text, keep_blank_values=True)
    unknown = sorted(set(query) - {"endpoint", "region"})
    if unknown or any(len(values) != 1 for values in query.values()):
        raise _refuse(f"takes endpoint= and region= once each, not {', '.join(unknown) or 'twice'}")
    endpoint = query.get("endpoint", [None])[0]
    if endpoint is not None:
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
            raise _refuse("has an endpoint= of the form http(s)://HOST[:PORT], keys not in it")
    region = query.get("region", [None])[0]
    if region is not None and not _REGION.fullmatch(region):
        raise _refuse("has a region= of lower-case letters, digits and hyphens (eu-west-1)")
    prefix = urllib.parse.unquote(path).strip("/")
    return ObjectStoreUrl(
        bucket=bucket,
        prefix=f"{prefix}/" if prefix else "",
        endpoint=endpoint,
        region=region,
        access_key=urllib.parse.unquote(access_key) if at else None,
        secret_key=urllib.parse.unquote(secret_key) if at else None,
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

    def delete_older(self, before: float, now: float) -> int:
        """Remove the objects this store names (``<prefix><ref>.<hex>``; nothing else under the
        prefix) last written before ``before`` (a Unix time), page by page, for at most
        `_SWEEP_SECONDS`; how many. Nothing is listed when a sweep of the store (by any server)
        began less than a day before ``now``."""
        ...

    def close(self) -> None: ...


class S3Store:
    """The objects under ``url.prefix`` + ``codemode-archive/`` of an S3 bucket (boto3, loaded
    only here).

    Raises:
        StateDirError: boto3 is not installed, its credentials or settings are wrong, or the
            bucket cannot be reached (one attempt, within seconds).
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
        self.prefix = url.prefix + _FOLDER
        self._errors: tuple[type[Exception], ...] = (
            botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError,
        )
        self._client_error = botocore.exceptions.ClientError
        keys: dict[str, str] = {}
        if url.access_key is not None and url.secret_key is not None:
            keys = {"aws_access_key_id": url.access_key, "aws_secret_access_key": url.secret_key}

        def config(attempts: int, read_timeout: float) -> Any:
            return botocore.config.Config(
                connect_timeout=_CONNECT_TIMEOUT_SECONDS,
                read_timeout=read_timeout,
                retries={"total_max_attempts": attempts, "mode": "standard"},
                s3={"addressing_style": "path" if url.endpoint else "auto"},
                max_pool_connections=16,
                # Checksums only where S3 requires them: several S3-compatible stores refuse
                # the headers boto3 sends by default since 1.36.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )

        try:
            # A session of its own: boto3's default one is shared, and not safe to create
            # clients from on several threads at once. A client is safe to share.
            session = boto3.session.Session()
            if not keys:
                session.get_credentials()  # resolved now, before their variables leave
            made = {"endpoint_url": url.endpoint, "region_name": url.region or None, **keys}
            self._client: Any = session.client("s3", config=config(_ATTEMPTS, _READ_TIMEOUT_SECONDS), **made)
            probe = session.client("s3", config=config(1, _CONNECT_TIMEOUT_SECONDS), **made)
        except (*self._errors, ValueError) as exc:
            raise StateDirError(
                f"the archive store {self.describe()} cannot be used: {_reason(exc)}; check its URL "
                "(--archive-url-file or $CODEMODE_ARCHIVE_URL) and its credentials"
            ) from None
        finally:
            if not keys:  # the credentials boto3 found: no command inherits them
                for name in _CREDENTIAL_VARIABLES:
                    take_host_secret(name)
        try:
            self._call("reach the bucket", lambda: probe.head_bucket(Bucket=url.bucket), StateDirError)
        finally:
            probe.close()

    def describe(self) -> str:
        return self.url.describe()

    def _call(self, what: str, call: Callable[[], Any], error: type[HostFault] = HostFault) -> Any:
        try:
            return call()
        except self._errors as exc:
            raise error(f"the archive store {self.describe()} failed to {what}: {_reason(exc)}") from None

    def _absent(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()``'s answer, or None when the object it names does not exist."""
        try:
            return call()
        except self._client_error as exc:
            if exc.response.get("Error", {}).get("Code") in _NOT_FOUND:
                return None
            raise HostFault(f"the archive store {self.describe()} failed to {what}: {_reason(exc)}") from None
        except self._errors as exc:
            raise HostFault(f"the archive store {self.describe()} failed to {what}: {_reason(exc)}") from None

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
            code = exc.response.get("Error", {}).get("Code")
            if code in _NOT_FOUND:
                return None
            if code == "InvalidRange":
                return b""  # an empty object has no byte 0 (the caller checks the size)
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

    def delete_older(self, before: float, now: float) -> int:
        marker = self.prefix + _SWEPT
        last = self._swept_at(marker)
        if last is not None and now - last < _SWEEP_EVERY_SECONDS:
            return 0
        self.put(marker, b"")
        stop = time.monotonic() + _SWEEP_SECONDS
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.url.bucket, Prefix=self.prefix
        )
        removed = 0
        listed = iter(pages)
        while time.monotonic() < stop:
            page = self._call("list its objects", lambda: next(listed, None))
            if page is None:
                break
            old = [
                item["Key"]
                for item in page.get("Contents", [])
                if _OBJECT_NAME.fullmatch(item["Key"][len(self.prefix) :])
                and item["LastModified"].timestamp() < before
            ]
            self.delete(old)
            removed += len(old)
        return removed

    def _swept_at(self, marker: str) -> float | None:
        """When the last sweep began (the marker's time), or None when none did."""
        answer = self._absent(
            f"read {marker}", lambda: self._client.head_object(Bucket=self.url.bucket, Key=marker)
        )
        return None if answer is None else float(answer["LastModified"].timestamp())

    def close(self) -> None:
        self._client.close()


def _reason(exc: Exception) -> str:
    """A store's error in a few words (a `ClientError`'s code and message; no keys in either)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": ")
    return str(exc) or type(exc).__name__
