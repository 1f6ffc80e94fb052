"""``doctor``: the facts about engine, tokenizer, state dir, sandbox and MCP servers, and each
problem found with its fix."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from codemode._cli._common import (
    Subparsers,
    cli_host,
    common,
    emit,
)
from codemode._results import default_state_dir
from codemode.errors import CodemodeError, UserError
from codemode.sandbox import SandboxMode

if TYPE_CHECKING:
    from codemode._doctor import DoctorReport, EngineFacts
    from codemode.tools.upstream import McpServerReport


def add_doctor(sub: Subparsers) -> None:
    doctor = sub.add_parser(
        "doctor", help="engine, tokenizer, state directory and sandbox facts, and what to fix"
    )
    common(doctor, "print the facts and findings as JSON")


def _state_dir_finding(args: argparse.Namespace) -> dict[str, str] | None:
    """The finding when the state directory lies inside the workspace (a confined mode refuses
    that: its commands could write codemode's own records), else None."""
    if args.sandbox == SandboxMode.FULL_ACCESS.value:
        return None
    state = Path(os.path.realpath((args.state_dir or default_state_dir()).expanduser()))
    workspace = Path(os.path.realpath(args.workspace.expanduser()))
    if not state.is_relative_to(workspace):
        return None
    return {
        "problem": f"the state directory {state} lies inside the workspace {workspace}, so sandboxed "
        "commands could change codemode's archive, logs and database: every codemode command but "
        "doctor refuses to run here",
        "fix": f"set CODEMODE_HOME (or pass --state-dir) to a directory outside {workspace}, e.g. "
        "`export CODEMODE_HOME=/var/tmp/codemode-$USER`; or run codemode in a project directory "
        "(cd there, or pass --workspace DIR)",
    }


def _settings_finding(exc: UserError) -> dict[str, str]:
    return {
        "problem": str(exc),
        "fix": "change the option or setting the problem names; every codemode command but doctor "
        "refuses these settings",
    }


def _layer_findings(facts: DoctorReport) -> list[dict[str, str]]:
    """A confined mode refuses every command when one of these layers cannot be applied."""
    box = facts["sandbox"]
    if box["mode"] == SandboxMode.FULL_ACCESS.value:
        return []
    return [
        {
            "problem": f"sandbox layer {layer['name']} is unavailable ({layer['detail']}): "
            f"in sandbox mode {box['mode']} every command is refused",
            "fix": "run codemode where the layer is available (see its detail), or choose "
            "`--sandbox full-access` (no confinement) if you accept that",
        }
        for layer in box["layers"]
        if layer["state"] == "unavailable" and layer["name"] != "cgroup per command"
    ]


def cmd_doctor(args: argparse.Namespace) -> int:
    """Facts and findings. Runs whatever it finds: a problem that stops the other commands is
    reported with its fix (exit status 1), and the rest is still checked."""
    findings: list[dict[str, str]] = []
    scratch: str | None = None
    try:
        host = cli_host(args)
    except UserError as exc:
        finding = _state_dir_finding(args) or _settings_finding(exc)
        findings.append(finding)
        scratch = tempfile.mkdtemp(prefix="codemode-doctor-")
        try:
            host = cli_host(args, workspace=Path(scratch))
        except UserError as again:  # not the workspace: nothing more can be checked
            shutil.rmtree(scratch, ignore_errors=True)
            if str(again) != str(exc):
                findings.append(_settings_finding(again))
            _print_findings(findings, None, args.json)
            return 1
        finding["problem"] += (
            f" (the sandbox was checked with an empty temporary workspace, {scratch}, instead)"
        )

    async def body() -> DoctorReport:
        try:
            await host.open()
        except CodemodeError as exc:
            findings.append(
                {
                    "problem": f"the state directory cannot be used: {exc}",
                    "fix": "set CODEMODE_HOME (or pass --state-dir) to a directory you own that "
                    "codemode can create, outside the workspace",
                }
            )
        try:
            facts = host.doctor()
            facts["mcp_servers"] = await host.mcp_servers_report()
            return facts
        finally:
            await host.aclose()

    try:
        facts = anyio.run(body)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    findings.extend(_layer_findings(facts))
    for server in facts.get("mcp_servers", []):
        if not server["reachable"]:
            findings.append(
                {
                    "problem": f"MCP server {server['name']!r} is not reachable: {server['reason']}",
                    "fix": f"check its entry in --mcp-config; `codemode logs mcp:{server['name']}` prints its log",
                }
            )
    _print_findings(findings, facts, args.json)
    return 1 if findings else 0


def _print_findings(findings: list[dict[str, str]], facts: DoctorReport | None, as_json: bool) -> None:
    if as_json:
        emit(json.dumps({**(facts or {}), "findings": findings}, indent=2))
        return
    lines: list[str] = []
    if facts is not None:
        tok = facts["tokenizer"]
        box = facts["sandbox"]
        state = facts["state_dir"]
        lines = [
            f"engine        quickjs-ng {facts['engine']['quickjs-ng']}, codemode {facts['engine']['codemode']}, "
            f"programs in {_engine_mode(facts['engine'])}",
            f"tokenizer     {tok['encoding']}: "
            + (
                "loaded (exact counts)"
                if tok["exact"]
                else f"NOT loaded, conservative byte count ({tok['fallback']})"
            ),
            f"state dir     {state['path']} "
            + (f"(mode {state['mode']})" if state["exists"] else "(not created yet)"),
            f"temp dirs     {facts['temp_dirs']['quota_mb']} MiB each, {facts['temp_dirs']['form']}: "
            f"{facts['temp_dirs']['detail']}",
            f"os            {facts['os']['name']}, packages: "
            + (" ".join(facts["os"]["install"]) if facts["os"]["install"] else "no package manager found"),
            f"sandbox       {box['mode']}, network "
            + (
                f"only {', '.join(box['network_allow']) or 'nothing'} (through the proxy)"
                if box["network"] and box["network_allow"] is not None
                else ("on" if box["network"] else "off")
            )
            + ", "
            f"writable: {', '.join(box['writable_roots'])}",
            *box["summary"],
            "layers (checked by starting one confined command):",
            *(f"  {layer['name']:<20}{layer['state']:<13}{layer['detail']}" for layer in box["layers"]),
            *(_server_line(server) for server in facts.get("mcp_servers", [])),
        ]
    if findings:
        lines.append(f"problems found: {len(findings)}")
        for finding in findings:
            lines += [f"  - {finding['problem']}", f"    fix: {finding['fix']}"]
    else:
        lines.append("no problems found")
    emit("\n".join(lines))


def _server_line(server: McpServerReport) -> str:
    """One doctor line for an MCP server (no env or header values: their names at most)."""
    where = server.get("url") or " ".join([server["command"], *server["args"]])
    if server["reachable"]:
        info = server["server"]
        state = f"reachable, {server['tools']} tools, {info['name']} {info['version']}"
    else:
        state = f"NOT reachable: {server['reason']}"
    confined = f", {server['sandbox']}" if server["transport"] == "stdio" else ""
    return f"mcp server    {server['name']} ({server['transport']}{confined}: {where}): {state}"


def _engine_mode(engine: EngineFacts) -> str:
    """Where programs run, in words: worker processes and how they are held, or threads."""
    if engine.get("mode") != "process":
        return "threads of this process (engine thread)"
    workers = engine.get("workers") or {}
    if not workers.get("available"):
        return f"worker processes: UNAVAILABLE ({workers.get('problem')})"
    return (
        f"confined worker processes ({workers['identity']}; Landlock: {workers['landlock']}; "
        f"seccomp {workers['seccomp']}; cgroup: {workers['cgroup']})"
    )
