"""Runner summaries read from fixture files (tests/tools/verification/), and cut outputs.

The fixtures are real outputs produced on this machine (jest 30, vitest 4, mocha 12, prettier 3,
cargo 1.95 test/clippy/fmt, ruff format) or, for tools not installed here (go, gotestsum,
nextest, playwright, next, vite, golangci-lint, old pytest and mypy), written by hand from the
runners' documented output formats. Cut outputs go through the real :class:`StreamCapture`
(and :class:`ScannedCapture`, which also feeds the whole stream to a :class:`StreamScan`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.tools._capture import StreamCapture
from codemode.tools._terminal import clean_terminal_text
from codemode.tools._verification import (
    ScannedCapture,
    classify_command,
    failure_summary,
    parse_verification,
    scan_for,
)

FIXTURES = Path(__file__).parent / "verification"


def _read(name: str) -> str:
    return clean_terminal_text((FIXTURES / name).read_bytes())


@pytest.mark.parametrize(
    ("fixture", "command", "exit_code", "counts", "summary", "failing"),
    [
        ("jest.txt", "npx jest", 1, (2, 2, 1, 0), "Tests: 2 failed, 1 skipped, 2 passed, 5 total",
         ["math › fails", "math › nested › sub fails"]),
        ("jest-json.stdout", "npx jest --json", 1, (2, 2, 1, 0),
         "2 failed, 2 passed, 1 skipped, 5 total (JSON report)", ["math fails", "math nested sub fails"]),
        ("vitest-colour.txt", "npx vitest run", 1, (2, 2, 1, 0), "Tests 2 failed | 2 passed | 1 skipped (5)",
         ["t/a.spec.mjs > math > fails", "t/a.spec.mjs > math > nested > sub fails"]),
        ("vitest-json.txt", "vitest run --reporter=json", 1, (2, 2, 1, 0),
         "2 failed, 2 passed, 1 skipped, 5 total (JSON report)", ["math fails", "math nested sub fails"]),
        ("mocha.txt", "npx mocha", 1, (1, 1, 1, 0), "1 passing (4ms), 1 pending, 1 failing", ["fails"]),
        ("cargo-test.txt", "cargo test", 101, (3, 1, 1, 0),
         "test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out "
         "(3 test binaries, 1 failed)", ["tests::fails"]),
        # nextest's own Summary wins over the libtest lines of a failing test's captured output.
        ("cargo-nextest.txt", "cargo nextest run", 100, (28, 1, 1, 0),
         "Summary [   0.120s] 29 tests run: 28 passed, 1 failed, 1 skipped", ["tests::fails"]),
        # Subtests (indented "--- FAIL") count; "ok      pkg 0.002s" with spaces is a package.
        ("go-test-v-subtests.txt", "go test -v ./...", 1, (2, 2, 1, 0),
         "ok: 2 packages; FAIL: 1 (example.com/calc)", ["TestDiv", "TestDiv/by_zero"]),
        ("go-test-json.txt", "go test -json ./...", 1, (2, 2, 1, 1),
         "ok: 1 package; FAIL: 2 (example.com/calc, example.com/calc/broken)", ["TestDiv/by_zero", "TestDiv"]),
        ("gotestsum.txt", "gotestsum -- ./...", 1, (9, 2, 1, 0), "DONE 12 tests, 1 skipped, 2 failures in 0.512s",
         []),
        ("playwright.txt", "npx playwright test", 1, (4, 1, 1, 0), "1 failed, 1 skipped, 4 passed (7.9s)",
         ["[chromium] › tests/example.spec.ts:8:5 › get started link"]),
        ("playwright-real.txt", "npx playwright test", 1, (1, 2, 1, 0), "2 failed, 1 skipped, 1 passed (5.2s)",
         ["a.spec.js:3:1 › fails", "a.spec.js:5:32 › group › inner"]),
        ("node-test-tap.txt", "node --test", 1, (1, 2, 0, 0),
         "tests 3, pass 1, fail 2, cancelled 0, skipped 0, todo 0", ["fails", "inner fails", "suite"]),
        ("node-test-spec.txt", "node --test --test-reporter=spec", 1, (1, 2, 0, 0),
         "tests 3, pass 1, fail 2, cancelled 0, skipped 0, todo 0", ["fails", "inner fails", "suite"]),
        ("tsc-7.txt", "npx tsc --noEmit", 1, (None, None, None, 3),
         "ts/a.ts(1,7): error TS2322: Type 'string' is not assignable to type 'number'.", []),
        ("tsc-7-pretty.txt", "npx tsc --noEmit --pretty", 1, (None, None, None, 3), "Found 3 errors in 2 files.", []),
        ("eslint-10.txt", "npx eslint a.js", 1, (None, None, None, 2), "✖ 3 problems (2 errors, 1 warning)", []),
        ("pytest-4-seconds.txt", "pytest", 1, (1, 1, 0, 0), "1 failed, 1 passed in 0.03 seconds", []),
        # clippy: "(lib)" and "(lib test)" report the same two errors.
        ("cargo-clippy-shared-errors.txt", "cargo clippy --all-targets", 101, (None, None, None, 2),
         "error: could not compile `demo` (lib test) due to 2 previous errors", []),
        ("cargo-fmt-check.txt", "cargo fmt --check", 1, (None, None, None, 3),
         "Diff in /tmp/fx/rs/demo/src/lib.rs:1:", []),
        ("ruff-format-check.txt", "ruff format --check .", 1, (None, None, None, 1),
         "1 file would be reformatted, 2 files already formatted", []),
        ("ruff-format-check-ok.txt", "uv run ruff format --check", 0, (None, None, None, 0),
         "2 files already formatted", []),
        ("prettier-check.txt", "npx prettier --check .", 1, (None, None, None, 1), "[warn] t/ugly.js", []),
        ("prettier-check-ok.txt", "prettier -c src", 0, (None, None, None, 0),
         "All matched files use Prettier code style!", []),
        ("next-build-ok.txt", "npx next build", 0, (None, None, None, 0), "✓ Compiled successfully", []),
        ("next-build-fail.txt", "next build", 1, (None, None, None, None), "Failed to compile.", []),
        ("vite-build-ok.txt", "npx vite build", 0, (None, None, None, 0), "✓ built in 612ms", []),
        ("vite-build-fail.txt", "vite build", 1, (None, None, None, None), "error during build:", []),
        ("golangci-lint-v2.txt", "golangci-lint run ./...", 1, (None, None, None, 2), "2 issues:", []),
        ("golangci-lint-v1.txt", "golangci-lint run", 1, (None, None, None, 2),
         "main.go:10:2: Error return value of `os.Remove` is not checked (errcheck)", []),
        ("mypy-0.700-no-total.txt", "mypy .", 1, (None, None, None, 2),
         'a.py:3: error: Incompatible types in assignment (expression has type "str", variable has type "int")',
         []),
    ],
)  # fmt: skip
def test_fixture(
    fixture: str,
    command: str,
    exit_code: int,
    counts: tuple[int | None, ...],
    summary: str,
    failing: list[str],
) -> None:
    cls = classify_command(command)
    assert cls is not None, command
    v = parse_verification(cls, _read(fixture), exit_code)
    assert (v.passed, v.failed, v.skipped, v.errors) == counts
    assert v.summary_line == summary
    assert list(v.failing_tests) == failing
    assert v.ok is (exit_code == 0)
    assert v.complete


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("npx playwright test --project=chromium", ("test", "playwright")),
        ("next build", ("build", "next")),
        ("pnpm exec next lint", ("lint", "next")),
        ("npx vite build --mode staging", ("build", "vite")),
        ("prettier --check .", ("lint", "prettier")),
        ("npx prettier -l src", ("lint", "prettier")),
        ("ruff format --check .", ("lint", "ruff")),
        ("ruff format --diff src", ("lint", "ruff")),
        ("cargo fmt --check", ("lint", "cargo")),
        ("cargo fmt --all -- --check", ("lint", "cargo")),
        ("golangci-lint run ./...", ("lint", "golangci-lint")),
        ("gotestsum --format testname -- ./...", ("test", "gotestsum")),
        ("./gradlew build", ("build", "gradle")),
        ("gradle :app:dependencies clean build", ("build", "gradle")),
    ],
)
def test_classify_new_runners(command: str, expected: tuple[str, str]) -> None:
    cls = classify_command(command)
    assert cls is not None, command
    assert (cls.kind, cls.tool) == expected


@pytest.mark.parametrize(
    "command",
    [
        "gradle dependencies",
        "./gradlew :app:dependencies --configuration runtimeClasspath",
        "gradle tasks --all",
        "ruff format .",
        "cargo fmt",
        "prettier --write .",
        "vite",
        "next dev",
        "golangci-lint version",
        "npx playwright install",
    ],
)
def test_not_verifications(command: str) -> None:
    assert classify_command(command) is None


# ---------------------------------------------------------------------------------------------
# Cut outputs
# ---------------------------------------------------------------------------------------------


def _small(scan: object) -> ScannedCapture:
    cap = ScannedCapture(scan, 0)  # type: ignore[arg-type]
    cap._head_limit = cap._tail_limit = 2048  # the default 16 KiB windows would show it all
    return cap


def test_cut_cargo_counts_are_partial_and_say_so() -> None:
    raw = (FIXTURES / "cargo-test-5-binaries.txt").read_bytes()
    cap = StreamCapture(head_bytes=2048, tail_bytes=2048)
    cap.feed(raw)
    text = cap.excerpt().text
    cls = classify_command("cargo test")
    assert cls is not None
    v = parse_verification(cls, text, 101)
    # Only the last binary's line is in the tail: its counts, marked partial.
    assert (v.passed, v.failed) == (244, 6)
    assert not v.complete
    assert v.covers is not None and "lines cut" in v.covers
    line = failure_summary(v)
    assert line is not None and "partial" in line and "the full log has the rest" in line


def test_cut_cargo_with_the_scan_is_complete_and_names_the_failures() -> None:
    raw = (FIXTURES / "cargo-test-5-binaries.txt").read_bytes()
    cls = classify_command("cargo test")
    scan = scan_for(cls)
    assert cls is not None and scan is not None
    cap = _small(scan)
    for i in range(0, len(raw), 1000):
        cap.feed(raw[i : i + 1000])
    ex = cap.excerpt()
    assert ex.truncated
    v = parse_verification(cls, ex.text, 101, scan)
    assert (v.passed, v.failed, v.skipped) == (1218, 32, 0)  # every binary's "test result" line
    assert v.complete and v.covers is None
    assert len(v.failing_tests) == 20 and v.more_failing_tests == 12
    assert v.failing_tests[0] == "case_1_003"
    line = failure_summary(v)
    assert line is not None
    assert line.startswith("cargo: 32 failed, 1218 passed — ")
    assert line.endswith("and 12 more") and "case_1_003" in line


def test_cut_go_json_counts_every_event() -> None:
    events = [
        f'{{"Action":"{"fail" if i % 10 == 0 else "pass"}","Package":"p","Test":"Test{i}","Elapsed":0}}\n'
        for i in range(2000)
    ]
    raw = ("".join(events) + '{"Action":"fail","Package":"p","Elapsed":0.1}\n').encode()
    cls = classify_command("go test -json ./...")
    assert cls is not None
    plain = StreamCapture(head_bytes=2048, tail_bytes=2048)
    plain.feed(raw)
    partial = parse_verification(cls, plain.excerpt().text, 1)
    assert not partial.complete and partial.passed is not None and partial.passed < 1800
    scan = scan_for(cls)
    cap = _small(scan)
    cap.feed(raw)
    v = parse_verification(cls, cap.excerpt().text, 1, scan)
    assert (v.passed, v.failed, v.complete) == (1800, 200, True)
    assert v.failing_tests[:2] == ("Test0", "Test10") and v.more_failing_tests == 180


def test_cut_pytest_total_stays_complete_and_names_come_from_the_stream(tmp_path: Path) -> None:
    # pytest's closing line is its own total: complete even when the middle is cut.
    body = "".join(f"t.py::test_{i} {'FAILED' if i % 7 == 0 else 'PASSED'} [ 1%]\n" for i in range(700))
    raw = (body + "=========== 100 failed, 600 passed in 1.00s ===========\n").encode()
    cls = classify_command("pytest -v")
    scan = scan_for(cls)
    assert cls is not None and scan is not None
    cap = _small(scan)
    cap.feed(raw)
    v = parse_verification(cls, cap.excerpt().text, 1, scan)
    assert (v.passed, v.failed, v.complete) == (600, 100, True)
    assert v.failing_tests[:3] == ("t.py::test_0", "t.py::test_7", "t.py::test_14")
    assert v.more_failing_tests == 80


def test_cut_line_counts_are_partial() -> None:
    cap = StreamCapture(head_bytes=200, tail_bytes=200)
    cap.feed("".join(f"main.go:{i}:2: unused x (unused)\n" for i in range(100)).encode())
    cls = classify_command("golangci-lint run")
    assert cls is not None
    v = parse_verification(cls, cap.excerpt().text, 1)
    assert v.errors is not None and v.errors < 100 and not v.complete


def test_scan_joins_lines_split_across_chunks_and_strips_colour() -> None:
    cls = classify_command("npx vitest run")
    scan = scan_for(cls)
    assert scan is not None
    raw = (FIXTURES / "vitest-colour.txt").read_bytes()
    for i in range(0, len(raw), 7):
        scan.feed(1, raw[i : i + 7])
    scan.close()
    assert scan.failing == ["t/a.spec.mjs > math > fails", "t/a.spec.mjs > math > nested > sub fails"]


def test_no_scan_for_commands_that_need_none() -> None:
    assert scan_for(None) is None
    assert scan_for(classify_command("mypy .")) is None
    assert scan_for(classify_command("pytest")) is not None
    assert scan_for(classify_command("cargo build")) is not None  # the tally reads compile errors
