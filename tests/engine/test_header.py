"""The optional `// @run_code: {...}` first-line header."""

from __future__ import annotations

import pytest

from codemode.engine import HeaderError, HeaderOptions, parse_header


def test_no_header_gives_no_options() -> None:
    assert parse_header('print(1)\n// @run_code: {"max_output_tokens": 5}') == HeaderOptions()
    assert parse_header("") == HeaderOptions()


@pytest.mark.parametrize(
    "line",
    [
        '// @run_code: {"max_output_tokens": 2000, "timeout_seconds": 120}',
        '//@run_code:{"max_output_tokens":2000,"timeout_seconds":120}',
        '  //   @run_code   {"max_output_tokens": 2000, "timeout_seconds": 120.0}  ',
    ],
)
def test_header_options_are_read(line: str) -> None:
    options = parse_header(line + "\nprint(1)")
    assert options == HeaderOptions(max_output_tokens=2000, timeout_seconds=120.0)
    assert isinstance(options.timeout_seconds, float)


def test_a_partial_header_leaves_the_rest_unset() -> None:
    assert parse_header('// @run_code: {"timeout_seconds": 0.5}') == HeaderOptions(timeout_seconds=0.5)
    assert parse_header("// @run_code: {}") == HeaderOptions()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('// @run_code: {"max_output_tokens": 2000', "not valid JSON"),
        ("// @run_code: max_output_tokens=5", "not valid JSON"),
        ("// @run_code:", "not valid JSON"),
        ("// @run_code: [1, 2]", "must be a JSON object"),
        ('// @run_code: {"max_tokens": 5}', "unknown option 'max_tokens'"),
        ('// @run_code: {"max_output_tokens": 0}', "max_output_tokens must be an integer of at least 80"),
        (
            '// @run_code: {"max_output_tokens": 79}',
            "at least 80 (room for the line naming the archived rest), got 79",
        ),
        ('// @run_code: {"max_output_tokens": -3}', "got -3"),
        ('// @run_code: {"max_output_tokens": 10.5}', "got 10.5"),
        ('// @run_code: {"max_output_tokens": "100"}', 'got "100"'),
        ('// @run_code: {"max_output_tokens": true}', "got true"),
        ('// @run_code: {"timeout_seconds": 0}', "timeout_seconds must be a positive number"),
        ('// @run_code: {"timeout_seconds": "5"}', 'got "5"'),
        ('// @run_code: {"timeout_seconds": false}', "got false"),
        ('// @run_code: {"timeout_seconds": null, "max_output_tokens": null}', None),
    ],
)
def test_bad_headers_name_what_is_wrong(line: str, expected: str | None) -> None:
    if expected is None:  # explicit nulls mean "not given"
        assert parse_header(line) == HeaderOptions()
        return
    with pytest.raises(HeaderError) as info:
        parse_header(line + "\nprint(1)")
    assert expected in str(info.value)


def test_bad_json_message_shows_the_right_form() -> None:
    with pytest.raises(
        HeaderError, match=r'// @run_code: \{"max_output_tokens": 2000, "timeout_seconds": 120\}'
    ):
        parse_header("// @run_code: {oops}")


def test_unknown_key_message_lists_the_known_keys() -> None:
    with pytest.raises(HeaderError, match="known options: max_output_tokens, timeout_seconds"):
        parse_header('// @run_code: {"timeout": 5}')
