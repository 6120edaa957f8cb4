"""Pieces every torch workload shares: the standard step and a seeded start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def seed_everything(seed: int = 0) -> None:
    # Same weights and batches on every run, so repeated measurements compare.
    torch.manual_seed(seed)


def generator(device: str, seed: int = 0) -> torch.Generator:
    return torch.Generator(device=torch.device(device).type).manual_seed(seed)


def standard_step(
    optimizer: torch.optim.Optimizer, loss_fn: Callable[[Any, Any], torch.Tensor], clip_norm: float | None = None
) -> Callable[[Any, Any], torch.Tensor]:
    """zero_grad → loss → backward → (clip) → step, on whatever model is passed."""

    def train_step(model, batch):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, batch)
        loss.backward()
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        optimizer.step()
        return loss

    return train_step


def classification_loss(model, batch) -> torch.Tensor:
    inputs, labels = batch
    return torch.nn.functional.cross_entropy(model(inputs), labels)


def token_batches(n: int, vocab: int, length: int, device: str) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """make_batch for language models: random tokens and the same stream shifted by one."""

    def make_batch():
        stream = torch.randint(0, vocab, (n, length + 1), device=device, generator=generator(device))
        return stream[:, :-1], stream[:, 1:]

    return make_batch


def next_token_loss(model, batch) -> torch.Tensor:
    """Cross-entropy of every position's prediction: (tokens, targets) language-model batches."""
    tokens, targets = batch
    logits = model(tokens)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def random_images(n: int, channels: int, size: int, device: str, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, channels, size, size, device=device, generator=generator(device, seed))


def random_labels(n: int, classes: int, device: str, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, classes, (n,), device=device, generator=generator(device, seed))
