"""Plots and printable views of schedules and experiments (matplotlib only where a plot is asked for)."""
