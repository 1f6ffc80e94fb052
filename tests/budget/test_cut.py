"""cut_to_budget: the whole message fits the budget (real tiktoken count), the rest is archived."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from codemode.archive import Archive, ArchiveRef, Redactor
from codemode.budget import MIN_BUDGET, BudgetCut, TokenCounter, cut_to_budget
from codemode.errors import UserError


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    arch = Archive(tmp_path / "state", Redactor(environ={}))
    yield arch
    arch.close()


def cut(text: str, budget: int, counter: TokenCounter, archive: Archive) -> BudgetCut:
    return cut_to_budget(text, budget, counter, lambda t: archive.put(t, kind="output", session_id="s"))


def lines(n: int, word: str = "output") -> str:
    return "".join(f"line {i}: some {word} with words, 数字 and 🎉 emoji\n" for i in range(n))


def test_small_text_passes_untouched(counter: TokenCounter, archive: Archive) -> None:
    calls: list[str] = []

    def never(text: str) -> ArchiveRef:
        calls.append(text)
        raise AssertionError("must not archive")

    res = cut_to_budget("hello\n", 1000, counter, never)
    assert res == BudgetCut("hello\n", False, None, 6, 6, 6)
    text = lines(60)  # more bytes than the budget, fewer tokens
    res = cut_to_budget(text, 1000, counter, never)
    assert not res.truncated and res.text == text and res.tokens == counter.count(text) <= 1000
    assert calls == []


@pytest.mark.parametrize("budget", [MIN_BUDGET, 500, 2000, 10_000])
def test_over_budget_fits_with_recovery_line(budget: int, counter: TokenCounter, archive: Archive) -> None:
    text = lines(20_000)
    data = text.encode()
    res = cut(text, budget, counter, archive)
    assert res.truncated and res.ref is not None
    assert res.tokens == counter.count(res.text) <= budget
    assert res.total_bytes == len(data)
    notice = re.search(
        r"\[\.\.\. ([\d,]+) of ([\d,]+) bytes cut here; .*?offset: (\d+), limit: 65536\}\)", res.text
    )
    assert notice is not None, res.text
    assert res.ref.ref in notice.group(0)
    cut_bytes, total, offset = (int(notice.group(i).replace(",", "")) for i in (1, 2, 3))
    assert total == len(data) and cut_bytes == len(data) - res.shown_bytes
    head, _, tail = res.text.partition(notice.group(0))
    tail = tail.split("\n", 1)[1]
    # head and tail are the real start and end, cut at line boundaries
    assert data.startswith(head.encode()) and data.endswith(tail.encode())
    assert (
        offset == len(head.encode())
        and head.endswith("\n")
        and (tail == "" or data[-len(tail.encode()) - 1] == 10)
    )
    # the offset in the notice reads on exactly where the head stopped
    page = archive.read(res.ref.ref, offset, 200)
    assert page.data == data[offset : offset + 200]
    assert archive.read(res.ref.ref, 0, len(data)).data == data
    head_tokens, tail_tokens = counter.count(head), counter.count(tail)
    if budget >= 2000:
        assert head_tokens > tail_tokens > 0  # about 60/40


def test_one_huge_line_cut_at_character_boundaries(counter: TokenCounter, archive: Archive) -> None:
    text = "数字🎉é" * 200_000  # no newlines, multi-byte everywhere
    res = cut(text, 1000, counter, archive)
    assert res.truncated and counter.count(res.text) <= 1000
    res.text.encode("utf-8")  # valid text, no split characters
    head = res.text.split("\n[...")[0]
    assert text.startswith(head) and len(head) > 10


def test_redacted_archive_points_to_the_start(counter: TokenCounter, archive: Archive) -> None:
    secret = "ghp_" + "x1" * 18
    text = lines(5000) + f"token {secret}\n"
    res = cut(text, 500, counter, archive)
    assert res.ref is not None and res.ref.total_bytes != len(text.encode())
    assert "offset: 0," in res.text and "from the start" in res.text
    assert counter.count(res.text) <= 500


def test_budget_below_minimum_is_refused(counter: TokenCounter) -> None:
    with pytest.raises(UserError, match=f"at least {MIN_BUDGET}"):
        cut_to_budget("x", MIN_BUDGET - 1, counter, lambda t: ArchiveRef("ar_x", 0, ""))
    with pytest.raises(UserError):
        cut_to_budget("x", True, counter, lambda t: ArchiveRef("ar_x", 0, ""))  # type: ignore[arg-type]


def test_lone_surrogates_do_not_crash(counter: TokenCounter, archive: Archive) -> None:
    text = "bad \ud800 surrogate\n" * 5000
    res = cut(text, 300, counter, archive)
    assert res.truncated and counter.count(res.text) <= 300


def test_cost_does_not_grow_with_the_cut_part(counter: TokenCounter, archive: Archive) -> None:
    # Not a timing threshold: count tokenizer work instead. Wrap the counter and record how
    # many characters it was asked to tokenize for a 200 KB and a 20 MB text.
    class Recording(TokenCounter):
        seen = 0

        def count(self, text: str) -> int:
            Recording.seen += len(text)
            return super().count(text)

        def encode(self, text: str) -> list[int] | None:
            Recording.seen += len(text)
            return super().encode(text)

    rec = Recording()
    work = []
    for n in (4_000, 400_000):
        Recording.seen = 0
        res = cut_to_budget(lines(n), 2000, rec, lambda t: ArchiveRef("ar_" + "a" * 20, len(t.encode()), "x"))
        assert res.truncated
        work.append(Recording.seen)
    assert work[1] < work[0] * 1.5, work
    _ = time  # timings live in bench/bench_budget.py
