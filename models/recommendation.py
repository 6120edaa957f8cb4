"""Autoencoder recommendation on MovieLens-20M shapes (Gavel's "Recommendation"):
each sample is one user's rating vector over all movies, mostly zeros; the
autoencoder reconstructs it and the loss counts only observed ratings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.common import generator, seed_everything, standard_step
from models.spec import BuildContext, Built


@dataclass(frozen=True)
class RecShape:
    items: int
    hidden: tuple[int, ...]
    density: float  # fraction of observed ratings per user


FULL = RecShape(items=26744, hidden=(512, 512, 1024), density=0.005)  # ML-20M: 26,744 rated movies
TINY = RecShape(items=256, hidden=(32, 16), density=0.05)


class RatingAutoencoder(nn.Module):
    def __init__(self, shape: RecShape):
        super().__init__()
        widths = (shape.items, *shape.hidden)
        layers: list[nn.Module] = []
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), nn.SELU()]
        self.encode = nn.Sequential(*layers)
        self.drop = nn.Dropout(0.8)  # heavy dropout on the code, as in deep autoencoder recommenders
        back = widths[::-1]
        layers = []
        for a, b in zip(back, back[1:]):
            layers += [nn.Linear(a, b), nn.SELU()]
        self.decode = nn.Sequential(*layers[:-1])  # linear output: ratings are unbounded

    def forward(self, ratings: torch.Tensor) -> torch.Tensor:
        return self.decode(self.drop(self.encode(ratings)))


def _loss(model, ratings: torch.Tensor) -> torch.Tensor:
    observed = ratings != 0
    error = (model(ratings) - ratings)[observed]
    return (error * error).sum() / observed.sum().clamp(min=1)


def build_recommendation(ctx: BuildContext) -> Built:
    seed_everything()
    shape = TINY if ctx.tiny else FULL
    model = RatingAutoencoder(shape).to(ctx.device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    n = ctx.batch_size

    def make_batch():
        gen = generator(ctx.device)
        mask = torch.rand(n, shape.items, device=ctx.device, generator=gen) < shape.density
        stars = torch.randint(1, 6, (n, shape.items), device=ctx.device, generator=gen).float()
        return stars * mask

    return Built(model, optimizer, make_batch, standard_step(optimizer, _loss), n)
