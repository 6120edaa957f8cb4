"""ResNet-18 (CIFAR-10 shapes), ResNet-50 (ImageNet shapes) and ViT, from
torchvision with random weights (nothing is downloaded).

Tiny scale keeps the architectures but cuts depth to one block per stage,
narrows the ResNet-50 bottlenecks and shrinks the images, so a step takes
milliseconds on a small CPU.
"""

from __future__ import annotations

import torch
from torchvision.models import resnet18, resnet50
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet
from torchvision.models.vision_transformer import VisionTransformer, vit_b_16

from models.common import classification_loss, random_images, random_labels, seed_everything, standard_step
from models.spec import BuildContext, Built


def _classifier(
    ctx: BuildContext,
    model: torch.nn.Module,
    image_size: int,
    classes: int,
    optimizer: torch.optim.Optimizer | None = None,
) -> Built:
    model = model.to(ctx.device).train()
    if optimizer is None:
        # Gavel's image models train with SGD + momentum.
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    n = ctx.batch_size

    def make_batch():
        return (random_images(n, 3, image_size, ctx.device), random_labels(n, classes, ctx.device))

    return Built(model, optimizer, make_batch, standard_step(optimizer, classification_loss), n)


def build_resnet18(ctx: BuildContext) -> Built:
    seed_everything()
    if ctx.tiny:
        return _classifier(ctx, ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10), 16, 10)
    return _classifier(ctx, resnet18(weights=None, num_classes=10), 32, 10)


def build_resnet50(ctx: BuildContext) -> Built:
    seed_everything()
    if ctx.tiny:
        # width_per_group=16 makes every bottleneck's 3x3 conv 4x narrower.
        model = ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10, width_per_group=16)
        return _classifier(ctx, model, 32, 10)
    return _classifier(ctx, resnet50(weights=None, num_classes=1000), 224, 1000)


def build_vit(ctx: BuildContext) -> Built:
    seed_everything()
    if ctx.tiny:
        model = VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
        )
        size, classes = 32, 10
    else:
        model, size, classes = vit_b_16(weights=None), 224, 1000
    model = model.to(ctx.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
    return _classifier(ctx, model, size, classes, optimizer)
