"""Results as people and agents read them: the terminal renderer and the agent text within its
character budget.
"""

__all__: list[str] = []
