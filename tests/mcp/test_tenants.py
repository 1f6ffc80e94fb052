"""The HTTP front's tenants file: parsed strictly, tokens compared whole, each token one tenant."""

from __future__ import annotations

import pytest

from codemode import UserError
from codemode.mcp import HttpOptions, Tenants, parse_tenants

A = "a" * 16 + "-token-of-alice"
B = "b" * 16 + "-token-of-bob"


def test_a_file_names_each_tenant_and_its_token() -> None:
    tenants = parse_tenants(f"# who may use this server\n\nalice {A}\n  bob\t{B}  \n", "tenants")
    assert tenants.several
    assert tenants.tenant_of(A) == "alice" and tenants.tenant_of(B) == "bob"
    assert tenants.tenant_of(A[:-1]) is None and tenants.tenant_of(A + "x") is None
    assert tenants.tenant_of("") is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (f"alice {A} extra", "line 1: expected `NAME TOKEN` (two words), got 3"),
        ("alice", "line 1: expected `NAME TOKEN` (two words), got 1"),
        (f"alice {A}\nalice {B}", "line 2: tenant 'alice' is named twice"),
        (f"alice {A}\nbob {A}", "tenants 'alice' and 'bob' have the same token"),
        ("alice short", "the token of tenant 'alice' must be one word of at least 16 characters"),
        (f"al/ice {A}", "tenant name 'al/ice'"),
        ("# nothing but a comment\n", "no tenant is named"),
    ],
)
def test_a_bad_file_is_refused_naming_the_line_and_what_to_do(text: str, words: str) -> None:
    with pytest.raises(UserError) as raised:
        parse_tenants(text, "--tenants-file 't'")
    assert str(raised.value).startswith("--tenants-file 't'") and words in str(raised.value)


def test_the_one_token_is_a_tenant_of_its_own() -> None:
    one = Tenants.one(A)
    assert not one.several and one.tenant_of(A) == "codemode" and one.tenant_of(B) is None


def test_a_front_takes_one_token_or_tenants_not_both() -> None:
    tenants = parse_tenants(f"alice {A}", "t")
    assert HttpOptions(tenants=tenants).access() is tenants
    with pytest.raises(UserError, match="one token or a tenants file, not both"):
        HttpOptions(token=A, tenants=tenants)
    with pytest.raises(UserError, match="at least 16 characters"):
        HttpOptions()
