"""fit_to_budget: the whole message fits the budget (real tiktoken count, or UTF-8 bytes offline),
each block keeps its head and tail, and the whole text is archived."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode.budget import MIN_BUDGET, BudgetCut, TokenCounter, fit_to_budget, read_archive_call
from codemode.errors import UserError
from codemode.state import Archive, ArchiveRef, Redactor, State

FULL_LINE = re.compile(
    r"\[\.\.\. ([\d,]+) of ([\d,]+) bytes cut here; read on with "
    r'read_archive\(\{ref: "(ar_[\w-]+)", offset: (\d+), limit: 65536\}\) \.\.\.\]'
)
ANY_LINE = re.compile(
    r'^\[\.\.\. ([\d,]+) (?:of [\d,]+ )?bytes cut.*read_archive\(\{ref: "ar_[\w-]+", offset: (\d+)'
)


class ByteCounter(TokenCounter):
    """The counter as it is without the encoding (a fresh machine offline): UTF-8 bytes."""

    @property
    def exact(self) -> bool:
        return False

    @property
    def fallback_reason(self) -> str | None:
        return "the byte counter, as offline"

    @property
    def max_token_bytes(self) -> int:
        return 1

    def count(self, text: str) -> int:
        return len(text.encode("utf-8", "surrogatepass"))

    def encode(self, text: str) -> list[int] | None:
        return None


class Recording(TokenCounter):
    """A real counter that records how many characters it was asked to tokenize."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def count(self, text: str) -> int:
        self.seen += len(text)
        return super().count(text)

    def encode(self, text: str) -> list[int] | None:
        self.seen += len(text)
        return super().encode(text)


def _exact() -> TokenCounter:
    counter = TokenCounter()
    if not counter.exact:
        pytest.skip(f"needs the o200k_base encoding (CI has it): {counter.fallback_reason}")
    return counter


@pytest.fixture(params=["exact", "bytes"])
def counter(request: pytest.FixtureRequest) -> TokenCounter:
    """Both ways of counting: the real encoding, and the byte counter every fresh machine has."""
    return _exact() if request.param == "exact" else ByteCounter()


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Archive]:
    arch_state = State(tmp_path / "state", Redactor(environ={}))
    arch = arch_state.archive
    yield arch
    arch_state.close()


def fit(blocks: list[str], budget: int, counter: TokenCounter, archive: Archive) -> BudgetCut:
    return fit_to_budget(blocks, budget, counter, lambda t: archive.put(t, kind="output", session_id="s"))


def never(text: str) -> ArchiveRef:
    raise AssertionError("must not archive")


def lines(n: int, word: str = "output") -> str:
    return "".join(f"line {i}: some {word} with words, 数字 and 🎉 emoji\n" for i in range(n))


def recovery_lines(text: str) -> list[re.Match[str]]:
    return [m for line in text.splitlines() if (m := ANY_LINE.match(line))]


def test_small_text_passes_untouched(counter: TokenCounter) -> None:
    tokens = counter.count("hello\n")  # what the model reads: 2 with o200k_base, 6 bytes offline
    assert fit_to_budget(["hello\n"], 1000, counter, never) == BudgetCut("hello\n", False, None, 6, 6, tokens)
    assert fit_to_budget(["a", "", "b"], 1000, counter, never).text == "a\nb"  # empty blocks add nothing
    assert fit_to_budget([], 1000, counter, never) == BudgetCut("", False, None, 0, 0, 0)


def test_more_bytes_than_the_budget_but_fewer_tokens_passes_untouched() -> None:
    counter = _exact()
    text = lines(60)
    res = fit_to_budget([text], 1000, counter, never)
    assert not res.truncated and res.text == text and res.tokens == counter.count(text) <= 1000


def test_a_text_that_fits_by_its_size_is_counted_once() -> None:
    _exact()
    recording = Recording()
    res = fit_to_budget(["x" * 200, "y" * 50], 256, recording, never)
    assert not res.truncated and res.tokens == TokenCounter().count("x" * 200 + "\n" + "y" * 50) < 251
    assert recording.seen == 251  # one count of the text for the figure, no search for a cut


@pytest.mark.parametrize("blocks", [["z" * 5000], ["z" * 5000, "w" * 3000, "error: it broke"]])
def test_the_minimum_budget_holds_the_line_naming_the_archive(
    counter: TokenCounter, archive: Archive, blocks: list[str]
) -> None:
    res = fit(blocks, MIN_BUDGET, counter, archive)
    assert MIN_BUDGET == 80  # tens of tokens: the recovery line, not a page
    assert res.truncated and res.ref is not None
    assert res.tokens == counter.count(res.text) <= MIN_BUDGET
    assert f'read_archive({{ref: "{res.ref.ref}"' in res.text


@pytest.mark.parametrize("budget", [256, 500, 2000, 10_000])
def test_over_budget_fits_with_recovery_line(budget: int, counter: TokenCounter, archive: Archive) -> None:
    text = lines(20_000)
    data = text.encode()
    res = fit([text], budget, counter, archive)
    assert res.truncated and res.ref is not None
    assert res.tokens == counter.count(res.text) <= budget
    assert res.total_bytes == len(data)
    notice = FULL_LINE.search(res.text)
    assert notice is not None, res.text
    assert notice.group(3) == res.ref.ref
    cut_bytes, total, offset = (int(notice.group(i).replace(",", "")) for i in (1, 2, 4))
    assert total == len(data) and cut_bytes == len(data) - res.shown_bytes
    head, _, tail = res.text.partition(notice.group(0))
    tail = tail.removeprefix("\n")
    # head and tail are the real start and end, cut at line boundaries
    assert data.startswith(head.encode()) and data.endswith(tail.encode())
    assert offset == len(head.encode()) and head.endswith("\n")
    if budget > 256:  # at the smallest budget the tail may be shorter than a line
        assert data[-len(tail.encode()) - 1] == 10
    # the offset in the notice reads on exactly where the head stopped
    assert archive.read(res.ref.ref, offset, 200).data == data[offset : offset + 200]
    assert archive.read(res.ref.ref, 0, len(data)).data == data
    if budget >= 2000:
        assert counter.count(head) > counter.count(tail) > 0  # about 60/40


@pytest.mark.parametrize("budget", [1000, 4000])
def test_each_block_keeps_its_head_and_tail(budget: int, counter: TokenCounter, archive: Archive) -> None:
    # A test run: long stdout ending in the runner's summary, long stderr, and a status line.
    stdout = "".join(f"tests/test_mod.py::test_{i} PASSED\n" for i in range(3000))
    stdout += "===== 1 failed, 2999 passed in 3.21s =====\n"
    stderr = "".join(f"warning: deprecated thing {i}\n" for i in range(3000))
    status = "Exit code 1"
    blocks = [stdout.rstrip("\n"), stderr.rstrip("\n"), status]
    res = fit(blocks, budget, counter, archive)
    assert res.truncated and res.ref is not None and res.tokens == counter.count(res.text) <= budget
    shown = res.text.splitlines()
    assert shown[0] == "tests/test_mod.py::test_0 PASSED"
    assert "===== 1 failed, 2999 passed in 3.21s =====" in shown
    assert "warning: deprecated thing 0" in shown and "warning: deprecated thing 2999" in shown
    assert shown[-1] == status  # the short block stays whole
    found = recovery_lines(res.text)
    assert len(found) == 2  # one per cut block
    whole = "\n".join(blocks).encode()
    assert archive.read(res.ref.ref, 0, len(whole) + 1).data == whole
    for match in found:  # each line's offset reads on where its block's head stopped
        offset = int(match.group(2))
        before = res.text[: res.text.index(match.group(0))].encode()
        head_last_line = before.rstrip(b"\n").rsplit(b"\n", 1)[-1] + b"\n"
        assert whole[offset - len(head_last_line) : offset] == head_last_line


def test_a_tiny_budget_still_shows_each_blocks_head(archive: Archive) -> None:
    # Offline at a small budget (256 bytes): recovery lines are bytes too, so they go compact.
    counter = ByteCounter()
    output = "".join(f"row {i}\n" for i in range(500)).rstrip("\n")
    error = "Uncaught Error: " + "why " * 400
    res = fit([output, error], 256, counter, archive)
    assert res.truncated and len(res.text.encode()) <= 256 and res.tokens <= 256
    assert res.text.startswith("row 0\n") and "\nUncaught Error: why" in res.text
    assert len(recovery_lines(res.text)) == 2


def test_one_huge_line_cut_at_character_boundaries(counter: TokenCounter, archive: Archive) -> None:
    text = "数字🎉é" * 200_000  # no newlines, multi-byte everywhere
    res = fit([text], 1000, counter, archive)
    assert res.truncated and counter.count(res.text) <= 1000
    res.text.encode("utf-8")  # valid text, no split characters
    head = res.text.split("\n[...")[0]
    assert text.startswith(head) and len(head) > 10


def test_redacted_archive_points_to_the_start(counter: TokenCounter, archive: Archive) -> None:
    secret = "ghp_" + "x1" * 18
    text = lines(5000) + f"token {secret}\n"
    res = fit([text], 500, counter, archive)
    assert res.ref is not None and res.ref.total_bytes != len(text.encode())
    assert "offset: 0," in res.text and "from the start" in res.text
    assert counter.count(res.text) <= 500


def test_budget_below_minimum_is_refused(counter: TokenCounter) -> None:
    with pytest.raises(UserError, match=f"at least {MIN_BUDGET}"):
        fit_to_budget(["x"], MIN_BUDGET - 1, counter, never)
    with pytest.raises(UserError):
        fit_to_budget(["x"], True, counter, never)


def test_lone_surrogates_do_not_crash(counter: TokenCounter, archive: Archive) -> None:
    text = "bad \ud800 surrogate\n" * 5000
    res = fit([text, text], 300, counter, archive)
    assert res.truncated and counter.count(res.text) <= 300


def test_cost_does_not_grow_with_the_cut_part() -> None:
    # Not a timing threshold: count tokenizer work instead, for a 200 KB and a 20 MB text
    # (timings live in bench/bench_budget.py).
    _exact()
    work = []
    for n in (4_000, 400_000):
        recording = Recording()
        big = lines(n)
        res = fit_to_budget(
            [big, big], 2000, recording, lambda t: ArchiveRef("ar_" + "a" * 20, len(t.encode()), "x")
        )
        assert res.truncated
        work.append(recording.seen)
    assert work[1] < work[0] * 1.5, work


def test_the_read_archive_call_is_spelled_out_once() -> None:
    assert read_archive_call("ar_x") == 'read_archive({ref: "ar_x"})'
    assert read_archive_call("ar_x", 0) == 'read_archive({ref: "ar_x", offset: 0})'
    assert read_archive_call("ar_x", 190, 65536) == 'read_archive({ref: "ar_x", offset: 190, limit: 65536})'
