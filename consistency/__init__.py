"""Consistency: reconcile plan/apply, the scheduler and audit reports."""

__all__: list[str] = []
