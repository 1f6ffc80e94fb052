"""What the model reads: surface sizes, and scripted tasks done with Code Mode and with direct
tool calls, in o200k_base tokens.

Both ways really run, against codemode's MCP server (the official SDK client, in process) over
a temporary workspace with a real MCP server mounted (tests/tools/upstream/upstream_server.py
as ``up``). The scripts are fixed, no model in the loop:

- Code Mode: the ``--tools code`` surface (run_code alone), one program per round trip, and
  what it prints.
- Direct: the tools the task uses, listed as ``--tools all`` lists them, and the calls a
  competent agent makes (independent calls in one turn, shell pipelines where they help).

Tokens the model reads for a task of n round trips: n + 1 turns (the last one answers), each
reading the surface and everything before it (calls it wrote, results it got), as a model's
context does. A call counts as its JSON ``{"name", "arguments"}``, a result as its text.

    TIKTOKEN_CACHE_DIR=../shared/tiktoken-cache python bench/bench_tokens.py

(``TIKTOKEN_CACHE_DIR`` defaults to ../shared/tiktoken-cache next to the repository; without
the encoding the byte counter is used, which only bounds tokens from above.)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(REPO.parent / "shared" / "tiktoken-cache"))

import anyio  # noqa: E402
import mcp.types as types  # noqa: E402
from mcp import Client  # noqa: E402

from codemode import Host  # noqa: E402
from codemode._published import flat_input_schema  # noqa: E402
from codemode.budget import TokenCounter  # noqa: E402
from codemode.mcp import create_server  # noqa: E402
from codemode.tools.bash._tool import BashArgs, BashRunArgs  # noqa: E402

UPSTREAM = REPO / "tests" / "tools" / "upstream" / "upstream_server.py"
PYTHON = sys.executable  # with pytest installed
COUNTER = TokenCounter()

# A synthetic upstream server of N tools, for the surface with thousands of mounted tools.
SYNTHETIC = """
import sys, anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
prefix, count = sys.argv[1], int(sys.argv[2])
tools = [types.Tool(name=f"{prefix}_op_{i}", description=f"Operation {i} of the {prefix} API: look up record {i}.",
         input_schema={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]})
         for i in range(count)]
async def list_tools(ctx, params):
    return types.ListToolsResult(tools=tools)
async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])
server = Server(prefix, on_list_tools=list_tools, on_call_tool=call_tool)
async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())
anyio.run(main)
"""


def tokens(value: Any) -> int:
    return COUNTER.count(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def listing(tools: list[types.Tool]) -> str:
    return json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools])


@dataclass
class Way:
    """One way of doing a task: the surface, and per round trip the calls and their results."""

    surface: int
    turns: list[list[tuple[int, int]]] = field(default_factory=list)  # per turn: (call, result)

    def read(self) -> int:
        """Tokens read over every turn: the surface each turn, and everything before it."""
        total, history = 0, 0
        for turn in self.turns:
            total += self.surface + history
            history += sum(call + result for call, result in turn)
        return total + self.surface + history  # the turn that answers

    def calls_and_results(self) -> int:
        return sum(call + result for turn in self.turns for call, result in turn)


class Runner:
    """Calls over one MCP client and counts them into a `Way`."""

    def __init__(self, client: Client, surface: int) -> None:
        self.client = client
        self.way = Way(surface)
        self.last: list[str] = []

    async def turn(self, *calls: tuple[str, dict[str, Any]]) -> list[str]:
        """One round trip: the calls run together, as a model's parallel tool calls do."""
        texts: list[str] = [""] * len(calls)

        async def one(index: int, name: str, args: dict[str, Any]) -> None:
            result = await self.client.call_tool(name, args)
            first = result.content[0] if result.content else None
            texts[index] = first.text if isinstance(first, types.TextContent) else ""
            if result.is_error and name == "run_code":
                raise RuntimeError(f"the program failed: {texts[index]}")

        async with anyio.create_task_group() as group:
            for index, (name, args) in enumerate(calls):
                group.start_soon(one, index, name, args)
        self.way.turns.append(
            [(tokens({"name": n, "arguments": a}), tokens(t)) for (n, a), t in zip(calls, texts, strict=True)]
        )
        self.last = texts
        return texts

    async def program(self, code: str) -> str:
        return (await self.turn(("run_code", {"code": textwrap.dedent(code).strip()})))[0]


def bash(command: str) -> tuple[str, dict[str, Any]]:
    return ("bash", {"command": command})


# -- the tasks ------------------------------------------------------------------------------
#
# Each: (name, tools the direct way uses, direct script, Code Mode program(s)).


async def failing_test_direct(run: Runner) -> None:
    await run.turn(bash(f"{PYTHON} -m pytest -q tests 2>&1 | tail -25"))


async def failing_test_code(run: Runner) -> None:
    await run.program(
        """
        const r = await tools.bash({command: "PYTHON -m pytest -q tests"});
        const lines = r.stdout.excerpt.split("\\n");
        print(lines.filter(l => /^(E |FAILED|>)/.test(l)).join("\\n"));
        """.replace("PYTHON", PYTHON)
    )


async def todos_direct(run: Runner) -> None:
    await run.turn(bash("grep -rl --include='*.py' TODO . | xargs -n1 dirname | sort | uniq -c"))
    await run.turn(bash("grep -rc --include='*.py' TODO . | grep -v ':0$'"))  # counts, not files


async def todos_code(run: Runner) -> None:
    await run.program("""
        const r = await tools.bash({command: "grep -rn --include='*.py' TODO ."});
        const per = {};
        for (const line of r.stdout.excerpt.split("\\n").filter(Boolean)) {
          const dir = line.split(":")[0].split("/").slice(1, -1).join("/") || ".";
          per[dir] = (per[dir] || 0) + 1;
        }
        print(per);
    """)


async def edit_direct(run: Runner) -> None:
    await run.turn(
        ("read_file", {"path": "src/app/config.py"}),
        ("read_file", {"path": "src/app/server.py"}),
        ("read_file", {"path": "src/lib/util.py"}),
    )
    await run.turn(
        ("edit_file", {"path": "src/app/config.py", "old_text": "PORT = 8000", "new_text": "PORT = 8080"})
    )


async def edit_code(run: Runner) -> None:
    await run.program("""
        const [config, server, util] = await Promise.all(
          ["src/app/config.py", "src/app/server.py", "src/lib/util.py"].map(path => tools.read_file({path})));
        const uses = [server, util].filter(f => f.content.includes("PORT")).map(f => f.path.split("/").pop());
        const e = await tools.edit_file({path: "src/app/config.py", old_text: "PORT = 8000", new_text: "PORT = 8080"});
        print(`PORT used by ${uses.join(", ")}; ${e.replacements} replacement in config.py`);
    """)


async def suite_direct(run: Runner) -> None:
    await run.turn(bash("./run_suite.sh 2>&1 | tail -12"))


async def suite_code(run: Runner) -> None:
    await run.program("""
        const r = await tools.bash({command: "./run_suite.sh"});
        const out = r.stdout.excerpt.split("\\n");
        const failed = out.filter(l => l.startsWith("FAILED"));
        print(out.filter(l => / passed| failed/.test(l)).pop(), "\\n" + failed.join("\\n"));
    """)


WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


async def mounted_direct(run: Runner) -> None:
    sums = [("up__typed_sum", {"numbers": [i, i * 2, i * 3]}) for i in range(1, 9)]
    await run.turn(*sums, *[("up__echo", {"text": w}) for w in WORDS])  # independent: one turn


async def mounted_code(run: Runner) -> None:
    await run.program("""
        const sums = await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map(i => tools.up.typed_sum({numbers: [i, 2 * i, 3 * i]})));
        const words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"];
        const echoed = await Promise.all(words.map(text => tools.up.echo({text})));
        print(sums.map(s => s.total).join(" "), "|", echoed.every((e, i) => e === words[i]) ? "all echoed" : echoed);
    """)


async def overflow_direct(run: Runner) -> None:
    await run.turn(bash("./build.sh"))  # the agent does not know it is long: head and tail, a ref
    await run.turn(bash("./build.sh 2>&1 | grep -n -B2 -A3 ERROR"))  # re-run, filtered (cheaper than pages)


async def overflow_code(run: Runner) -> None:
    await run.program("""
        const r = await tools.bash({command: "./build.sh"});
        let text = "", offset = 0;
        for (;;) {
          const page = await tools.read_archive({ref: r.log.ref, offset, limit: 262144});
          text += page.text; offset = page.next_offset;
          if (page.eof) break;
        }
        const lines = text.split("\\n");
        const at = lines.findIndex(l => l.includes("ERROR"));
        print(r.exit_code, lines.slice(at - 2, at + 4).join("\\n"));
    """)


async def read_one_direct(run: Runner) -> None:
    await run.turn(("read_file", {"path": "src/lib/util.py"}))


async def read_one_code(run: Runner) -> None:
    await run.program('print((await tools.read_file({path: "src/lib/util.py"})).content)')


Task = tuple[str, tuple[str, ...], Callable[[Runner], Awaitable[None]], Callable[[Runner], Awaitable[None]]]
TASKS: list[Task] = [
    ("find the failing test, show its assertion", ("bash",), failing_test_direct, failing_test_code),
    ("count TODOs per directory", ("bash",), todos_direct, todos_code),
    ("read three files, edit one", ("read_file", "edit_file"), edit_direct, edit_code),
    ("run a long test suite, summarise", ("bash",), suite_direct, suite_code),
    ("a mounted server's tools over a list", ("up__typed_sum", "up__echo"), mounted_direct, mounted_code),
    ("read back an overflow", ("bash", "read_archive"), overflow_direct, overflow_code),
    ("one call: read a file", ("read_file",), read_one_direct, read_one_code),
]


def make_workspace(root: Path) -> None:
    """A small project: modules with TODOs, a test suite with one failure, a long suite, a
    build whose output overflows the budget with an error in the middle."""
    files = {
        "src/app/config.py": "HOST = '0.0.0.0'\nPORT = 8000\nDEBUG = False  # TODO: read from the environment\n",
        "src/app/server.py": "from app.config import HOST, PORT\n\n\ndef serve():\n    # TODO: graceful shutdown\n"
        "    print(f'serving on {HOST}:{PORT}')\n",
        "src/lib/util.py": "def clamp(x, lo, hi):\n    # TODO: validate lo <= hi\n    return max(lo, min(x, hi))\n\n\n"
        "def mean(xs):\n    return sum(xs) / len(xs)  # TODO: empty lists\n",
        "src/lib/text.py": "def title(s):\n    return s.title()  # TODO: unicode\n",
        "tests/test_util.py": "import sys\nsys.path.insert(0, 'src')\nfrom lib.util import clamp, mean\n\n\n"
        "def test_clamp():\n    assert clamp(5, 0, 3) == 3\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n\n\n"
        "def test_mean_of_pairs():\n    got = mean([1, 2])\n    assert got == 1  # TODO: fix the expectation\n",
        "run_suite.sh": '#!/bin/sh\nfor i in $(seq 1 1500); do echo "tests/test_many.py::test_case_$i PASSED"; done\n'
        "echo 'FAILED tests/test_many.py::test_case_777 - AssertionError: expected 3, got 4'\n"
        "echo '=== 1 failed, 1499 passed in 12.34s ==='\n",
        "build.sh": '#!/bin/sh\nfor i in $(seq 1 6000); do echo "[build] compiling unit $i of 12000"; done\n'
        "echo 'src/lib/util.c:42: ERROR: implicit declaration of function clamp'\n"
        "for i in $(seq 6001 12000); do echo \"[build] compiling unit $i of 12000\"; done\necho 'build finished'\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if name.endswith(".sh"):
            path.chmod(0o755)


async def surfaces(host: Host) -> dict[str, Any]:
    """The listing of each surface, and run_code's description in it."""
    found: dict[str, Any] = {}
    for label, options in (
        ("default", {}),
        ("default, output schemas on", {"output_schemas": True}),
        ("code", {"surface": "code"}),
        ("all", {"surface": "all"}),
    ):
        async with Client(create_server(host, **options)) as client:
            listed = (await client.list_tools()).tools
        found[label] = (tokens(listing(listed)), tokens(listed[0].description or ""), len(listed), listed)
    return found


async def mounted_surface(tmp: Path, servers: int, per_server: int) -> tuple[int, int, int]:
    """``--tools code`` with servers x per_server synthetic tools mounted: tokens, description
    tokens, tools mounted."""
    script = tmp / "synthetic_server.py"
    script.write_text(SYNTHETIC)
    config = {
        f"api{n}": {"command": sys.executable, "args": [str(script), f"api{n}", str(per_server)]}
        for n in range(servers)
    }
    (tmp / "syn_ws").mkdir(exist_ok=True)
    async with Host(
        workspace=tmp / "syn_ws", state_dir=tmp / "syn_state", mcp_servers=config, connect_mcp_at_open=True
    ) as host:
        async with Client(create_server(host, surface="code")) as client:
            listed = (await client.list_tools()).tools
        mounted = sum(1 for t in host.registry if t.origin is not None)
        return tokens(listing(listed)), tokens(listed[0].description or ""), mounted


def bash_schema_variants() -> tuple[int, int, int]:
    """bash's input schema: one compact object (published), or split into a run tool and a
    process tool (measured, not published)."""
    flat = flat_input_schema(BashArgs.model_json_schema())
    run = flat_input_schema(BashRunArgs.model_json_schema())
    run["properties"].pop("action", None)
    process_fields = {k: v for k, v in flat["properties"].items() if k not in run["properties"]}
    process_fields["completion_mode"] = flat["properties"]["completion_mode"]
    process_fields["action"] = {"type": "string", "enum": ["read", "write", "stop", "list", "update", "wait"]}
    process = {"type": "object", "properties": process_fields, "required": ["action"]}
    return tokens(flat), tokens(run), tokens(process)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        make_workspace(tmp / "ws")
        up = {"command": sys.executable, "args": [str(UPSTREAM), "stdio"], "env": {"UPSTREAM_SECRET": "x"}}
        async with Host(
            workspace=tmp / "ws", state_dir=tmp / "state", mcp_servers={"up": up}, connect_mcp_at_open=True
        ) as host:
            sizes = await surfaces(host)
            every = {t.name: t for t in sizes["all"][3]}
            rows = []
            for name, used, direct_script, code_script in TASKS:
                make_workspace(tmp / "ws")  # each way starts from the same files
                async with Client(create_server(host, surface="all")) as client:
                    direct = Runner(client, tokens(listing([every[n] for n in used])))
                    await direct_script(direct)
                make_workspace(tmp / "ws")
                async with Client(create_server(host, surface="code")) as client:
                    code = Runner(client, sizes["code"][0])
                    await code_script(code)
                rows.append((name, direct.way, code.way))
        mounted = [(0, sizes["code"][0], sizes["code"][1], 0)]
        for servers, per_server in ((5, 1000),):
            total, description, count = await mounted_surface(tmp, servers, per_server)
            mounted.append((count, total, description, servers))
    report(sizes, mounted, rows)


def report(sizes: dict[str, Any], mounted: list[tuple[int, int, int, int]], rows: list[Any]) -> None:
    exact = "" if COUNTER.exact else "  (byte counter: no tiktoken cache; upper bounds)"
    print(f"What the model reads, o200k_base tokens{exact}\n")
    print("surface                        tools   tokens   run_code's description")
    for label, (total, description, count, _) in sizes.items():
        print(f"{label:<30} {count:>5}   {total:>6}   {description:>6}")
    for count, total, description, servers in mounted[1:]:
        label = f"code, {count:,} tools mounted ({servers} servers)"
        print(f"{label:<30} {1:>5}   {total:>6}   {description:>6}")
    flat, run, process = bash_schema_variants()
    print(
        f"\nbash's input schema: one object {flat}; split by action: run {run} + process {process} = {run + process}"
    )
    print(
        "\ntask                                     direct: tokens  trips   code mode: tokens  trips   ratio"
    )
    total_direct = total_code = 0
    for name, direct, code in rows:
        total_direct += direct.read()
        total_code += code.read()
        ratio = code.read() / direct.read()
        print(
            f"{name:<40} {direct.read():>14}  {len(direct.turns):>5}   {code.read():>17}  {len(code.turns):>5}   {ratio:5.2f}x"
        )
    print(
        f"{'total':<40} {total_direct:>14}  {'':>5}   {total_code:>17}  {'':>5}   {total_code / total_direct:5.2f}x"
    )
    single = rows[-1]
    print(
        f"\none call, the call and its result only: direct {single[1].calls_and_results()}, "
        f"code mode {single[2].calls_and_results()} "
        f"({single[2].calls_and_results() / single[1].calls_and_results():.2f}x; target <= 1.5x)"
    )


if __name__ == "__main__":
    anyio.run(main)
