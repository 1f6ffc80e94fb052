"""What a run or a direct call gives back: its text redacted and fit to the budget (the rest
archived), its trailer (cancelled calls, the error, notes, notifications), its images, and the
lines that say what a program left behind."""

from __future__ import annotations

import base64
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import anyio.to_thread

from codemode._images import IMAGE_MAX_COUNT, archived_image, image_descriptors, image_tokens, is_image
from codemode._results import RunError, RunImage, RunResult, Usage
from codemode.budget import MIN_BUDGET, TokenCounter, fit_to_budget
from codemode.engine import GuestError
from codemode.errors import ToolError
from codemode.state import Archive, ArchiveRef
from codemode.tools import ToolResult

__all__ = [
    "Fitted",
    "count_ready",
    "fit",
    "late_notice",
    "name_promoted",
    "run_error",
    "run_result",
    "shown_images",
    "tool_images",
]


@dataclass(frozen=True)
class Fitted:
    """Text fit to a budget: what the model reads, the refs of what was archived, its tokens
    and the bytes printed before the cut."""

    text: str
    truncated: bool
    refs: list[str]
    tokens: int
    printed_bytes: int


async def count_ready(counter: TokenCounter, preload: bool, budget: int, *texts: str) -> bool:
    """Whether this result's tokens are counted exactly (`Usage.output_tokens`); the token
    counter is loaded first, off the event loop, when they are.

    A host that preloads its tokenizer (``preload``) counts every result. One that does not
    (`codemode run`, the one-shot `run_code()`) loads it only for a result whose ``texts`` come
    near its ``budget``: a token covers at least one UTF-8 byte, so a text whose size is within
    the budget fits without counting, and that size is the upper bound its usage reports. The
    margin (twice the size) covers redaction marks and the result's own lines; a text that still
    passes the budget loads the counter where it is cut.
    """
    if counter.loaded or preload:
        if not counter.loaded:
            await anyio.to_thread.run_sync(lambda: counter.exact)
        return True
    size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
    if 2 * size + 1024 > budget:
        await anyio.to_thread.run_sync(lambda: counter.exact)
        return True
    return False


def fit(
    archive: Archive,
    counter: TokenCounter,
    blocks: list[str],
    trailer: str,
    budget: int,
    session: str,
    exact: bool = True,
) -> Fitted:
    """Redact the output ``blocks`` and the ``trailer`` and fit them into ``budget`` tokens.

    The trailer (errors, notes, notifications) is the last block: like every block that
    does not fit its share, it keeps its head and tail (see `fit_to_budget`). ``exact``: count
    the tokens of a text that fits by its size (see `count_ready`).
    """
    redact = archive.redactor.redact
    refs: list[str] = []

    def keep(whole: str) -> ArchiveRef:
        # The text is redacted already; bytes are archived as given.
        ref = archive.put(whole.encode("utf-8", "surrogatepass"), kind="output", session_id=session)
        refs.append(ref.ref)
        return ref

    output = [redact(block) for block in blocks if block]
    printed = len("\n".join(output).encode("utf-8", "surrogatepass"))
    if trailer:
        if output:
            output[-1] = output[-1].rstrip("\n")
        output.append(redact(trailer))
    cut = fit_to_budget(output, budget, counter, keep, count_fit=exact)
    return Fitted(cut.text, cut.truncated, refs, cut.tokens, printed)


def run_result(
    archive: Archive,
    counter: TokenCounter,
    notifications: list[str],
    *,
    call: str,
    session: str,
    output: str,
    error: RunError | None,
    cancelled: list[str],
    notices: list[str],
    budget: int,
    tool_calls: int,
    cpu_ms: float,
    started: float,
    guest_error: GuestError | None = None,
    images: list[RunImage] | None = None,
    exact: bool = True,
) -> RunResult:
    """A program's `RunResult`: its output and trailer fit to what the images leave of the
    budget; ``notifications`` are the session's lines delivered with it."""
    images = images or []
    image_cost = sum(image.tokens for image in images)
    trailer_lines: list[str] = []
    if cancelled:
        counts = collections.Counter(cancelled)
        names = ", ".join(f"tools.{n}" + (f" x{c}" if c > 1 else "") for n, c in counts.most_common())
        trailer_lines.append(
            f"[{len(cancelled)} tool call(s) still pending when the program ended were cancelled (stopped "
            f"before they took effect): {names}; await every call you start]"
        )
    if error is not None:
        description = guest_error.describe() if guest_error is not None else f"{error.name}: {error.message}"
        trailer_lines.append(description)
    trailer_lines.extend(f"[note: {n}]" for n in notices)
    trailer_lines.extend(notifications)
    fitted = fit(
        archive,
        counter,
        [output],
        "\n".join(trailer_lines),
        max(MIN_BUDGET, budget - image_cost),
        session,
        exact,
    )
    return RunResult(
        call_id=call,
        session_id=session,
        ok=error is None,
        text=fitted.text,
        truncated=fitted.truncated,
        refs=fitted.refs,
        error=error,
        cancelled_calls=cancelled,
        notices=notices,
        images=images,
        usage=Usage(
            output_tokens=fitted.tokens + image_cost,
            max_output_tokens=budget,
            printed_bytes=fitted.printed_bytes,
            tool_calls=tool_calls,
            cpu_ms=round(cpu_ms, 3),
            wall_ms=round((time.perf_counter() - started) * 1000, 3),
        ),
    )


def shown_images(
    archive: Archive, shown: list[tuple[str, str]], budget: int, session: str, notices: list[str]
) -> list[RunImage]:
    """The images a program showed that fit half the budget (its text keeps the rest); each
    other one is archived and a notice names its reference, never dropped silently."""
    kept: list[RunImage] = []
    room = budget // 2
    for number, (mime_type, data) in enumerate(shown, 1):
        tokens = image_tokens(mime_type, data)
        if tokens <= room:
            kept.append(RunImage(mime_type=mime_type, data=data, tokens=tokens))
            room -= tokens
            continue
        ref = archive.put(base64.b64decode(data), kind="image", session_id=session).ref
        notices.append(
            f"image {number} ({mime_type}, {tokens} tokens) did not fit half of max_output_tokens "
            f"({budget}) and was archived as {ref}; raise max_output_tokens or show fewer, smaller images"
        )
    return kept


async def tool_images(
    archive: Archive, result: ToolResult, mounted: bool, budget: int, session: str
) -> list[RunImage]:
    """The images a mounted server's tool returned (archived; its data names each by ref), for
    a direct call's client: up to 8 that are what they say and fit half the budget, as a
    program's (the others stay named by ref in the text)."""
    found = image_descriptors(result.structured_content) if mounted else []
    if result.error is not None or not found:
        return []

    def read() -> list[RunImage]:
        shown: list[RunImage] = []
        room = budget // 2
        for mime_type, ref in found[:IMAGE_MAX_COUNT]:
            try:
                data = archived_image(archive, ref, session)
            except ToolError:
                continue  # over 5 MiB: its ref stays in the text
            tokens = image_tokens(mime_type, data)
            if tokens <= room and is_image(mime_type, base64.b64decode(data[:24])):
                shown.append(RunImage(mime_type=mime_type, data=data, tokens=tokens))
                room -= tokens
        return shown

    return await anyio.to_thread.run_sync(read)


def late_notice(name: str, value: ToolResult, when: str) -> str:
    """What a call nothing awaited did (one line); ``when`` it finished."""
    text = " ".join(value.text.split())
    if len(text) > 300:
        text = text[:300] + "…"
    verb = "failed" if value.is_error else "finished"
    return f"tools.{name} (not awaited) {verb} {when}: {text}; await every call you start"


def name_promoted(error: GuestError, process_ids: list[str]) -> GuestError:
    """The program's error, naming the commands that were still running when it ended and
    go on in the background."""
    if len(process_ids) == 1:
        pid = process_ids[0]
        what = f'a command was still running; it goes on as process {pid}: bash({{action: "wait", process_id: "{pid}"}})'
    else:
        what = (
            f"{len(process_ids)} commands were still running; they go on as processes "
            f'{", ".join(process_ids)}: bash({{action: "wait", process_id}})'
        )
    return replace(error, message=f"{error.message}; {what}")


def run_error(error: GuestError, redact: Callable[[str], str]) -> RunError:
    """The result's error for a program's failure, its message and stack redacted."""
    return RunError(
        kind=error.kind,
        name=error.name,
        message=redact(error.message),
        line=error.line,
        column=error.column,
        stack=redact(error.stack),
        tool=error.tool,
    )
