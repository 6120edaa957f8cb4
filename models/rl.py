"""A3C: a small convolutional actor-critic on Atari-shaped frames (4 stacked
84x84 grey frames, 6 actions). One step is one n-step rollout update of one
actor; the frames and rewards are synthetic, so no emulator is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.common import generator, seed_everything, standard_step
from models.spec import BuildContext, Built


@dataclass(frozen=True)
class RLShape:
    frame: int
    convs: tuple[tuple[int, int, int], ...]  # (channels, kernel, stride)
    hidden: int
    actions: int
    rollout: int


FULL = RLShape(frame=84, convs=((32, 8, 4), (64, 4, 2), (64, 3, 1)), hidden=512, actions=6, rollout=20)
TINY = RLShape(frame=36, convs=((8, 8, 4), (8, 4, 2)), hidden=32, actions=6, rollout=5)
GAMMA, VALUE_WEIGHT, ENTROPY_WEIGHT = 0.99, 0.5, 0.01


class ActorCritic(nn.Module):
    def __init__(self, shape: RLShape):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 4
        for out, kernel, stride in shape.convs:
            layers += [nn.Conv2d(channels, out, kernel, stride), nn.ReLU()]
            channels = out
        self.features = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = self.features(torch.zeros(1, 4, shape.frame, shape.frame)).shape[1]
        self.body = nn.Sequential(nn.Linear(flat, shape.hidden), nn.ReLU())
        self.policy = nn.Linear(shape.hidden, shape.actions)
        self.value = nn.Linear(shape.hidden, 1)

    def forward(self, frames: torch.Tensor):
        h = self.body(self.features(frames))
        return self.policy(h), self.value(h).squeeze(-1)


def _returns(rewards: torch.Tensor, bootstrap: torch.Tensor) -> torch.Tensor:
    out, running = [], bootstrap
    for r in reversed(rewards.unbind(0)):
        running = r + GAMMA * running
        out.append(running)
    return torch.stack(out[::-1])


def _loss(model, batch) -> torch.Tensor:
    frames, actions, rewards, last_frame = batch
    logits, values = model(frames)
    with torch.no_grad():
        _, bootstrap = model(last_frame)
    advantage = _returns(rewards, bootstrap[0]) - values
    log_probs = logits.log_softmax(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    policy_loss = -(log_probs.gather(1, actions[:, None]).squeeze(1) * advantage.detach()).mean()
    return policy_loss + VALUE_WEIGHT * advantage.pow(2).mean() - ENTROPY_WEIGHT * entropy


def build_a3c(ctx: BuildContext) -> Built:
    seed_everything()
    shape = TINY if ctx.tiny else FULL
    model = ActorCritic(shape).to(ctx.device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    n = shape.rollout

    def make_batch():
        gen = generator(ctx.device)
        frames = torch.rand(n + 1, 4, shape.frame, shape.frame, device=ctx.device, generator=gen)
        actions = torch.randint(0, shape.actions, (n,), device=ctx.device, generator=gen)
        rewards = torch.randint(-1, 2, (n,), device=ctx.device, generator=gen).float()
        return frames[:n], actions, rewards, frames[n:]

    return Built(model, optimizer, make_batch, standard_step(optimizer, _loss, clip_norm=40.0), n)
