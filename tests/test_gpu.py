"""On a CUDA GPU: discovery, a training step of every reference model, and real
profiles (solo with restart costs, a co-located pair, a real out-of-memory).

Skipped, with the reason, where torch is missing or sees no CUDA device; the same
paths run on the CPU in the other profiler tests.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: torch.cuda.is_available() is False"
)

import models  # noqa: E402
from models.spec import WorkloadSpec  # noqa: E402
from planner.formats.table import RESTART_COLUMNS, model_label, read_table  # noqa: E402
from profiler.devices import discover, normalise_name  # noqa: E402
from profiler.plan import Selection, build_plan, parse_pairs  # noqa: E402
from profiler.session import RunOptions, run_plan  # noqa: E402
from profiler.timing import TimingConfig  # noqa: E402

QUICK = TimingConfig(warmup_steps=2, window_s=0.05, min_windows=3, budget_s=0.5, target_spread=0.05)


def _gpu():
    found = [d for d in discover() if d.backend == "cuda"]
    assert found, "torch sees a CUDA device but discovery found none"
    return found[0]


def test_discovery_names_each_gpu_by_its_model_and_memory():
    gpu = _gpu()
    props = torch.cuda.get_device_properties(0)
    assert gpu.worker_type == normalise_name(props.name)
    assert props.name in gpu.device_name
    assert gpu.memory_bytes == min(torch.cuda.get_device_properties(i).total_memory for i in gpu.indices)
    assert gpu.device(0) == f"cuda:{gpu.indices[0]}"


def _cases():
    return [
        pytest.param(spec, bs, id=model_label(spec.model, bs))
        for spec in models.workloads()
        for bs in spec.batch_choices
    ]


@pytest.mark.parametrize("spec,batch_size", _cases())
def test_every_reference_model_trains_one_step_on_the_gpu(spec, batch_size):
    device = _gpu().device(0)
    built = models.build(spec, models.BuildContext(batch_size, device, "tiny"))
    params = list(built.model.parameters())
    assert all(p.device.type == "cuda" for p in params)
    before = [p.detach().clone() for p in params[:3]]
    loss = built.train_step(built.model, built.make_batch())
    torch.cuda.synchronize()
    assert math.isfinite(float(loss.detach()))
    assert any(not torch.equal(b, a.detach()) for b, a in zip(before, params[:3])), "no parameter was updated"


def test_solo_rows_and_a_pair_measured_on_the_gpu(tmp_path):
    gpu = _gpu()
    out = tmp_path / "gpu.csv"
    selection = Selection(
        models=("ResNet-18", "LM"),
        batch_sizes=(16, 5),
        pairs=parse_pairs("ResNet-18@16+LM@5"),
        scale_factors=(1,),
    )
    tasks = build_plan([gpu], selection)
    outcomes = run_plan(tasks, RunOptions(out=out, scale="tiny", timing=QUICK))
    assert [o.status for o in outcomes] == ["ok"] * len(outcomes), [o.message for o in outcomes]
    rows = read_table(out).rows
    solo = {r["model"]: r for r in rows if not r["partner_model"]}
    pair = [r for r in rows if r["partner_model"]]
    assert set(solo) == {"ResNet-18", "LM"} and len(pair) == 2
    for row in rows:
        assert row["worker_type"] == gpu.worker_type and row["status"] == "ok"
        assert row["source"] == "measured" and row["throughput"] > 0 and row["n_steps"] > 0
    for row in solo.values():
        for column in RESTART_COLUMNS:
            assert row[column] is not None and row[column] > 0, (row["model"], column, row[column])
        assert row["peak_memory_bytes"] > 0  # torch.cuda.max_memory_allocated
    # Sharing one GPU cannot make a job faster than it runs alone (10 % for noise).
    for row in pair:
        assert row["throughput"] <= 1.1 * solo[row["model"]]["throughput"], row


def test_a_real_cuda_out_of_memory_is_recorded_as_oom(tmp_path):
    gpu = _gpu()
    too_much = 2 * gpu.memory_bytes / 2**30
    spec = WorkloadSpec("Hog", "fakes", "profiler.fakes:build_device_alloc", (), (1,), options={"gib": too_much})
    tasks = build_plan([gpu], Selection(registry=(spec,), pairs="none", scale_factors=(1,)))
    out = tmp_path / "oom.csv"
    (outcome,) = run_plan(tasks, RunOptions(out=out, timing=QUICK, restart_cost=False))
    assert outcome.status == "oom", outcome.message
    (row,) = read_table(out).rows
    assert row["status"] == "oom" and row["throughput"] == 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="data-parallel over NCCL needs two CUDA devices")
def test_data_parallel_over_two_gpus_gives_one_row(tmp_path):
    gpu = _gpu()
    out = tmp_path / "dp.csv"
    selection = Selection(models=("ResNet-18",), batch_sizes=(16,), pairs="none", scale_factors=(1, 2))
    outcomes = run_plan(build_plan([gpu], selection), RunOptions(out=out, scale="tiny", timing=QUICK))
    assert all(o.status == "ok" for o in outcomes), [o.message for o in outcomes]
    by_k = {r["scale_factor"]: r for r in read_table(out).rows}
    assert set(by_k) == {1, 2} and by_k[2]["throughput"] > 0
