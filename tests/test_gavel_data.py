"""The Gavel data shipped in data/gavel: shape, provenance and values of the converted tables."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from planner.formats.gavel_json import import_gavel
from planner.formats.table import KEY_COLUMNS, JobType, read_table

CONSOLIDATED = ("k80", "p100", "v100")
ALL_TYPES = sorted(CONSOLIDATED + tuple(f"{w}_unconsolidated" for w in CONSOLIDATED))


@pytest.fixture(scope="module")
def simulation(gavel_dir: Path):
    return read_table(gavel_dir / "simulation_throughputs.csv")


@pytest.fixture(scope="module")
def physical(gavel_dir: Path):
    return read_table(gavel_dir / "physical_cluster_throughputs.csv")


def _key(r: dict) -> tuple:
    return tuple(r[c] for c in KEY_COLUMNS)


def test_shape_is_gavels(simulation):
    assert len(simulation) == 10830
    assert simulation.worker_types == ALL_TYPES
    solo = Counter((r["worker_type"], r["scale_factor"]) for r in simulation.rows if r["partner_model"] is None)
    pairs = Counter((r["worker_type"], r["scale_factor"]) for r in simulation.rows if r["partner_model"] is not None)
    for w in CONSOLIDATED:
        # 26 job types on one GPU, 19 distributed-capable ones on 2, 4 and 8; pairs only of equal scale factor
        assert [solo[(w, s)] for s in (1, 2, 4, 8)] == [26, 19, 19, 19]
        assert [pairs[(w, s)] for s in (1, 2, 4, 8)] == [26 * 26, 19 * 19, 19 * 19, 19 * 19]
    # Gavel never measured ResNet-50 bs 64 and 128 spread over servers on K80s
    assert [solo[("k80_unconsolidated", s)] for s in (1, 2, 4, 8)] == [26, 17, 17, 17]
    assert len({jt for jt in simulation.job_types if jt.scale_factor == 1}) == 26


def test_provenance_and_statuses(simulation, physical):
    for table in (simulation, physical):
        assert {r["source"] for r in table.rows} == {"imported"}
        for r in table.rows:
            # Gavel's zeros ("could not run" / "not profiled") are failed rows with throughput 0
            assert (r["status"] == "failed") == (r["throughput"] == 0.0)
            assert r["status"] in ("ok", "failed")


def test_spot_values_read_from_gavels_json(simulation):
    t = simulation
    assert t.solo("k80", JobType("ResNet-18", 16)) == 4.795294551566172
    assert t.pair("k80", JobType("ResNet-18", 16), JobType("ResNet-18", 32)) == (2.539979567443098, 3.1201925448827033)
    assert t.solo("v100", JobType("Transformer", 128)) == 5.44610521981264
    assert t.solo("p100", JobType("ResNet-50", 64, 4)) == 10.36465731519379
    assert t.solo("v100", JobType("A3C", None)) == 7.175767179667988
    assert t.pair("v100", JobType("LM", 80), JobType("Recommendation", 8192)) == (22.914094633780486, 1.545532001154679)
    assert t.solo("k80", JobType("ResNet-50", 128, 2)) == 0.0  # out of memory in Gavel's profiler
    assert t.solo("v100", JobType("LM", 5, 8)) == pytest.approx(698.8, abs=0.05)  # aggregate of 8 GPUs
    # a quirk of the simulation table: Recommendation is slower on V100 than on P100 and K80
    rec = JobType("Recommendation", 512)
    assert t.solo("v100", rec) < t.solo("k80", rec) < t.solo("p100", rec)


def test_physical_table_differs_only_in_73_solo_values(simulation, physical):
    sim = {_key(r): r["throughput"] for r in simulation.rows}
    phys = {_key(r): r["throughput"] for r in physical.rows}
    assert sim.keys() == phys.keys()
    changed = [k for k in sim if sim[k] != phys[k]]
    assert len(changed) == 73
    assert all(k[4] is None and k[0] in CONSOLIDATED for k in changed)
    assert physical.solo("v100", JobType("Recommendation", 512)) == pytest.approx(253.63, abs=0.01)


def test_csv_is_a_fresh_import_of_the_shipped_json(simulation, gavel_dir):
    assert import_gavel(gavel_dir / "simulation_throughputs.json").rows == simulation.rows


def test_licence_and_traces_are_shipped(gavel_dir):
    licence = (gavel_dir / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "Stanford Future Data Systems" in licence
    lines = {p.name: len(p.read_text().splitlines()) for p in (gavel_dir / "traces").glob("*.trace")}
    assert lines == {"small_test.trace": 20, "max_min_fairness.trace": 96, "minimize_makespan.trace": 100}
