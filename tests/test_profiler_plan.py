"""Device naming, plan building and option parsing (no torch needed)."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from profiler.devices import DeviceType, cpu_device, group_cuda, normalise_name
from profiler.plan import Selection, build_plan, estimate_s, parse_ints, parse_job, parse_pairs, selected_jobs


@pytest.mark.parametrize(
    "name,expected",
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("Tesla V100-SXM2-16GB", "v100-16gb"),
        ("NVIDIA H100 80GB HBM3", "h100-80gb"),
        ("Tesla K80", "k80"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA L4", "l4"),
    ],
)
def test_normalise_name(name, expected):
    assert normalise_name(name) == expected


def test_cuda_devices_are_grouped_by_model_with_full_names_kept():
    found = group_cuda(
        [
            {"index": 0, "name": "NVIDIA H200", "memory": 150 * 2**30},
            {"index": 1, "name": "NVIDIA A100-SXM4-80GB", "memory": 80 * 2**30},
            {"index": 2, "name": "NVIDIA H200", "memory": 150 * 2**30},
        ]
    )
    by_type = {d.worker_type: d for d in found}
    assert set(by_type) == {"h200", "a100-80gb"}
    assert by_type["h200"].indices == (0, 2) and by_type["h200"].device_name == "NVIDIA H200"
    assert by_type["h200"].device(1) == "cuda:2" and by_type["h200"].max_processes == 2


def test_cpu_device():
    cpu = cpu_device()
    assert cpu.worker_type == "cpu" and cpu.device() == "cpu"
    assert cpu.max_processes == cpu.count == cpu.cores >= 1  # one core per worker by default
    assert cpu.cpu_set(0) == cpu.core_ids[:1]
    with pytest.raises(ValueError):
        cpu_device(cores_per_worker=cpu.cores + 1)


CPU2 = DeviceType("cpu", "cpu", (0, 1), "cpu", core_ids=(0, 1))
GPU8 = DeviceType("h200", "cuda", tuple(range(8)), "NVIDIA H200")


def test_full_plan_matches_gavels_task_list():
    tasks = build_plan([GPU8], Selection())
    modes = [t.mode for t in tasks]
    n_jobs = 26 + 4 + 4  # Gavel's 26 plus GPT and ViT batch sizes
    assert modes.count("solo") == n_jobs
    assert modes.count("data_parallel") == (19 + 8) * 3  # distributed-capable types x {2,4,8}
    assert modes.count("pair") == n_jobs * (n_jobs + 1) // 2
    assert modes.index("pair") > max(i for i, m in enumerate(modes) if m != "pair")  # solos first


def test_scale_factors_are_capped_by_the_device():
    tasks = build_plan([CPU2], Selection(models=("LM", "A3C"), pairs="none"))
    assert sorted({t.scale_factor for t in tasks}) == [1, 2]
    assert all(t.jobs[0].model == "LM" for t in tasks if t.scale_factor == 2)  # A3C is single-device


def test_batch_filter_and_explicit_pairs_add_needed_solos():
    sel = Selection(
        models=("ResNet-18",), batch_sizes=(16,), pairs=parse_pairs("ResNet-18@16+LM@5,A3C+A3C"), scale_factors=(1,)
    )
    tasks = build_plan([CPU2], sel)
    solos = [t.jobs[0].label for t in tasks if not t.is_pair]
    assert solos == ["ResNet-18 (batch size 16)", "LM (batch size 5)", "A3C"]
    pair_keys = [k for t in tasks if t.is_pair for k in t.row_keys()]
    assert ("cpu", "A3C", None, 1, "A3C", None) in pair_keys
    assert len(pair_keys) == 3  # mixed pair: two rows; self pair: one


def test_parsing_and_errors():
    assert parse_job("ResNet-18@16") == ("ResNet-18", 16)
    assert parse_job("LM (batch size 10)") == ("LM", 10)
    assert parse_job("CycleGAN") == ("CycleGAN", None)
    assert parse_ints("1, 2,4", "--x") == (1, 2, 4) and parse_ints(None, "--x") is None
    with pytest.raises(InputError, match="--scale-factors"):
        parse_ints("1,two", "--scale-factors")
    with pytest.raises(InputError, match="--pairs"):
        parse_pairs("ResNet-18@16")
    with pytest.raises(InputError, match="unknown model 'AlexNet'"):
        selected_jobs(Selection(models=("AlexNet",)))
    with pytest.raises(InputError, match="no batch size 7"):
        build_plan([CPU2], Selection(pairs=parse_pairs("LM@7+LM@5")))
    with pytest.raises(InputError, match="batch sizes"):
        selected_jobs(Selection(models=("LM",), batch_sizes=(3,)))


def test_estimate_counts_startup_and_budget():
    tasks = build_plan([CPU2], Selection(models=("LM",), batch_sizes=(5,), pairs="none", scale_factors=(1,)))
    assert estimate_s(tasks, 10.0) == pytest.approx(15.0)
