"""The agent text's character budget: its default, its bounds and their check.

One owner for what the settings (``mcp.budget``), the faces (``search --budget``, the service's
``budget``, the MCP ``search`` tool) and the agent format (:mod:`hybridsag.output.agent`) bound, so that
the configuration never imports an output module. Standard library only.
"""

from __future__ import annotations

__all__ = ["DEFAULT_BUDGET", "MAX_BUDGET", "MIN_BUDGET", "check_budget"]

#: Characters the text may take unless a caller says otherwise (about 1,000 tokens).
DEFAULT_BUDGET = 4000
#: The smallest budget that holds the header, one result and the footer.
MIN_BUDGET = 500
MAX_BUDGET = 200_000


def check_budget(budget: object) -> int:
    """``budget`` as an int in ``MIN_BUDGET..MAX_BUDGET``; ValueError naming it otherwise.

    >>> check_budget(2000)
    2000
    """
    if not isinstance(budget, int) or isinstance(budget, bool) or not (
        MIN_BUDGET <= budget <= MAX_BUDGET
    ):
        raise ValueError(
            f"budget must be an integer in {MIN_BUDGET}..{MAX_BUDGET} characters, got {budget!r}"
        )
    return budget
