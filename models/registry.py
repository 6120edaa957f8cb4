"""The reference workloads, in Gavel's JobTable order, then the modern two.

Listing the registry imports no torch: builders are "module:function" strings
resolved only when a workload is built.
"""

from __future__ import annotations

from models.spec import WorkloadSpec

DP = (1, 2, 4, 8)  # data-parallel scale factors Gavel profiles
SINGLE = (1,)  # single-device only

GAVEL_WORKLOADS: tuple[WorkloadSpec, ...] = (
    WorkloadSpec(
        "ResNet-18",
        "image_classification",
        "models.image_classification:build_resnet18",
        (16, 32, 64, 128, 256),
        DP,
        "ResNet-18, CIFAR-10 shapes (3x32x32, 10 classes)",
    ),
    WorkloadSpec(
        "ResNet-50",
        "image_classification",
        "models.image_classification:build_resnet50",
        (16, 32, 64, 128),
        DP,
        "ResNet-50, ImageNet shapes (3x224x224, 1000 classes)",
    ),
    WorkloadSpec(
        "Transformer",
        "translation",
        "models.translation:build_transformer",
        (16, 32, 64, 128, 256),
        DP,
        "Transformer base, Multi30k de-en shapes",
    ),
    WorkloadSpec(
        "LM",
        "language_model",
        "models.language_model:build_lm",
        (5, 10, 20, 40, 80),
        DP,
        "2-layer LSTM LM, WikiText-2 shapes (BPTT 35)",
    ),
    WorkloadSpec(
        "Recommendation",
        "recommendation",
        "models.recommendation:build_recommendation",
        (512, 1024, 2048, 4096, 8192),
        SINGLE,
        "autoencoder recommender, ML-20M shapes",
    ),
    WorkloadSpec(
        "A3C", "rl", "models.rl:build_a3c", (), SINGLE, "conv actor-critic, Atari frames (4x84x84), 20-step rollouts"
    ),
    WorkloadSpec("CycleGAN", "gan", "models.gan:build_cyclegan", (), SINGLE, "CycleGAN, 256x256 images, batch 1"),
)

GPT_SIZES = ("small", "medium", "large", "xl")


def gpt_workload(size: str = "small") -> WorkloadSpec:
    """The decoder LM at a GPT-2 size; other sizes get their own table name."""
    if size not in GPT_SIZES:
        raise ValueError(f"unknown GPT size {size!r} (expected one of {', '.join(GPT_SIZES)})")
    name = "GPT" if size == "small" else f"GPT-{size}"
    return WorkloadSpec(
        name,
        "decoder_lm",
        "models.decoder_lm:build_gpt",
        (4, 8, 16, 32),
        DP,
        f"GPT-2 {size} decoder LM, 1024-token context",
        {"size": size},
    )


VIT = WorkloadSpec(
    "ViT",
    "image_classification",
    "models.image_classification:build_vit",
    (16, 32, 64, 128),
    DP,
    "ViT-B/16, ImageNet shapes (3x224x224)",
)


def workloads(gpt_size: str = "small") -> tuple[WorkloadSpec, ...]:
    return (*GAVEL_WORKLOADS, gpt_workload(gpt_size), VIT)


def get(model: str, gpt_size: str = "small") -> WorkloadSpec:
    """Look a family up by table name, case-insensitively."""
    for spec in workloads(gpt_size):
        if spec.model.lower() == model.strip().lower():
            return spec
    names = ", ".join(s.model for s in workloads(gpt_size))
    raise KeyError(f"unknown model {model!r} (known: {names})")
