"""Policy registry: name -> factory. Names follow Gavel so results compare."""
from __future__ import annotations

from typing import Callable

from planner.errors import InputError
from planner.policies.base import Allocation, Policy
from planner.policies.closed_form import Isolated, Proportional
from planner.policies.fifo import Fifo
from planner.policies.lp import DEFAULT_METHOD
from planner.policies.max_min_fairness import MaxMinFairness
from planner.policies.max_sum_throughput import MaxSumThroughput
from planner.policies.water_filling import WaterFilling

_FACTORIES: dict[str, tuple[Callable[..., Policy], str]] = {
    "isolated": (lambda **o: Isolated(), "equal 1/n share of every worker type (no solver)"),
    "proportional": (lambda **o: Proportional(), "share of each type proportional to its size (no solver)"),
    "max_min_fairness": (lambda **o: MaxMinFairness(perf_aware=False, **o),
                         "LAS, heterogeneity-agnostic: equalise GPU-time"),
    "max_min_fairness_perf": (lambda **o: MaxMinFairness(perf_aware=True, **o),
                              "LAS, heterogeneity-aware: equalise throughput vs. proportional share"),
    "fifo": (lambda seed=0, **o: Fifo(perf_aware=False, seed=seed), "first come first served, random type"),
    "fifo_perf": (lambda **o: Fifo(perf_aware=True), "first come first served, fastest free type"),
    "max_sum_throughput_perf": (lambda **o: MaxSumThroughput(**o), "maximise total steps/s"),
}

POLICY_NAMES = list(_FACTORIES)


def describe_policies() -> dict[str, str]:
    return {name: text for name, (_, text) in _FACTORIES.items()}


def make_policy(name: str, *, method: str = DEFAULT_METHOD, aggregate: bool = True, seed: int = 0) -> Policy:
    if name not in _FACTORIES:
        raise InputError(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}", field="policy")
    factory, _ = _FACTORIES[name]
    if name in ("isolated", "proportional", "fifo_perf"):
        return factory()
    if name == "fifo":
        return factory(seed=seed)
    return factory(method=method, aggregate=aggregate)


__all__ = ["Allocation", "Policy", "POLICY_NAMES", "make_policy", "describe_policies"]

_FACTORIES["max_min_fairness_packed"] = (
    lambda **o: MaxMinFairness(perf_aware=True, packed=True, **o),
    "LAS with space sharing: co-locate pairs where the table says it pays")
POLICY_NAMES = list(_FACTORIES)

for _suffix, _perf, _packed, _text in (
        ("", False, False, "progressive filling to the unique max-min fair GPU-time shares"),
        ("_perf", True, False, "progressive filling to the unique max-min fair throughput shares"),
        ("_packed", True, True, "progressive filling with space sharing")):
    _FACTORIES["max_min_fairness_water_filling" + _suffix] = (
        lambda perf=_perf, packed=_packed, **o: WaterFilling(perf_aware=perf, packed=packed, **o), _text)
POLICY_NAMES = list(_FACTORIES)
