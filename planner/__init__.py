"""rota planner: throughput table, policies (Pyomo + HiGHS), round mechanism, schedules.

This package never imports torch.
"""

__version__ = "0.1.0"
