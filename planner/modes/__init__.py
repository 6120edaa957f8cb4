"""What users run on top of the engine: plan, next round, simulate, sweep, and their metrics."""
