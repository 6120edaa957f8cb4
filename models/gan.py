"""CycleGAN on 256x256 unpaired image batches: two ResNet generators, two
PatchGAN discriminators, least-squares GAN + cycle + identity losses.

Batch size 1, as in the paper (Gavel names CycleGAN without a batch size).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.common import random_images, seed_everything
from models.spec import BuildContext, Built


@dataclass(frozen=True)
class GanShape:
    image: int
    gen_filters: int
    res_blocks: int
    disc_filters: int
    disc_layers: int


FULL = GanShape(image=256, gen_filters=64, res_blocks=9, disc_filters=64, disc_layers=3)
TINY = GanShape(image=32, gen_filters=8, res_blocks=2, disc_filters=8, disc_layers=2)
CYCLE_WEIGHT, IDENTITY_WEIGHT = 10.0, 5.0


def _conv_block(c_in: int, c_out: int, kernel: int, stride: int, padding: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, kernel, stride, padding), nn.InstanceNorm2d(c_out), nn.ReLU(True)]


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1),
            *_conv_block(channels, channels, 3, 1, 0),
            nn.ReflectionPad2d(1),
            nn.Conv2d(channels, channels, 3),
            nn.InstanceNorm2d(channels),
        )

    def forward(self, x):
        return x + self.body(x)


def generator_net(shape: GanShape) -> nn.Module:
    f = shape.gen_filters
    layers: list[nn.Module] = [
        nn.ReflectionPad2d(3),
        *_conv_block(3, f, 7, 1, 0),
        *_conv_block(f, 2 * f, 3, 2, 1),
        *_conv_block(2 * f, 4 * f, 3, 2, 1),
    ]
    layers += [ResidualBlock(4 * f) for _ in range(shape.res_blocks)]
    for c_in, c_out in ((4 * f, 2 * f), (2 * f, f)):
        layers += [nn.ConvTranspose2d(c_in, c_out, 3, 2, 1, output_padding=1), nn.InstanceNorm2d(c_out), nn.ReLU(True)]
    layers += [nn.ReflectionPad2d(3), nn.Conv2d(f, 3, 7), nn.Tanh()]
    return nn.Sequential(*layers)


def discriminator_net(shape: GanShape) -> nn.Module:
    f = shape.disc_filters
    layers: list[nn.Module] = [nn.Conv2d(3, f, 4, 2, 1), nn.LeakyReLU(0.2, True)]
    width = f
    for i in range(1, shape.disc_layers + 1):
        nxt = f * min(2**i, 8)
        stride = 2 if i < shape.disc_layers else 1
        layers += [nn.Conv2d(width, nxt, 4, stride, 1), nn.InstanceNorm2d(nxt), nn.LeakyReLU(0.2, True)]
        width = nxt
    layers.append(nn.Conv2d(width, 1, 4, 1, 1))  # one real/fake score per patch
    return nn.Sequential(*layers)


def _lsgan(scores: torch.Tensor, real: bool) -> torch.Tensor:
    return nn.functional.mse_loss(scores, torch.full_like(scores, 1.0 if real else 0.0))


def build_cyclegan(ctx: BuildContext) -> Built:
    seed_everything()
    shape = TINY if ctx.tiny else FULL
    nets = nn.ModuleDict(
        {
            "g_ab": generator_net(shape),
            "g_ba": generator_net(shape),
            "d_a": discriminator_net(shape),
            "d_b": discriminator_net(shape),
        }
    )
    nets = nets.to(ctx.device).train()
    gen_params = [*nets["g_ab"].parameters(), *nets["g_ba"].parameters()]
    disc_params = [*nets["d_a"].parameters(), *nets["d_b"].parameters()]
    opt_g = torch.optim.Adam(gen_params, lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc_params, lr=2e-4, betas=(0.5, 0.999))
    l1 = nn.functional.l1_loss

    def make_batch():
        return (
            random_images(1, 3, shape.image, ctx.device, seed=0).tanh(),
            random_images(1, 3, shape.image, ctx.device, seed=1).tanh(),
        )

    def train_step(model, batch):
        real_a, real_b = batch
        g_ab, g_ba, d_a, d_b = model["g_ab"], model["g_ba"], model["d_a"], model["d_b"]
        # Generators: fool both discriminators, reconstruct both ways, keep identity.
        opt_g.zero_grad(set_to_none=True)
        fake_b, fake_a = g_ab(real_a), g_ba(real_b)
        loss_g = (
            _lsgan(d_b(fake_b), True)
            + _lsgan(d_a(fake_a), True)
            + CYCLE_WEIGHT * (l1(g_ba(fake_b), real_a) + l1(g_ab(fake_a), real_b))
            + IDENTITY_WEIGHT * (l1(g_ab(real_b), real_b) + l1(g_ba(real_a), real_a))
        )
        loss_g.backward()
        opt_g.step()
        # Discriminators: real vs (detached) fake.
        opt_d.zero_grad(set_to_none=True)
        loss_d = 0.5 * (
            _lsgan(d_a(real_a), True)
            + _lsgan(d_a(fake_a.detach()), False)
            + _lsgan(d_b(real_b), True)
            + _lsgan(d_b(fake_b.detach()), False)
        )
        loss_d.backward()
        opt_d.step()
        return loss_g + loss_d

    return Built(nets, (opt_g, opt_d), make_batch, train_step, 1)
