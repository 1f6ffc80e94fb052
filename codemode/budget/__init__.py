"""Token budget: count tokens (tiktoken, offline-safe) and fit text to a budget.

When a text exceeds its budget the whole text is archived and the model sees each block's head
and tail around one line naming the recovery reference, all within the budget.
"""

from codemode.budget._counter import LOAD_TIMEOUT_SECONDS, TokenCounter
from codemode.budget._cut import (
    HEAD_SHARE,
    MIN_BUDGET,
    READ_LIMIT,
    BudgetCut,
    fit_to_budget,
    read_archive_call,
)

__all__ = [
    "HEAD_SHARE",
    "LOAD_TIMEOUT_SECONDS",
    "MIN_BUDGET",
    "READ_LIMIT",
    "BudgetCut",
    "TokenCounter",
    "fit_to_budget",
    "read_archive_call",
]
