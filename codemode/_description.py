"""``run_code``'s description: what a program is, how it calls tools, prints, stays within its
budget and keeps state, then the tools, by name, one line each.

It is read on every turn, so it is small and the same from call to call (no counts or times
that change, tools in registry order). Full signatures come from ``describeTool`` inside a
program; they are inlined only for the tools whose signatures fit `SIGNATURE_CHARS` between
them. Past `FEW_TOOLS` of codemode's own tools, only groups and counts are listed; mounted MCP
servers are listed by their extensions' lines (server, count, some names), within
`NOTES_CHARS`. An extension's guidance longer than `NOTE_CHARS` is not inlined:
``describeTool`` returns it with each of its tools (``guide``).
"""

from __future__ import annotations

import collections
import re
from typing import TYPE_CHECKING

from codemode.tools import GUIDE_INLINE_CHARS

if TYPE_CHECKING:
    from codemode._results import HostConfig
    from codemode.tools import Extension, Tool, ToolRegistry

__all__ = ["FEW_TOOLS", "NOTE_CHARS", "run_code_description"]

FEW_TOOLS = 40  # "a few dozen": above, groups and counts only (mounted servers: namespaces)
SIGNATURE_CHARS = 400  # ~100 tokens of inlined signatures, in registry order, while they fit
NOTE_CHARS = GUIDE_INLINE_CHARS  # guidance up to this long is inlined; longer, describeTool has it
NOTES_CHARS = 1500  # all inlined guidance together (mounted servers' lines included)
LINE_CHARS = 110  # a tool's line: the first sentence of its description, cut to this
GROUP_CHARS = 600  # the groups-and-counts listing

_GUIDE = """\
Run one JavaScript program (QuickJS, ES2023, top-level await and return) that calls tools and \
computes over their results. Only what it prints comes back to you: filter and summarise in code.
- await tools.NAME(args): one JSON object (null = absent). Resolves with the typed result when \
the tool did its job (bash: any exit code, read exit_code); rejects with ToolError {{code, tool, \
message, data}} when it could not. Mounted MCP servers: tools.SERVER.TOOL(args).
- await describeTool(name): TypeScript signature, schema and notes; await searchTools(query): \
ranked [{{name, description}}].
- await Promise.all([...]): up to {concurrency} calls at once.
- await store.get(key) / set(key, value) / delete(key) / keys(): JSON kept per session across programs.
- print(...) / console.log: objects print as JSON; a returned value prints last. setTimeout, await sleep(ms).
- image(base64|bytes|tool image block, mimeType) shows the model a png/jpeg/gif/webp.
- No modules, file system or network in JS itself: use the tools.
First line, optional: // @run_code: {{"max_output_tokens": N, "timeout_seconds": N}}. Defaults: \
{default_tokens} tokens (at most {max_tokens}), {timeout:g} s, JS CPU {cpu:g} s, {memory} MiB. \
Output over the budget keeps head and tail around a line naming an archive ref: \
tools.read_archive({{ref, offset, limit}}) reads the rest."""


# Codemode's most used tools in one line each: the arguments and result fields a program needs
# most (describeTool has the rest). Applied only to codemode's own tools of these names.
SHORT_FORMS = {
    "bash": "tools.bash({command, cwd?, timeout_seconds?, run_in_background?}) -> {exit_code, stdout: "
    "{excerpt}, stderr: {excerpt}, log: {ref}}: a new shell each call; any exit code resolves",
    "read_file": "tools.read_file({path, offset?, limit?}) -> {content, next_offset, total_lines}",
    "edit_file": "tools.edit_file({path, old_text, new_text, replace_all?}) -> {replacements, diff}: "
    "old_text must occur exactly once",
    "write_file": "tools.write_file({path, content}): creates parent directories",
    "read_archive": "tools.read_archive({ref, offset?, limit?}) -> {text, next_offset, eof}",
}
_SHORT_EXTENSIONS = {
    "bash": "bash",
    "read_file": "files",
    "edit_file": "files",
    "write_file": "files",
    "read_archive": "archive",
}


def run_code_description(config: HostConfig, registry: ToolRegistry) -> str:
    """The text of ``run_code``'s description for ``registry``'s tools under ``config``."""
    parts = [
        _GUIDE.format(
            concurrency=config.tool_concurrency,
            default_tokens=config.max_output_tokens,
            max_tokens=config.max_output_tokens_limit,
            timeout=config.timeout_seconds,
            cpu=config.cpu_seconds,
            memory=config.memory_mb,
        )
    ]
    tools = list(registry)
    own = [t for t in tools if t.origin is None]
    if own:
        parts.append(_own_tools(own, registry) if len(own) <= FEW_TOOLS else _groups(own))
    extensions = registry.extensions
    if len(tools) > FEW_TOOLS:  # mounted servers by namespace and count; their notes only when down
        servers = [e for e in extensions if e.namespace is not None and e.tools]
        if servers:
            parts.append(_servers(servers))
        extensions = [e for e in extensions if not (e.namespace is not None and e.tools)]
    notes = _notes([e.guidance for e in extensions if e.guidance])
    if notes:
        parts.append(notes)
    return "\n\n".join(parts) + "\n"


def _servers(servers: list[Extension]) -> str:
    """Mounted servers as ``namespace (count)``, largest first, while they fit `GROUP_CHARS`."""
    shown: list[str] = []
    used = 0
    ordered = sorted(servers, key=lambda e: (-len(e.tools), str(e.namespace)))
    for extension in ordered:
        entry = f"{extension.namespace} ({len(extension.tools)})"
        if used + len(entry) > GROUP_CHARS:
            break
        shown.append(entry)
        used += len(entry) + 2
    more = len(ordered) - len(shown)
    rest = f", and {more} more" if more else ""
    count = sum(len(e.tools) for e in servers)
    return (
        f"Mounted MCP servers, {count} tools as tools.SERVER.TOOL(args): {', '.join(shown)}{rest}. "
        'searchTools("<server> <what you need>") finds them.'
    )


def one_line(description: str) -> str:
    """A tool's description as one line: its first sentence, cut to `LINE_CHARS`."""
    text = " ".join(description.split())
    match = re.search(r"(?<=[.!?])\s", text)
    first = text[: match.start()] if match else text
    return first if len(first) <= LINE_CHARS else first[: LINE_CHARS - 1].rstrip() + "…"


def _own_tools(tools: list[Tool], registry: ToolRegistry) -> str:
    lines = ["Tools (describeTool(name) for arguments and result):"]
    left = SIGNATURE_CHARS
    for t in tools:
        if t.name in SHORT_FORMS and t.extension == _SHORT_EXTENSIONS[t.name]:
            lines.append(f"- {SHORT_FORMS[t.name]}")
            continue
        signature = str(registry.describe(t.name)["signature"])
        if len(signature) <= left:
            left -= len(signature)
            lines.append(f"- {signature}\n  {one_line(t.description)}")
        else:
            lines.append(f"- tools.{t.name}: {one_line(t.description)}")
    return "\n".join(lines)


def _groups(tools: list[Tool]) -> str:
    """Many tools: their groups (an extension, or the first word of the name) with counts,
    largest first, while they fit; searchTools finds the rest."""
    groups = collections.Counter(t.extension or re.split(r"[_.]", t.name, maxsplit=1)[0] for t in tools)
    shown: list[str] = []
    used = 0
    for group, count in sorted(groups.items(), key=lambda item: (-item[1], item[0])):
        entry = f"{group} ({count})"
        if used + len(entry) > GROUP_CHARS:
            break
        shown.append(entry)
        used += len(entry) + 2
    more = len(groups) - len(shown)
    rest = f", and {more} more groups" if more else ""
    return (
        f"{len(tools)} tools in {len(groups)} groups: {', '.join(shown)}{rest}.\n"
        "Use await searchTools(query) to find tools and await describeTool(name) for their arguments."
    )


def _notes(guidance: list[str]) -> str:
    """The extensions' short guidance while it fits `NOTES_CHARS`; long guidance is left to
    describeTool, and what did not fit is counted."""
    shown: list[str] = []
    used = 0
    left_out = 0
    for text in guidance:
        text = text.strip()
        if len(text) > NOTE_CHARS:
            continue
        if used + len(text) > NOTES_CHARS:
            left_out += 1
            continue
        shown.append(text)
        used += len(text)
    if left_out:
        shown.append(f"{left_out} more notes (mounted servers): searchTools(query) finds their tools.")
    return "\n".join(shown)
