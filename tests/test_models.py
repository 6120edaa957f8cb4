"""The reference-model registry and one training step of every tiny config."""

from __future__ import annotations

import math
import sys

import pytest

import models
from models.registry import GAVEL_WORKLOADS, gpt_workload
from planner.formats.table import model_label

GAVEL_JOB_TYPES = (
    [f"ResNet-18 (batch size {b})" for b in (16, 32, 64, 128, 256)]
    + [f"ResNet-50 (batch size {b})" for b in (16, 32, 64, 128)]
    + [f"Transformer (batch size {b})" for b in (16, 32, 64, 128, 256)]
    + [f"LM (batch size {b})" for b in (5, 10, 20, 40, 80)]
    + [f"Recommendation (batch size {b})" for b in (512, 1024, 2048, 4096, 8192)]
    + ["A3C", "CycleGAN"]
)


def test_registry_has_gavels_26_job_types_in_order():
    names = [model_label(s.model, b) for s in GAVEL_WORKLOADS for b in s.batch_choices]
    assert names == GAVEL_JOB_TYPES


def test_data_parallel_support_matches_gavel():
    dp = {s.model for s in models.workloads() if s.data_parallel}
    assert dp == {"ResNet-18", "ResNet-50", "Transformer", "LM", "GPT", "ViT"}
    assert all(s.scale_factors == (1, 2, 4, 8) for s in models.workloads() if s.data_parallel)


def test_lookup_and_gpt_sizes():
    assert models.get("resnet-18").model == "ResNet-18"
    assert gpt_workload("medium").model == "GPT-medium"
    assert models.get("GPT-medium", gpt_size="medium").options == {"size": "medium"}
    with pytest.raises(KeyError, match="known"):
        models.get("AlexNet")
    with pytest.raises(ValueError):
        gpt_workload("huge")


def test_listing_the_registry_does_not_import_torch():
    import subprocess

    code = "import models, profiler.cli, sys; models.workloads(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _tiny_cases():
    return [
        pytest.param(spec, bs, id=model_label(spec.model, bs))
        for spec in models.workloads()
        for bs in spec.batch_choices
    ]


@pytest.mark.parametrize("spec,batch_size", _tiny_cases())
def test_every_tiny_config_runs_one_step(spec, batch_size):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    built = models.build(spec, models.BuildContext(batch_size, "cpu", "tiny"))
    before = [p.detach().clone() for p in built.model.parameters()][:3]
    loss = built.train_step(built.model, built.make_batch())
    assert math.isfinite(float(loss.detach()))
    assert built.samples_per_step == (batch_size or built.samples_per_step) > 0
    after = list(built.model.parameters())[:3]
    assert any(not torch.equal(b, a.detach()) for b, a in zip(before, after)), "no parameter was updated"


@pytest.mark.parametrize(
    "name,batch,shape",
    [
        ("ResNet-18", 16, (16, 3, 32, 32)),  # CIFAR-10
        ("ResNet-50", 16, (16, 3, 224, 224)),  # ImageNet
        ("LM", 20, (20, 35)),  # BPTT 35
        ("Transformer", 32, (32, 32)),
        ("A3C", None, (20, 4, 84, 84)),  # 20-step rollout of Atari frames
    ],
)
def test_real_shapes_are_the_default(name, batch, shape):
    pytest.importorskip("torch")
    assert models.BuildContext().scale == "full"
    built = models.build(models.get(name), models.BuildContext(batch, "cpu"))
    inputs = built.make_batch()[0]
    assert tuple(inputs.shape) == shape


def test_bad_scale_is_rejected():
    with pytest.raises(ValueError):
        models.BuildContext(scale="huge")
