"""Throughput profiler: device discovery, the timing loop, co-located and
data-parallel measurements, results appended to the throughput table.

Importing this package (or profiler.cli) does not import torch; workers import
it in their own processes.
"""
