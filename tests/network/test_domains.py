"""Allowlist entries: what is accepted, what a list allows, and when one list narrows another."""

from __future__ import annotations

import pytest

from codemode.network import allows, check_entries, check_entry, covers, listed_exactly, uncovered


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("PyPI.org.", "pypi.org"),
        ("*.GitHubUserContent.com", "*.githubusercontent.com"),
        ("localhost", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
    ],
)
def test_entries_are_normalized(text: str, entry: str) -> None:
    assert check_entry(text) == entry


@pytest.mark.parametrize(
    "text",
    ["*", "*.com", "https://pypi.org", "pypi.org:443", "pypi.org/simple", "", "a..b", "-x.org", "a b.org"],
)
def test_entries_that_are_not_domains_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a domain|too wide"):
        check_entry(text)


def test_a_list_keeps_its_order_without_duplicates() -> None:
    assert check_entries(["b.org", "a.org", "B.org"]) == ("b.org", "a.org")
    with pytest.raises(ValueError, match="at most"):
        check_entries([f"h{i}.org" for i in range(300)])


def test_names_are_matched_as_written() -> None:
    entries = check_entries(["pypi.org", "*.githubusercontent.com", "localhost"])
    assert allows(entries, "pypi.org") and allows(entries, "PYPI.ORG.")
    assert not allows(entries, "files.pypi.org")  # a name is that name only
    assert allows(entries, "raw.githubusercontent.com") and allows(entries, "a.b.githubusercontent.com")
    assert not allows(entries, "githubusercontent.com")  # a wildcard is the subdomains only
    assert not allows(entries, "evilgithubusercontent.com")
    assert not allows(entries, "127.0.0.1")  # localhost does not allow its address
    assert listed_exactly(entries, "localhost") and not listed_exactly(entries, "raw.githubusercontent.com")


def test_a_call_list_within_the_host_list_narrows_it() -> None:
    host = check_entries(["pypi.org", "*.github.com"])
    assert (
        uncovered(host, check_entries(["pypi.org", "api.github.com", "*.x.github.com", "*.github.com"])) == ()
    )
    wider = check_entries(["github.com", "*.org.github.io", "evil.org"])
    assert uncovered(host, wider) == wider
    assert not covers(host, "*.pypi.org")
