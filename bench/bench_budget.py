"""Budget benchmark: fit_to_budget on 20 MB vs 200 KB with a 2,000-token budget.

Run: ``TIKTOKEN_CACHE_DIR=... python bench/bench_budget.py``. The cost should not grow with the
size of the cut part beyond copying bytes: the 20 MB cut is reported beside the same run with a
no-op archive (pure budgeting) and beside the archive copy alone (``Archive.put``), measured in
the same run.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codemode.budget import TokenCounter, fit_to_budget
from codemode.state import ArchiveRef, Redactor, State

BUDGET = 2000


def median_ms(fn: Callable[[], object], n: int) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def program_output(size: int) -> str:
    line = "item {i}: status=ok value={v} name=widget-{i} 数字 🎉\n"
    parts, total, i = [], 0, 0
    while total < size:
        s = line.format(i=i, v=i * 7 % 1000)
        parts.append(s)
        total += len(s.encode())
        i += 1
    return "".join(parts)


def main() -> None:
    counter = TokenCounter()
    print(f"encoding {counter.encoding_name}: exact={counter.exact} {counter.fallback_reason or ''}")
    small, big = program_output(200 * 1024), program_output(20 * 1024 * 1024)

    sizes = {id(small): len(small.encode()), id(big): len(big.encode())}

    def null_archive(text: str) -> ArchiveRef:  # no copy at all: isolates the budgeting work
        return ArchiveRef("ar_" + "0" * 20, sizes[id(text)], "")

    with tempfile.TemporaryDirectory() as tmp:
        archive_state = State(Path(tmp) / "state", Redactor(environ={}))
        archive = archive_state.archive

        def real_archive(text: str) -> ArchiveRef:
            return archive.put(text, kind="output")

        fit_to_budget([small], BUDGET, counter, null_archive)  # warm-up: load the encoding
        t_small = median_ms(lambda: fit_to_budget([small], BUDGET, counter, null_archive), 20)
        t_big = median_ms(lambda: fit_to_budget([big], BUDGET, counter, null_archive), 10)
        t_small_a = median_ms(lambda: fit_to_budget([small], BUDGET, counter, real_archive), 20)
        t_big_a = median_ms(lambda: fit_to_budget([big], BUDGET, counter, real_archive), 5)
        t_put = median_ms(lambda: archive.put(big, kind="output"), 5)
        t_put_bytes = median_ms(lambda: archive.put(big.encode(), kind="output"), 5)
        t_encode = median_ms(lambda: big.encode(), 10)
        archive_state.close()
    res = fit_to_budget([big], BUDGET, counter, null_archive)
    print(f"cut to {BUDGET} tokens (medians); result has {counter.count(res.text)} tokens:")
    print(f"  200 KB, no-op archive        {t_small:8.2f} ms")
    print(f"  20 MB,  no-op archive        {t_big:8.2f} ms   ({t_big / t_small:.2f}x the 200 KB cut)")
    print(f"  baseline: 20 MB str.encode   {t_encode:8.2f} ms   (copying the bytes once)")
    print(f"  200 KB, real archive         {t_small_a:8.2f} ms")
    print(f"  20 MB,  real archive         {t_big_a:8.2f} ms   ({t_big_a / t_small_a:.1f}x the 200 KB cut)")
    print(f"  of which Archive.put(str)    {t_put:8.2f} ms   (redaction + write + sha256)")
    print(f"  Archive.put(bytes) for scale {t_put_bytes:8.2f} ms   (no redaction)")
    print(f"  budgeting beyond the archive {t_big_a - t_put:8.2f} ms")


if __name__ == "__main__":
    main()
