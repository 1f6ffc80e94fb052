"""Token budget: count tokens (tiktoken, offline-safe) and cut long text to head + tail.

When a text exceeds its budget the whole text is archived and the model sees head + one line
naming the recovery reference + tail, all within the budget.
"""

from codemode.budget._counter import LOAD_TIMEOUT_SECONDS, TokenCounter
from codemode.budget._cut import HEAD_SHARE, MIN_BUDGET, READ_LIMIT, BudgetCut, cut_to_budget

__all__ = [
    "HEAD_SHARE",
    "LOAD_TIMEOUT_SECONDS",
    "MIN_BUDGET",
    "READ_LIMIT",
    "BudgetCut",
    "TokenCounter",
    "cut_to_budget",
]
