"""Estimating throughputs that were never measured (low-rank completion of co-location factors)."""
