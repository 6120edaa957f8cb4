"""The round-based mechanism (priorities, deficits, placement) and the engine that steps it with a policy."""
