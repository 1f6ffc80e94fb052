"""Classification of verification commands and parsing of their real summaries.

Runners installed here (pytest, unittest, mypy, ruff, pyright, node --test, npm, make, cargo,
mvn) are run for real on tiny projects in tmp_path and their actual output is parsed. Runners
not installed here (jest, vitest, mocha, go, tsc, eslint, flake8, gradle) are covered by SAMPLE
outputs embedded below: written in each runner's documented output format, not generated on
this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codemode.tools._capture import StreamCapture
from codemode.tools._terminal import clean_terminal_text
from codemode.tools._verification import (
    Classification,
    Verification,
    classify_command,
    failure_summary,
    parse_verification,
)


def _run(command: str, cwd: Path, timeout: float = 120) -> tuple[str, int]:
    # The tools under test (python, mypy, ruff, pytest) are this interpreter's, venv activated or not.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**os.environ, "PATH": path},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    return clean_terminal_text(proc.stdout), proc.returncode


def _verify(command: str, cwd: Path, timeout: float = 120) -> tuple[Verification, str]:
    cls = classify_command(command)
    assert cls is not None, command
    output, code = _run(command, cwd, timeout)
    return parse_verification(cls, output, code), output


# ---------------------------------------------------------------------------------------------
# classify_command
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("pytest", ("test", "pytest")),
        ("pytest -x tests/test_a.py::test_b", ("test", "pytest")),
        ("python -m pytest -q", ("test", "pytest")),
        ("python3.11 -u -m pytest", ("test", "pytest")),
        (".venv/bin/python -mpytest", ("test", "pytest")),
        ("cd backend && FOO=1 BAR='x y' pytest -q | tail -20", ("test", "pytest")),
        ("timeout 60 pytest", ("test", "pytest")),
        ("timeout -s KILL 5m uv run --with pytest-xdist pytest -n 2", ("test", "pytest")),
        ("env -u PYTHONPATH CI=1 poetry run pytest", ("test", "pytest")),
        ("uv run python -m pytest tests", ("test", "pytest")),
        ("coverage run -m pytest", ("test", "pytest")),
        ("bash -c 'cd x && pytest'", ("test", "pytest")),
        ("python -m unittest discover -s tests", ("test", "unittest")),
        ("python -m unittest", ("test", "unittest")),
        ("python manage.py test app", ("test", "django")),
        ("./manage.py test", ("test", "django")),
        ("tox -e py311", ("test", "tox")),
        ("/usr/bin/time -v pytest", ("test", "pytest")),
        ("npm --prefix web test", ("test", "npm")),
        ("pnpm --filter api test", ("test", "pnpm")),
        ("yarn workspace api test", ("test", "yarn")),
        ("yarn workspace api run build", ("build", "yarn")),
        ("go test ./...", ("test", "go")),
        ("go build ./cmd/app", ("build", "go")),
        ("go vet ./...", ("lint", "go")),
        ("cargo test --workspace", ("test", "cargo")),
        ("cargo +nightly -q test", ("test", "cargo")),
        ("cargo build --release", ("build", "cargo")),
        ("cargo clippy -- -D warnings", ("lint", "cargo")),
        ("npm test", ("test", "npm")),
        ("npm run test", ("test", "npm")),
        ("npm run test:unit -- --watch=false", ("test", "npm")),
        ("npm run build", ("build", "npm")),
        ("npm run lint", ("lint", "npm")),
        ("pnpm test", ("test", "pnpm")),
        ("pnpm exec jest", ("test", "jest")),
        ("pnpm vitest run", ("test", "vitest")),
        ("yarn test", ("test", "yarn")),
        ("yarn jest --ci", ("test", "jest")),
        ("yarn build", ("build", "yarn")),
        ("npx jest src", ("test", "jest")),
        ("npx -y vitest run", ("test", "vitest")),
        ("./node_modules/.bin/mocha", ("test", "mocha")),
        ("node --test", ("test", "node")),
        ("npx tsc --noEmit", ("typecheck", "tsc")),
        ("tsc -p .", ("typecheck", "tsc")),
        ("mypy --strict src", ("typecheck", "mypy")),
        ("python -m mypy .", ("typecheck", "mypy")),
        ("pyright", ("typecheck", "pyright")),
        ("ruff check .", ("lint", "ruff")),
        ("ruff .", ("lint", "ruff")),
        ("uvx ruff check --fix", ("lint", "ruff")),
        ("npx eslint . --ext .ts", ("lint", "eslint")),
        ("flake8 src", ("lint", "flake8")),
        ("make", ("build", "make")),
        ("make -j4 all", ("build", "make")),
        ("make -C sub test", ("test", "make")),
        ("make check", ("test", "make")),
        ("make lint", ("lint", "make")),
        ("./gradlew build", ("build", "gradle")),
        ("./gradlew :app:test --info", ("test", "gradle")),
        ("gradle check", ("test", "gradle")),
        ("mvn -B test", ("test", "mvn")),
        ("mvn clean verify", ("test", "mvn")),
        ("mvn package -DskipTests", ("build", "mvn")),
        ("ruff check . && mypy . && pytest", ("test", "pytest")),
        ("cargo build && cargo test 2>&1 | tee log.txt", ("test", "cargo")),
        ("ruff check . ; mypy src", ("typecheck", "mypy")),
        ("pytest 'unbalanced", ("test", "pytest")),
        ("pip install -e . && \\\n  pytest", ("test", "pytest")),
    ],
)
def test_classify_recognises(command: str, expected: tuple[str, str]) -> None:
    cls = classify_command(command)
    assert cls is not None, command
    assert (cls.kind, cls.tool) == expected


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "echo pytest",
        "git commit -m 'run pytest'",
        "grep -r pytest .",
        "pip install pytest",
        "npm install",
        "npm ci",
        "cat log | grep FAILED",
        "python script.py",
        "python -c 'import pytest'",
        "ruff format .",
        "cargo run",
        "go run main.go",
        "",
        "   ",
        "'",
        "cd /tmp && ls",
    ],
)
def test_classify_ignores(command: str) -> None:
    assert classify_command(command) is None


# ---------------------------------------------------------------------------------------------
# Real runners
# ---------------------------------------------------------------------------------------------


# Third-party plugins installed here only slow the inner pytest down; also exercises an env prefix.
_NO_PLUGINS = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1"


def _pytest_project(root: Path) -> None:
    (root / "test_mixed.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.fixture
            def broken():
                raise RuntimeError("fixture broke")

            def test_one(): assert 1 + 1 == 2
            def test_two(): assert "a" in "abc"
            def test_fails(): assert [1, 2] == [1, 3]
            def test_errors(broken): pass
            @pytest.mark.skip(reason="not today")
            def test_skipped(): pass
            """
        )
    )


def test_pytest_real_failures(tmp_path: Path) -> None:
    _pytest_project(tmp_path)
    v, output = _verify(f"{_NO_PLUGINS} python -m pytest -p no:cacheprovider", tmp_path)
    assert "1 failed, 2 passed, 1 skipped, 1 error in" in output
    assert (v.kind, v.tool, v.ok) == ("test", "pytest", False)
    assert (v.passed, v.failed, v.skipped, v.errors) == (2, 1, 1, 1)
    assert v.summary_line is not None
    assert v.summary_line.startswith("=") and "1 failed, 2 passed, 1 skipped, 1 error in" in v.summary_line
    summary = failure_summary(v)
    assert summary is not None
    assert summary.startswith("pytest: 1 failed, 1 error, 2 passed, 1 skipped — ==")


def test_pytest_real_quiet_colour_and_pipe(tmp_path: Path) -> None:
    _pytest_project(tmp_path)
    v, _ = _verify(f"{_NO_PLUGINS} python -m pytest -q --color=yes -p no:cacheprovider", tmp_path)
    assert (v.passed, v.failed, v.skipped, v.errors, v.ok) == (2, 1, 1, 1, False)
    assert v.summary_line is not None and not v.summary_line.startswith("=")
    # Through a pipe the exit code is tail's (0): the parsed failures still make it a failure.
    v, _ = _verify(f"{_NO_PLUGINS} python -m pytest -p no:cacheprovider | tail -3", tmp_path)
    assert v.failed == 1 and v.ok is False


def test_pytest_real_all_passing(tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text("def test_a(): pass\ndef test_b(): pass\n")
    v, _ = _verify(f"{_NO_PLUGINS} pytest -p no:cacheprovider", tmp_path)
    assert (v.passed, v.failed, v.skipped, v.errors, v.ok) == (2, 0, 0, 0, True)
    assert failure_summary(v) is None


def test_pytest_real_long_output_cut_by_capture(tmp_path: Path) -> None:
    lines = [f"def test_{i}(): assert {i} % 50 != 7" for i in range(400)]
    (tmp_path / "test_many.py").write_text("\n".join(lines) + "\n")
    command = f"{_NO_PLUGINS} python -m pytest -v -p no:cacheprovider"
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True)
    cap = StreamCapture(head_bytes=2048, tail_bytes=2048)
    cap.feed(proc.stdout)
    ex = cap.excerpt(note="full log: ref log-1")
    assert ex.truncated
    cls = classify_command(command)
    assert cls is not None
    v = parse_verification(cls, ex.text, proc.returncode)
    assert (v.passed, v.failed, v.ok) == (392, 8, False)
    names = ", ".join(f"test_many.py::test_{i}" for i in range(7, 400, 50))
    assert failure_summary(v) == f"pytest: 8 failed, 392 passed — {v.summary_line}; failing: {names}"


def test_unittest_real(tmp_path: Path) -> None:
    (tmp_path / "test_u.py").write_text(
        textwrap.dedent(
            """
            import unittest

            class T(unittest.TestCase):
                def test_ok(self): pass
                def test_ok2(self): pass
                def test_fail(self): self.assertEqual(1, 2)
                def test_error(self): raise RuntimeError("boom")
                @unittest.skip("later")
                def test_skip(self): pass
                @unittest.expectedFailure
                def test_xfail(self): self.assertTrue(False)
            """
        )
    )
    v, output = _verify("python -m unittest test_u", tmp_path)
    assert "FAILED (failures=1, errors=1, skipped=1, expected failures=1)" in output
    assert (v.passed, v.failed, v.errors, v.skipped, v.ok) == (2, 1, 1, 1, False)
    assert v.summary_line is not None
    assert v.summary_line.startswith("Ran 6 tests in ")
    assert v.summary_line.endswith("; FAILED (failures=1, errors=1, skipped=1, expected failures=1)")

    (tmp_path / "test_good.py").write_text(
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self): pass\n"
    )
    v, _ = _verify("python -m unittest test_good", tmp_path)
    assert (v.passed, v.failed, v.errors, v.skipped, v.ok) == (1, 0, 0, 0, True)
    assert v.summary_line is not None and v.summary_line.endswith("; OK")


def test_mypy_real(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text('x: int = "a"\ndef f() -> str:\n    return 1\n')
    (tmp_path / "good.py").write_text("x: int = 1\n")
    cache = f"--cache-dir {tmp_path / '.mypy_cache'}"
    v, _ = _verify(f"mypy {cache} bad.py good.py", tmp_path)
    assert (v.kind, v.tool, v.errors, v.ok) == ("typecheck", "mypy", 2, False)
    assert v.summary_line == "Found 2 errors in 1 file (checked 2 source files)"
    assert failure_summary(v) == "mypy: 2 errors — Found 2 errors in 1 file (checked 2 source files)"
    v, _ = _verify(f"python -m mypy {cache} good.py", tmp_path)
    assert (v.errors, v.ok, v.summary_line) == (0, True, "Success: no issues found in 1 source file")


def test_ruff_real(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import os\nimport sys\nprint(undefined_name)\n")
    v, output = _verify("ruff check --isolated --no-cache --output-format concise a.py", tmp_path)
    reported = [line for line in output.splitlines() if line.startswith("a.py:")]
    assert len(reported) >= 3  # F401 x2, F821 (and I001 where that rule is on by default)
    assert (v.kind, v.tool, v.errors, v.ok) == ("lint", "ruff", len(reported), False)
    assert v.summary_line == f"Found {len(reported)} errors."
    v, _ = _verify("ruff check --isolated --no-cache --fix a.py", tmp_path)
    assert (v.errors, v.ok) == (1, False)  # only the undefined name cannot be fixed
    assert v.summary_line is not None and v.summary_line.endswith(" fixed, 1 remaining).")
    (tmp_path / "a.py").write_text("print('fine')\n")
    v, _ = _verify("ruff check --isolated --no-cache a.py", tmp_path)
    assert (v.errors, v.ok, v.summary_line) == (0, True, "All checks passed!")


@pytest.mark.skipif(shutil.which("pyright") is None, reason="pyright not installed")
def test_pyright_real(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text('x: int = "a"\ny: str = 2\n')
    v, output = _verify("pyright bad.py", tmp_path)
    if "error" not in output:
        pytest.skip(f"pyright did not run: {output[-300:]}")
    assert (v.kind, v.tool, v.errors, v.ok) == ("typecheck", "pyright", 2, False)
    assert v.summary_line == "2 errors, 0 warnings, 0 informations"
    (tmp_path / "bad.py").write_text("x: int = 1\n")
    v, _ = _verify("pyright bad.py", tmp_path)
    assert (v.errors, v.ok) == (0, True)


_NODE_TESTS = """
const test = require('node:test');
const assert = require('node:assert');
test('adds', () => { assert.equal(1 + 1, 2); });
test('also adds', () => { assert.equal(2 + 2, 4); });
test('breaks', () => { assert.equal(1, 2); });
test('later', { skip: true }, () => {});
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_node_test_runner_real(tmp_path: Path) -> None:
    (tmp_path / "a.test.js").write_text(_NODE_TESTS)
    v, _ = _verify("node --test", tmp_path)
    assert (v.kind, v.tool, v.passed, v.failed, v.skipped, v.ok) == ("test", "node", 2, 1, 1, False)
    assert (
        v.summary_line is not None
        and v.summary_line == "tests 4, pass 2, fail 1, cancelled 0, skipped 1, todo 0"
    )


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm not installed")
def test_npm_test_real(tmp_path: Path) -> None:
    (tmp_path / "a.test.js").write_text(_NODE_TESTS)
    (tmp_path / "package.json").write_text(
        json.dumps({"name": "demo", "version": "1.0.0", "scripts": {"test": "node --test"}})
    )
    v, output = _verify("npm test", tmp_path)
    assert "> node --test" in output
    assert (v.kind, v.tool, v.passed, v.failed, v.ok) == ("test", "npm", 2, 1, False)


def test_make_real(tmp_path: Path) -> None:
    (tmp_path / "test_m.py").write_text(
        "import unittest\nclass T(unittest.TestCase):\n    def test_f(self): self.fail('x')\n"
    )
    (tmp_path / "Makefile").write_text("test:\n\tpython -m unittest test_m\nbuild:\n\texit 2\n")
    v, _ = _verify("make test", tmp_path)
    assert (v.kind, v.tool, v.failed, v.ok) == ("test", "make", 1, False)
    assert v.summary_line is not None and v.summary_line.startswith("Ran 1 test in")
    v, _ = _verify("make build", tmp_path)
    assert (v.kind, v.ok, v.summary_line) == ("build", False, "make: *** [Makefile:4: build] Error 2")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo not installed")
def test_cargo_real(tmp_path: Path) -> None:
    subprocess.run(["cargo", "new", "--offline", "-q", "demo"], cwd=tmp_path, check=True)
    crate = tmp_path / "demo"
    env = f"CARGO_TARGET_DIR={tmp_path / 'target'}"
    (crate / "src" / "main.rs").write_text(
        "fn main() {}\n#[cfg(test)]\nmod tests {\n"
        "    #[test] fn ok() { assert_eq!(1, 1); }\n"
        "    #[test] fn ok2() { assert_eq!(2, 2); }\n"
        "    #[test] fn bad() { assert_eq!(1, 2); }\n"
        "    #[test] #[ignore] fn later() {}\n}\n"
    )
    v, _ = _verify(f"{env} cargo test --offline", crate, timeout=300)
    assert (v.kind, v.tool, v.passed, v.failed, v.skipped, v.ok) == ("test", "cargo", 2, 1, 1, False)
    assert v.summary_line is not None
    assert v.summary_line.startswith("test result: FAILED. 2 passed; 1 failed; 1 ignored")
    v, _ = _verify(f"{env} cargo build --offline", crate, timeout=300)
    assert (v.kind, v.errors, v.ok) == ("build", 0, True)
    assert v.summary_line is not None and v.summary_line.startswith("Finished `dev` profile")
    (crate / "src" / "main.rs").write_text('fn main() { let x: i32 = "a"; let y: u8 = -1; }\n')
    v, _ = _verify(f"{env} cargo build --offline", crate, timeout=300)
    assert (v.errors, v.ok) == (2, False)
    assert v.summary_line == 'error: could not compile `demo` (bin "demo") due to 2 previous errors'


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>demo</groupId><artifactId>demo</artifactId><version>1.0</version>
  <properties><maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>
  <dependencies><dependency><groupId>org.junit.jupiter</groupId><artifactId>junit-jupiter</artifactId>
    <version>5.10.2</version><scope>test</scope></dependency></dependencies>
  <build><plugins>
    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-compiler-plugin</artifactId>
      <version>3.11.0</version></plugin>
    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-surefire-plugin</artifactId>
      <version>3.2.5</version></plugin>
    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-resources-plugin</artifactId>
      <version>3.3.1</version></plugin>
  </plugins></build>
</project>
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mvn") is None, reason="mvn not installed")
def test_mvn_real(tmp_path: Path) -> None:
    (tmp_path / "pom.xml").write_text(_POM)
    src = tmp_path / "src" / "test" / "java" / "demo"
    src.mkdir(parents=True)
    (src / "DemoTest.java").write_text(
        "package demo;\nimport org.junit.jupiter.api.*;\nimport static org.junit.jupiter.api.Assertions.*;\n"
        "public class DemoTest {\n  @Test void ok() { assertEquals(1, 1); }\n"
        "  @Test void bad() { assertEquals(1, 2); }\n  @Disabled @Test void later() {}\n}\n"
    )
    v, output = _verify("mvn -o -B test", tmp_path, timeout=300)
    if "Tests run:" not in output:
        pytest.skip(f"maven could not run offline here: {output[-400:]}")
    assert (v.kind, v.tool, v.passed, v.failed, v.errors, v.skipped, v.ok) == (
        "test",
        "mvn",
        1,
        1,
        0,
        1,
        False,
    )
    assert v.summary_line == "Tests run: 3, Failures: 1, Errors: 0, Skipped: 1; [INFO] BUILD FAILURE"


# ---------------------------------------------------------------------------------------------
# SAMPLE outputs (runner not installed here; written in the runner's documented format)
# ---------------------------------------------------------------------------------------------

SAMPLE_JEST = """\
 FAIL  src/sum.test.js
  ● sum › adds negative numbers

    expect(received).toBe(expected) // Object.is equality

    Expected: -3
    Received: -1

      at Object.toBe (src/sum.test.js:5:25)

 PASS  src/util.test.js

Test Suites: 1 failed, 1 passed, 2 total
Tests:       1 failed, 1 skipped, 4 passed, 6 total
Snapshots:   0 total
Time:        0.512 s, estimated 1 s
Ran all test suites.
"""

SAMPLE_VITEST = """\
 ❯ src/sum.test.ts (3 tests | 1 failed) 5ms
   × sum > adds negative numbers
     → expected -1 to be -3 // Object.is equality

 Test Files  1 failed | 1 passed (2)
      Tests  1 failed | 4 passed | 1 skipped (6)
   Start at  14:02:11
   Duration  412ms (transform 40ms, setup 0ms, collect 35ms, tests 6ms, environment 0ms, prepare 95ms)
"""

SAMPLE_MOCHA = """\

  sum
    ✔ adds positive numbers
    1) adds negative numbers
    - is pending


  5 passing (12ms)
  1 pending
  1 failing

  1) sum
       adds negative numbers:
     AssertionError [ERR_ASSERTION]: -1 == -3
      at Context.<anonymous> (test/sum.test.js:9:12)

"""

SAMPLE_GO_TEST = """\
--- FAIL: TestAdd (0.00s)
    add_test.go:9: Add(1, 2) = 4, want 3
--- FAIL: TestSub (0.00s)
    --- FAIL: TestSub/negative (0.00s)
        sub_test.go:14: got 1
FAIL
FAIL\texample.com/calc\t0.002s
ok  \texample.com/calc/util\t0.003s
?   \texample.com/calc/cmd\t[no test files]
FAIL
"""

SAMPLE_GO_TEST_BUILD_FAILED = """\
# example.com/calc [example.com/calc.test]
./add.go:4:9: undefined: y
FAIL\texample.com/calc [build failed]
ok  \texample.com/calc/util\t(cached)
FAIL
"""

SAMPLE_GO_BUILD = """\
# example.com/calc
./add.go:4:9: undefined: y
./add.go:7:2: declared and not used: z
"""

SAMPLE_TSC_PLAIN = """\
src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.
src/b.ts(1,10): error TS2305: Module '"./a"' has no exported member 'c'.
"""

SAMPLE_TSC_PRETTY = """\
src/a.ts:3:7 - error TS2322: Type 'string' is not assignable to type 'number'.

3 const x: number = "a";
        ~


Found 1 error in src/a.ts:3

"""

SAMPLE_ESLINT = """\

/home/u/proj/src/a.js
  1:7  error    'x' is assigned a value but never used  no-unused-vars
  2:1  warning  Unexpected console statement             no-console
  5:3  error    'y' is not defined                       no-undef

✖ 3 problems (2 errors, 1 warning)

"""

SAMPLE_FLAKE8 = """\
./a.py:1:1: F401 'os' imported but unused
./a.py:3:80: E501 line too long (88 > 79 characters)
./b.py:10:5: E303 too many blank lines (3)
"""

SAMPLE_GRADLE = """\
> Task :app:test FAILED

AppTest > failingTest() FAILED
    org.opentest4j.AssertionFailedError at AppTest.java:12

3 tests completed, 1 failed, 1 skipped

FAILURE: Build failed with an exception.

* What went wrong:
Execution failed for task ':app:test'.
> There were failing tests. See the report at: file:///p/app/build/reports/tests/test/index.html

BUILD FAILED in 4s
3 actionable tasks: 2 executed, 1 up-to-date
"""


@pytest.mark.parametrize(
    ("command", "sample", "exit_code", "expected"),
    [
        ("npx jest", SAMPLE_JEST, 1, (4, 1, 1, 0, False, "Tests: 1 failed, 1 skipped, 4 passed, 6 total")),
        ("npm test", SAMPLE_JEST, 1, (4, 1, 1, 0, False, "Tests: 1 failed, 1 skipped, 4 passed, 6 total")),
        (
            "npx vitest run",
            SAMPLE_VITEST,
            1,
            (4, 1, 1, 0, False, "Tests 1 failed | 4 passed | 1 skipped (6)"),
        ),
        ("pnpm test", SAMPLE_VITEST, 1, (4, 1, 1, 0, False, "Tests 1 failed | 4 passed | 1 skipped (6)")),
        ("mocha", SAMPLE_MOCHA, 1, (5, 1, 1, 0, False, "5 passing (12ms), 1 pending, 1 failing")),
        ("yarn test", SAMPLE_MOCHA, 1, (5, 1, 1, 0, False, "5 passing (12ms), 1 pending, 1 failing")),
        (
            "go test ./...",
            SAMPLE_GO_TEST,
            1,
            (None, 3, None, 0, False, "ok: 1 package; FAIL: 1 (example.com/calc)"),  # a subtest too
        ),
        (
            "go test ./...",
            SAMPLE_GO_TEST_BUILD_FAILED,
            1,
            (None, 0, None, 1, False, "ok: 1 package; FAIL: 1 (example.com/calc)"),
        ),
        ("go build ./...", SAMPLE_GO_BUILD, 1, (None, None, None, 2, False, "./add.go:4:9: undefined: y")),
        (
            "tsc --noEmit",
            SAMPLE_TSC_PLAIN,
            2,
            (
                None,
                None,
                None,
                2,
                False,
                "src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
            ),
        ),
        ("npx tsc", SAMPLE_TSC_PRETTY, 2, (None, None, None, 1, False, "Found 1 error in src/a.ts:3")),
        ("eslint .", SAMPLE_ESLINT, 1, (None, None, None, 2, False, "✖ 3 problems (2 errors, 1 warning)")),
        (
            "flake8",
            SAMPLE_FLAKE8,
            1,
            (None, None, None, 3, False, "./a.py:1:1: F401 'os' imported but unused"),
        ),
        (
            "./gradlew test",
            SAMPLE_GRADLE,
            1,
            (1, 1, 1, None, False, "3 tests completed, 1 failed, 1 skipped; BUILD FAILED in 4s"),
        ),
    ],
)
def test_sample_outputs(
    command: str,
    sample: str,
    exit_code: int,
    expected: tuple[int | None, int | None, int | None, int | None, bool, str],
) -> None:
    cls = classify_command(command)
    assert cls is not None
    v = parse_verification(cls, sample, exit_code)
    assert (v.passed, v.failed, v.skipped, v.errors, v.ok, v.summary_line) == expected


@pytest.mark.parametrize(
    ("command", "tool"),
    [("eslint .", "eslint"), ("flake8", "flake8"), ("tsc", "tsc"), ("go vet ./...", "go")],
)
def test_quiet_tools_clean_run_means_zero_errors(command: str, tool: str) -> None:
    cls = classify_command(command)
    assert cls is not None and cls.tool == tool
    v = parse_verification(cls, "", 0)
    assert (v.errors, v.ok) == (0, True)
    v = parse_verification(cls, "", 1)
    assert (v.errors, v.ok) == (None, False)


def test_line_counts_partial_when_output_was_cut() -> None:
    cap = StreamCapture(head_bytes=200, tail_bytes=200)
    cap.feed("".join(f"./m{i}.py:1:1: F401 'os' imported but unused\n" for i in range(100)).encode())
    cls = classify_command("flake8")
    assert cls is not None
    v = parse_verification(cls, cap.excerpt().text, 1)
    assert v.errors == 8 and v.ok is False and not v.complete
    assert v.covers == "the head and tail of the output shown (92 lines cut between them)"
    assert failure_summary(v) == (
        "flake8: 8 errors (partial: counted in the head and tail of the output shown (92 lines cut between "
        "them); the full log has the rest) — ./m0.py:1:1: F401 'os' imported but unused"
    )


# ---------------------------------------------------------------------------------------------
# Verdict, serialisation, big outputs
# ---------------------------------------------------------------------------------------------


def test_ok_follows_exit_code_and_failures() -> None:
    cls = Classification("test", "pytest")
    passing = "==== 3 passed in 0.10s ===="
    failing = "==== 1 failed, 2 passed in 0.10s ===="
    assert parse_verification(cls, passing, 0).ok is True
    assert parse_verification(cls, passing, 1).ok is False
    assert parse_verification(cls, failing, 0).ok is False
    assert parse_verification(cls, passing, None).ok is None
    assert parse_verification(cls, failing, None).ok is False
    nothing = parse_verification(cls, "command not found", 127)
    assert (nothing.ok, nothing.passed, nothing.summary_line) == (False, None, None)
    assert failure_summary(nothing) == "pytest: failed"


def test_to_dict_is_json() -> None:
    cls = Classification("test", "pytest")
    v = parse_verification(cls, "== 1 failed, 2 passed in 0.10s ==", 1)
    data = json.loads(json.dumps(v.to_dict()))
    assert data == {
        "kind": "test",
        "tool": "pytest",
        "ok": False,
        "passed": 2,
        "failed": 1,
        "skipped": 0,
        "errors": 0,
        "summary_line": "== 1 failed, 2 passed in 0.10s ==",
        "complete": True,
        "covers": None,
        "failing_tests": [],
        "more_failing_tests": 0,
    }
    assert json.loads(json.dumps(cls.to_dict())) == {"kind": "test", "tool": "pytest"}


def test_big_output_reads_only_the_tail() -> None:
    cls = Classification("test", "pytest")
    # A summary-looking line far from the end is not the summary; the real one at the end is.
    big = "== 9 failed in 1.00s ==\n" + ("x" * 200 + "\n") * 50_000 + "== 5 passed in 2.00s ==\n"
    v = parse_verification(cls, big, 0)
    assert (v.passed, v.failed, v.ok) == (5, 0, True)


# ---------------------------------------------------------------------------------------------
# The runner table and its summary rules
# ---------------------------------------------------------------------------------------------


def test_runner_table_is_consistent() -> None:
    from codemode.tools._verification import LAUNCHERS, RUNNERS

    names = [name for r in RUNNERS for name in r.names] + [
        name for launcher in LAUNCHERS for name in launcher.names
    ]
    assert len(names) == len(set(names)), "an executable belongs to one runner or launcher"
    tools = [r.tool for r in RUNNERS]
    assert len(tools) == len(set(tools))
    for r in RUNNERS:
        assert r.reports() or r.delegates, r.tool  # a runner that delegates may report any kind
        assert r.formats or r.delegates, f"{r.tool} has no summary format"
        assert r.quiet <= r.reports(), r.tool


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("uv tool run ruff check", ("lint", "ruff")),
        ("pipx run pytest", ("test", "pytest")),
        ("uvx run --python 3.12 mypy src", ("typecheck", "mypy")),
        ("conda run -n env pytest", ("test", "pytest")),
        ("coverage run --source pkg -m pytest", ("test", "pytest")),
        ("npx -p typescript tsc", ("typecheck", "tsc")),
        ("cargo nextest run", ("test", "cargo")),
        ("cargo -- test", ("test", "cargo")),
        ("./mvnw -q integration-test", ("test", "mvn")),
        ("./gradlew :app:integrationTest", ("test", "gradle")),
        ("gradle assemble", ("build", "gradle")),
        ("make -C sub lint-types", ("lint", "make")),
        ("C:/tools/ruff.exe check", ("lint", "ruff")),
        ("sh -ec 'make test'", ("test", "make")),
        ("basedpyright", ("typecheck", "pyright")),
        ("bun test", ("test", "bun")),
    ],
)
def test_classify_table_entries(command: str, expected: tuple[str, str]) -> None:
    cls = classify_command(command)
    assert cls is not None, command
    assert (cls.kind, cls.tool) == expected


@pytest.mark.parametrize(
    "command",
    [
        "ruff ''",
        "ruff",
        "cargo",
        "go",
        "node app.js",
        "manage.py migrate",
        "uv pip install x",
        "coverage report",
    ],
)
def test_classify_table_ignores(command: str) -> None:
    assert classify_command(command) is None


@pytest.mark.parametrize(
    ("cls", "output", "expected"),
    [
        # ruff --fix: the remaining errors count, not the total; a malformed line is no summary.
        (Classification("lint", "ruff"), "Found 3 errors (1 fixed, 2 remaining).", (None, None, None, 2)),
        (Classification("lint", "ruff"), "Found 5 errors (3 fixed, 2 errors.", (None, None, None, None)),
        (Classification("lint", "ruff"), "Found 1 remaining).", (None, None, None, None)),
        # Success and failure lines: the later one wins.
        (
            Classification("typecheck", "mypy"),
            "Found 1 error in 1 file (checked 1 source file)\nSuccess: no issues found",
            (None, None, None, 0),
        ),
        (Classification("lint", "ruff"), "All checks passed!\nFound 2 errors.", (None, None, None, 2)),
        # A line that only adds counts to the summary line.
        (
            Classification("test", "vitest"),
            "      Tests  3 passed | 1 todo (4)\n     Errors  2 errors",
            (3, 0, 1, 2),
        ),
        (Classification("test", "vitest"), "     Errors  2 errors", (None, None, None, None)),
        # flake8 --count: the total on the last line.
        (Classification("lint", "flake8"), "./a.py:1:1: F401 x\n  7", (None, None, None, 7)),
        # A total: passed is what failures, errors and skips leave.
        (
            Classification("test", "mvn"),
            "Tests run: 9, Failures: 1, Errors: 2, Skipped: 3\n[INFO] BUILD FAILURE",
            (3, 1, 3, 2),
        ),
        (Classification("test", "gradle"), "5 tests completed, 2 failed", (3, 2, 0, None)),
        (
            Classification("test", "cargo"),
            "     Summary [   0.1s] 5 tests run: 4 passed, 1 failed, 2 skipped",
            (4, 1, 2, 0),
        ),
        # A kind the tool never reports: every format is tried.
        (Classification("build", "pytest"), "Tests:       1 failed, 2 passed, 3 total", (2, 1, 0, 0)),
        # A tool not in the table: every format too.
        (Classification("test", "whatever"), "== 2 passed in 0.1s ==", (2, 0, 0, 0)),
    ],
)
def test_summary_rules(
    cls: Classification, output: str, expected: tuple[int | None, int | None, int | None, int | None]
) -> None:
    v = parse_verification(cls, output, 1)
    assert (v.passed, v.failed, v.skipped, v.errors) == expected
