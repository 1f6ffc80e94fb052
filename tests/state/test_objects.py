"""The archive store's URL and opening it: a URL of the wrong shape, a store that cannot be
reached and a missing driver say what is wrong without showing the keys; credentials taken from
the environment leave it (no command inherits them)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from codemode.errors import StateDirError
from codemode.state import State
from codemode.state._objects import S3Store, parse_object_store_url
from tests.s3_support import S3Server

SECRET_KEY = "Zx9Qw8Er7Ty6Ui5Op4As3Df2"


def test_a_url_gives_bucket_prefix_endpoint_region_and_keys() -> None:
    url = parse_object_store_url(
        f"s3://AKIDEXAMPLE:{SECRET_KEY.replace('Q', '%51')}@archives/codemode/prod/"
        "?endpoint=https://minio.internal:9000&region=eu-west-1"
    )
    assert (url.bucket, url.prefix, url.endpoint, url.region) == (
        "archives",
        "codemode/prod/",
        "https://minio.internal:9000",
        "eu-west-1",
    )
    assert (url.access_key, url.secret_key) == ("AKIDEXAMPLE", SECRET_KEY)  # percent-decoded
    assert SECRET_KEY not in repr(url) and SECRET_KEY not in url.describe()
    assert url.describe() == "s3://archives/codemode/prod/ at https://minio.internal:9000"
    bare = parse_object_store_url("s3://archives")
    assert (bare.prefix, bare.endpoint, bare.region, bare.access_key) == ("", None, None, None)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://archives/x", "starts with s3://"),
        ("s3:///prefix", "names its bucket"),
        ("s3://archives:9000/x", "names its bucket"),
        ("s3://MyArchives/x", "lower-case"),  # S3 has no such bucket; a URL parser would lower it
        (f"s3://AKID:@archives/x?k={SECRET_KEY}", "both keys or neither"),
        (f"s3://{SECRET_KEY}@archives/x", "KEY:SECRET@"),
        # A secret with an unencoded / (AWS secrets often have one) or # cuts the URL elsewhere.
        (f"s3://AKID:{SECRET_KEY[:8]}/{SECRET_KEY[8:]}@archives/x", "percent-encoded"),
        (f"s3://AKID:{SECRET_KEY[:8]}#{SECRET_KEY[8:]}@archives/x", "percent-encoded"),
        (f"s3://AKID:{SECRET_KEY}@archives/x?endpont=http://h", "not endpont"),
        (f"s3://AKID:{SECRET_KEY}@archives/x?region=a&region=b", "once each"),
        (f"s3://AKID:{SECRET_KEY}@archives/x?region=eu+west", "region="),
        (f"s3://AKID:{SECRET_KEY}@archives/x?endpoint=file:///etc", r"http\(s\)://HOST"),
        (f"s3://AKID:{SECRET_KEY}@archives/x?endpoint=http://", r"http\(s\)://HOST"),
        (f"s3://AKID:{SECRET_KEY}@archives/x?endpoint=http://u:{SECRET_KEY}@h", "keys not in it"),
    ],
)
def test_a_url_of_another_shape_is_refused_saying_the_shape_never_the_keys(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        parse_object_store_url(url)
    for part in (SECRET_KEY, SECRET_KEY[:8], SECRET_KEY[8:]):
        assert part not in str(refused.value)


def test_a_secret_with_a_slash_percent_encoded_is_read_whole() -> None:
    url = parse_object_store_url(f"s3://AKID:{SECRET_KEY[:8]}%2F{SECRET_KEY[8:]}@archives?region=eu-west-1")
    assert url.secret_key == f"{SECRET_KEY[:8]}/{SECRET_KEY[8:]}" and url.prefix == ""
    assert parse_object_store_url("s3://archives?endpoint=http://[::1]:9000").endpoint == "http://[::1]:9000"


def test_an_archive_store_without_a_shared_database_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StateDirError, match=r"needs the shared database.*--database-url-file"):
        State(tmp_path / "state", archive_url="s3://archives/codemode")


def test_a_store_that_cannot_be_reached_or_has_no_such_bucket_fails_at_open(
    tmp_path: Path, database_url: str, s3_server: S3Server
) -> None:
    missing = s3_server.url("no-such-bucket")
    with pytest.raises(
        StateDirError, match=r"s3://no-such-bucket/archive/ at .* failed to reach the bucket"
    ) as e:
        State(tmp_path / "a", database_url=database_url, archive_url=missing)
    assert "codemode-test-secret" not in str(e.value)
    with pytest.raises(StateDirError, match="starts with s3://"):
        State(tmp_path / "b", database_url=database_url, archive_url="gs://bucket")


def test_credentials_found_in_the_environment_are_used_and_leave_it(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    (tmp_path / "aws-config").write_text("[default]\n")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "codemode-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "codemode-test-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))  # points to them: goes too
    store = S3Store(parse_object_store_url(f"s3://{bucket}/p?endpoint={s3_server.endpoint}&region=us-east-1"))
    try:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CONFIG_FILE"):
            assert name not in os.environ
        store.put("p/one", b"kept")
        assert store.get("p/one", 4) == b"kept"
        assert store.get("p/two", 4) is None
    finally:
        store.close()


def test_without_the_driver_the_store_says_which_extra_to_install(
    tmp_path: Path, database_url: str, archive_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if boto3 were not installed
    with pytest.raises(StateDirError, match=r"driver is not installed \(boto3\).*codemode\[s3\]"):
        State(tmp_path / "state", database_url=database_url, archive_url=archive_url)


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"AWS_ACCESS_KEY_ID": "only-the-id"}, "credentials"),  # no secret beside it
        ({"AWS_PROFILE": "no-such-profile"}, "no-such-profile"),
    ],
)
def test_credentials_that_cannot_be_used_fail_at_open_saying_so(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], says: str
) -> None:
    url = f"s3://{s3_server.new_bucket()}?endpoint={s3_server.endpoint}"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(StateDirError, match=f"cannot be used: .*{says}.*check its URL") as refused:
        S3Store(parse_object_store_url(url))
    assert refused.value.__cause__ is None  # said, not a traceback of boto3's


def test_the_store_is_listed_for_old_objects_at_most_once_a_day_by_any_server(s3_server: S3Server) -> None:
    """Every server that opens the state expires what is old; listing a large bucket each time
    would buy nothing (objects expire by the day), so a marker in the store says when the last
    sweep began, and sweeps within a day of it list nothing."""
    bucket = s3_server.new_bucket()
    url = parse_object_store_url(s3_server.url(bucket))
    one, two = S3Store(url), S3Store(url)  # two servers on one store
    client = s3_server.client()
    try:

        def put_old() -> str:
            key = f"{one.prefix}ar_{os.urandom(10).hex()}.{'0' * 16}"
            client.put_object(Bucket=bucket, Key=key, Body=b"x")
            return key

        def names() -> set[str]:
            return {item["Key"] for item in client.list_objects_v2(Bucket=bucket).get("Contents", [])}

        first = put_old()
        now = time.time()
        assert one.delete_older(now + 60, now) == 1  # (written before now + 60 s: old enough)
        assert first not in names()
        second = put_old()
        assert two.delete_older(now + 60, now + 3600) == 0  # the first sweep began an hour ago
        assert second in names()
        assert one.delete_older(now + 60, now + 2 * 24 * 3600) == 1  # two days later
        assert names() == {f"{one.prefix}last-sweep"}  # the marker is never swept itself
    finally:
        one.close()
        two.close()
