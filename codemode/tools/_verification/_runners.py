"""The verification tools, as data: :data:`RUNNERS` (names, kind, what selects them, their
summary formats, how they name failing tests) and :data:`LAUNCHERS` (commands that run another)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from codemode.tools._verification import _formats as f
from codemode.tools._verification._rules import Kind, Parser

# The runners whose command line needs code (see ``_classify``).
ClassifyHook = Literal["make", "gradle", "script"]


@dataclass(frozen=True)
class Runner:
    """A verification tool, as data: how a command line selects it and how its output reads.

    Attributes:
        tool: The name reported in a classification.
        names: Executables (and ``python -m`` modules) that run it.
        kind: Its kind; with ``subcommands``, the kind of any subcommand not listed there; with
            ``flags``, the kind when one of them is given; with ``targets``, the kind when none is.
        subcommands: The first word after the options selects the kind (None: not a verification).
        options: The characters that start the options skipped before the subcommand ("" when
            the subcommand comes first); ``--`` ends them.
        needs: Subcommands that verify only with one of these flags (``ruff format --check``).
        flags: Arguments one of which must appear anywhere (``node --test``, ``prettier --check``).
        targets: Any argument among these selects that kind (``mvn clean verify``).
        classify: Code, for the runners whose command line needs it (make, gradle, npm & co.).
        kinds: The kinds that code reports (the other fields say so themselves).
        formats: Its summary formats, tried in order until one is found in the output.
        test_formats: Formats tried first when the command runs tests (``go test``).
        delegates: It prints the summary of what it runs (``npm test``, ``make``, ``tox``): every
            known format is tried before its own.
        quiet: Kinds for which it prints nothing when all is well: exit 0 with no summary means
            zero errors.
        tally: Its tallied format, to read the whole stream with as it passes (the counts then
            stay complete when the output shown is cut).
        failing: Patterns that name its failing tests.
    """

    tool: str
    names: tuple[str, ...]
    kind: Kind | None = None
    subcommands: Mapping[str, Kind | None] | None = None
    options: str = "-"
    needs: Mapping[str, tuple[str, ...]] | None = None
    flags: tuple[str, ...] = ()
    targets: Mapping[str, Kind] | None = None
    classify: ClassifyHook | None = None
    kinds: frozenset[Kind] = frozenset()
    formats: tuple[Parser, ...] = ()
    test_formats: tuple[Parser, ...] = ()
    delegates: bool = False
    quiet: frozenset[Kind] = frozenset()
    tally: Callable[[], f.Tally] | None = None
    failing: tuple[f.Names, ...] = ()

    def reports(self) -> frozenset[Kind]:
        """The kinds it can report."""
        said = [self.kind, *(self.subcommands or {}).values(), *(self.targets or {}).values()]
        return self.kinds | frozenset(k for k in said if k is not None)

    def select(self, args: list[str]) -> Kind | None:
        """The kind this command line runs, or None."""
        if self.flags:
            return self.kind if any(a in self.flags for a in args) else None
        if self.targets is not None:
            for a in args:
                if a in self.targets:
                    return self.targets[a]
            return self.kind
        if self.subcommands is None:
            return self.kind
        i = 0
        if self.options:
            while i < len(args) and args[i][:1] and args[i][0] in self.options and args[i] != "--":
                i += 1
            if args[i : i + 1] == ["--"]:
                i += 1
        if i >= len(args) or not args[i]:
            return None
        sub = args[i]
        if self.needs and sub in self.needs and not any(a in self.needs[sub] for a in args[i + 1 :]):
            return None
        return self.subcommands.get(sub, self.kind)


@dataclass(frozen=True)
class Launcher:
    """A command that runs the rest of its arguments as a command (``uv run``, ``npx``).

    Attributes:
        names: Its executables.
        verbs: The words that must follow the name, tried in order (``()``: none).
        value_opts: Its options that take a value, skipped with it before the command.
    """

    names: tuple[str, ...]
    verbs: tuple[tuple[str, ...], ...] = ((),)
    value_opts: frozenset[str] = frozenset()


_UV_VALUE_OPTS = frozenset(
    {"--with", "--with-requirements", "--with-editable", "--python", "-p", "--package", "--extra",
     "--group", "--env-file", "--directory", "--project", "--index", "--index-url", "--extra-index-url",
     "--from", "-w", "--only-group", "--no-group", "--cache-dir", "--config-file"}
)  # fmt: skip
_CARGO_SUBCOMMANDS: dict[str, Kind | None] = {
    "test": "test", "t": "test", "nextest": "test", "build": "build", "b": "build", "check": "build",
    "c": "build", "clippy": "lint", "fmt": "lint",
}  # fmt: skip
_RUFF_SUBCOMMANDS: dict[str, Kind | None] = {
    "format": "lint",
    **dict.fromkeys(("version", "rule", "config", "linter", "clean", "server", "analyze", "help")),
}
_SCRIPT_RUNNERS = ("npm", "pnpm", "yarn", "bun")

RUNNERS: tuple[Runner, ...] = (
    Runner("pytest", ("pytest", "py.test"), "test", formats=(f.PYTEST,), failing=f.PYTEST_NAMES),
    Runner("unittest", ("unittest",), "test", formats=(f.parse_unittest,), failing=f.UNITTEST_NAMES),
    # Django's runner prints unittest's summary.
    Runner(
        "django",
        ("manage.py",),
        subcommands={"test": "test"},
        options="",
        formats=(f.parse_unittest,),
        failing=f.UNITTEST_NAMES,
    ),
    Runner("tox", ("tox",), "test", delegates=True, failing=f.ALL_NAMES),
    Runner("nox", ("nox",), "test", delegates=True, failing=f.ALL_NAMES),
    Runner("mypy", ("mypy", "dmypy"), "typecheck", formats=(f.MYPY, f.MYPY_ERRORS)),
    Runner("pyright", ("pyright", "basedpyright"), "typecheck", formats=(f.PYRIGHT,)),
    Runner("flake8", ("flake8",), "lint", formats=(f.FLAKE8_TOTAL, f.FLAKE8), quiet=frozenset({"lint"})),
    Runner(
        "ruff",
        ("ruff",),
        "lint",
        subcommands=_RUFF_SUBCOMMANDS,
        needs={"format": ("--check", "--diff")},
        formats=(f.RUFF, f.RUFF_FORMAT),
    ),
    Runner("jest", ("jest",), "test", formats=(f.parse_jest_json, f.parse_jest), failing=f.JEST_NAMES),
    Runner("vitest", ("vitest",), "test", formats=(f.parse_jest_json, f.VITEST), failing=f.VITEST_NAMES),
    Runner("mocha", ("mocha", "_mocha"), "test", formats=(f.parse_mocha,), failing=f.MOCHA_NAMES),
    Runner("node", ("node",), "test", flags=("--test",), formats=(f.parse_node,), failing=f.NODE_NAMES),
    Runner(
        "playwright",
        ("playwright",),
        subcommands={"test": "test"},
        options="",
        formats=(f.parse_playwright,),
        failing=f.PLAYWRIGHT_NAMES,
    ),
    Runner(
        "tsc", ("tsc", "vue-tsc"), "typecheck", formats=(f.TSC, f.TSC_ERRORS), quiet=frozenset({"typecheck"})
    ),
    Runner("eslint", ("eslint",), "lint", formats=(f.ESLINT,), quiet=frozenset({"lint"})),
    Runner(
        "prettier",
        ("prettier",),
        "lint",
        flags=("--check", "-c", "--list-different", "-l"),
        formats=(f.PRETTIER, f.PRETTIER_FILES),
        quiet=frozenset({"lint"}),
    ),
    Runner(
        "next",
        ("next",),
        subcommands={"build": "build", "lint": "lint"},
        options="",
        formats=(f.NEXT_BUILD, f.ESLINT, f.TSC),
    ),
    Runner("vite", ("vite",), subcommands={"build": "build"}, options="", formats=(f.VITE_BUILD,)),
    *(Runner(n, (n,), classify="script", delegates=True, failing=f.ALL_NAMES) for n in _SCRIPT_RUNNERS),
    Runner(
        "go",
        ("go",),
        subcommands={"test": "test", "build": "build", "vet": "lint"},
        options="",
        formats=(f.GO_ERRORS,),
        test_formats=(f.GOTESTSUM, f.parse_go_test),
        quiet=frozenset({"build", "lint"}),
        tally=f.GoTally,
        failing=f.GO_NAMES,
    ),
    Runner(
        "gotestsum",
        ("gotestsum",),
        "test",
        formats=(f.GOTESTSUM, f.parse_go_test),
        tally=f.GoTally,
        failing=f.GO_NAMES,
    ),
    Runner(
        "golangci-lint",
        ("golangci-lint",),
        subcommands={"run": "lint"},
        options="",
        formats=(f.GOLANGCI, f.GOLANGCI_ISSUES),
        quiet=frozenset({"lint"}),
    ),
    # cargo +nightly -q test
    Runner(
        "cargo",
        ("cargo",),
        subcommands=_CARGO_SUBCOMMANDS,
        options="-+",
        needs={"fmt": ("--check",)},
        formats=(f.parse_cargo, f.CARGO_FMT),
        quiet=frozenset({"lint"}),
        tally=f.CargoTally,
        failing=f.CARGO_NAMES,
    ),
    Runner(
        "make",
        ("make", "gmake"),
        classify="make",
        formats=(f.MAKE_ERROR,),
        delegates=True,
        failing=f.ALL_NAMES,
    ),
    Runner(
        "gradle",
        ("gradle", "gradlew"),
        classify="gradle",
        kinds=frozenset({"test", "build"}),
        formats=(f.GRADLE,),
    ),
    Runner(
        "mvn",
        ("mvn", "mvnw"),
        "build",
        targets={"test": "test", "verify": "test", "integration-test": "test"},
        formats=(f.MVN,),
    ),
)

LAUNCHERS: tuple[Launcher, ...] = (
    Launcher(("uv",), (("run",), ("tool", "run")), _UV_VALUE_OPTS),
    Launcher(("uvx", "bunx", "pipx"), (("run",), ()), _UV_VALUE_OPTS),
    Launcher(
        ("poetry", "pipenv", "pdm", "hatch", "rye", "conda", "mamba"),
        (("run",),),
        frozenset({"-n", "--name", "-p", "--prefix", "-e", "--env"}),
    ),
    Launcher(("npx",), ((),), frozenset({"-p", "--package"})),
)

RUNNER_BY_NAME = {name: r for r in RUNNERS for name in r.names}
RUNNER_BY_TOOL = {r.tool: r for r in RUNNERS}
LAUNCHER_BY_NAME = {name: launcher for launcher in LAUNCHERS for name in launcher.names}

ANY_TEST = tuple(dict.fromkeys(f.TEST_FORMATS + f.CHECK_FORMATS))
ANY_CHECK = tuple(dict.fromkeys(f.CHECK_FORMATS + f.TEST_FORMATS))


def _formats(runner: Runner, kind: Kind) -> tuple[Parser, ...]:
    anything = ANY_TEST if kind == "test" else ANY_CHECK
    own = runner.test_formats + runner.formats if kind == "test" else runner.formats
    if runner.delegates:
        return anything + own
    return own if kind in runner.reports() else anything


# The formats to try for each (tool, kind); any other pair tries every format.
FORMATS = {(r.tool, kind): _formats(r, kind) for r in RUNNERS for kind in get_args(Kind)}


def formats_for(tool: str, kind: Kind) -> tuple[Parser, ...]:
    """The summary formats to try for ``tool`` running ``kind``."""
    return FORMATS.get((tool, kind), ANY_TEST if kind == "test" else ANY_CHECK)
