"""Offline evaluation: ``hybridsag eval``'s harness, the ranking measures, the one engine for offline
runs and captured runs for tuning.
"""

__all__: list[str] = []
