"""Stop word lists shipped with hybridsag (query side only)."""
