"""GPT-style decoder-only language model, sized by preset (GPT-2 shapes).

Pre-norm blocks, causal scaled-dot-product attention, GELU MLP, tied input
and output embeddings. Batch size counts sequences of `context` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.common import next_token_loss, seed_everything, standard_step, token_batches
from models.spec import BuildContext, Built


@dataclass(frozen=True)
class GPTConfig:
    layers: int
    width: int
    heads: int
    context: int = 1024
    vocab: int = 50257


PRESETS = {
    "small": GPTConfig(12, 768, 12),  # ~124M parameters
    "medium": GPTConfig(24, 1024, 16),  # ~350M
    "large": GPTConfig(36, 1280, 20),  # ~774M
    "xl": GPTConfig(48, 1600, 25),  # ~1.5B
}
TINY = GPTConfig(layers=2, width=32, heads=2, context=16, vocab=128)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.norm1, self.norm2 = nn.LayerNorm(cfg.width), nn.LayerNorm(cfg.width)
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width)
        self.out = nn.Linear(cfg.width, cfg.width)
        self.mlp = nn.Sequential(nn.Linear(cfg.width, 4 * cfg.width), nn.GELU(), nn.Linear(4 * cfg.width, cfg.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        attended = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.tokens = nn.Embedding(cfg.vocab, cfg.width)
        self.positions = nn.Embedding(cfg.context, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied embeddings
        for table in (self.tokens, self.positions):
            nn.init.normal_(table.weight, std=0.02)  # GPT-2's init keeps first logits small

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def config_for(ctx: BuildContext) -> GPTConfig:
    if ctx.tiny:
        return TINY
    size = ctx.options.get("size", "small")
    if size not in PRESETS:
        raise ValueError(f"unknown GPT size {size!r} (expected one of {', '.join(PRESETS)})")
    return PRESETS[size]


def build_gpt(ctx: BuildContext) -> Built:
    seed_everything()
    cfg = config_for(ctx)
    model = GPT(cfg).to(ctx.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    n = ctx.batch_size
    make_batch = token_batches(n, cfg.vocab, cfg.context, ctx.device)

    return Built(model, optimizer, make_batch, standard_step(optimizer, next_token_loss, clip_norm=1.0), n)
