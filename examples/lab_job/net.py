"""The example's network: a small causal language model (a lab's "fine-tune" job in miniature).

Embedding, a few pre-norm transformer blocks, a tied output layer; trained on
next-token prediction. `tiny` shrinks it for CPU runs and tests.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB = 512


def make_model(tiny: bool) -> nn.Module:
    width, layers, heads = (64, 2, 4) if tiny else (512, 8, 8)
    return TinyLM(width, layers, heads)


class TinyLM(nn.Module):
    def __init__(self, width: int, layers: int, heads: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        causal = torch.triu(torch.full((length, length), float("-inf"), device=tokens.device), diagonal=1)
        hidden = self.norm(self.blocks(self.embed(tokens), mask=causal, is_causal=True))
        return hidden @ self.embed.weight.T  # tied output layer


def batch(size: int, length: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens and their next-token targets (the data pipeline is not what is measured)."""
    tokens = torch.randint(0, VOCAB, (size, length + 1), device=device)
    return tokens[:, :-1], tokens[:, 1:]


def loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(inputs)
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
