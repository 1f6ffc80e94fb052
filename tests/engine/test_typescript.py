"""TypeScript programs: types blanked with every line and column kept (issue 28, item 6)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from codemode import Host
from codemode.engine._typescript import TypeScriptError, strip_types

pytestmark = pytest.mark.anyio

CONSTRUCTS = """\
interface Row { name: string; size?: number }
type Pair<T> = [T, T];
declare const injected: number;
function pick<T extends Row>(rows: T[], min: number = 0, label?: string): T | undefined {
  return rows.find((r: T): boolean => (r.size ?? 0) > min);
}
function over(a: string): string;
function over(a: any): any { return a; }
abstract class Base<T> implements Row {
  public name: string = "base";
  private readonly hidden?: number;
  declare extra: number;
  protected static count: number = 0;
  abstract kind(): string;
  override toString(): string { return this.name; }
}
class Leaf extends Base<number> { kind(): string { return "leaf"; } }
const rows = [{name: "a", size: 1}, {name: "b", size: 5}] satisfies Row[];
let late!: string;
late = "set";
const first = pick<Row>(rows, 2)!;
const n = <number>(rows.length as unknown);
const pair: Pair<string> = [first.name, late];
const ident = <T,>(v: T): T => v;
print(pair.join(","), n, ident<string>(new Leaf().kind()), over("x"));
"""


def test_stripping_keeps_every_line_and_column() -> None:
    stripped = strip_types(CONSTRUCTS)
    assert stripped is not None
    assert [len(line) for line in stripped.split("\n")] == [len(line) for line in CONSTRUCTS.split("\n")]
    for before, after in zip(CONSTRUCTS.split("\n"), stripped.split("\n"), strict=True):
        assert all(a == b or a == " " for a, b in zip(after, before, strict=True)), (before, after)
    assert "interface" not in stripped and ": string" not in stripped and " as " not in stripped
    assert "const first = pick     (rows, 2) ;" in stripped  # f<T>(x) and the trailing !


def test_plain_javascript_has_nothing_to_strip() -> None:
    assert strip_types('const a = {b: 1}; print(a.b ? "x" : "y", [1].map((x) => x * 2));') is None


def test_columns_count_characters_not_bytes() -> None:
    source = 'const s: "é€🎉" = "é€🎉"; print(s)'
    stripped = strip_types(source)
    assert stripped == "const s" + " " * len(': "é€🎉"') + ' = "é€🎉"; print(s)'  # one space a character


async def run(host: Host, source: str) -> Any:
    with anyio.fail_after(60):
        return await host.run_code(source)


async def test_a_typescript_program_runs(host: Host) -> None:
    result = await run(host, CONSTRUCTS)
    assert result.ok, result.text
    assert result.text == "b,set 2 leaf x\n"


async def test_an_error_names_the_models_own_line_and_column(host: Host) -> None:
    source = "const a: number = 1;\ninterface X { y: string }\nlet b: X | null = null;\nprint(a, b!.y);"
    plain = "const a = 1;\n\nlet b = null;\nprint(a, b.y);"
    result, expected = await run(host, source), await run(host, plain)
    assert result.error is not None and expected.error is not None
    assert result.error.name == "TypeError" and result.error.line == expected.error.line == 4
    assert result.error.column == expected.error.column


async def test_a_real_syntax_error_in_typescript_is_named_where_it_is(host: Host) -> None:
    result = await run(host, "const a: number = 1;\nconst b = (a +;\n")
    assert result.error is not None and result.error.kind == "syntax_error"
    assert result.error.name == "SyntaxError" and result.error.line == 2


@pytest.mark.parametrize(
    ("source", "construct", "line"),
    [
        ("print(1);\nenum Color { Red, Green }", "an enum", 2),
        ("namespace NS { export const a = 1 }", "a namespace", 1),
        (
            "let a = 1;\n\nclass P { constructor(private x: number) {} }",
            "a constructor parameter property",
            3,
        ),
        ("class P { constructor(readonly x: number) {} }", "a constructor parameter property", 1),
    ],
)
async def test_syntax_that_cannot_be_stripped_is_named(
    host: Host, source: str, construct: str, line: int
) -> None:
    with pytest.raises(TypeScriptError):
        strip_types(source)
    result = await run(host, source)
    assert result.error is not None
    assert (result.error.kind, result.error.name, result.error.line) == (
        "syntax_error",
        "TypeScriptError",
        line,
    )
    assert f"TypeScript {construct} cannot be run as JavaScript" in result.text
    assert f"(line {line}:" in result.text
