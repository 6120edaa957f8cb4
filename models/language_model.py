"""LSTM language model on WikiText-2 shapes (Gavel's "LM", after PyTorch's
word_language_model example): 2-layer LSTM, truncated BPTT of 35 tokens.

Batch size is the number of parallel token streams, as in that example.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.common import next_token_loss, seed_everything, standard_step, token_batches
from models.spec import BuildContext, Built


@dataclass(frozen=True)
class LMShape:
    vocab: int
    embed: int
    hidden: int
    layers: int
    bptt: int


FULL = LMShape(vocab=33278, embed=200, hidden=200, layers=2, bptt=35)  # WikiText-2 vocabulary
TINY = LMShape(vocab=200, embed=16, hidden=16, layers=2, bptt=8)


class LSTMLanguageModel(nn.Module):
    def __init__(self, shape: LMShape):
        super().__init__()
        self.embed = nn.Embedding(shape.vocab, shape.embed)
        self.drop = nn.Dropout(0.2)
        self.lstm = nn.LSTM(shape.embed, shape.hidden, shape.layers, dropout=0.2, batch_first=True)
        self.decode = nn.Linear(shape.hidden, shape.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # A fresh zero state each step: equivalent cost to detaching the carried one.
        out, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.decode(self.drop(out))


def build_lm(ctx: BuildContext) -> Built:
    seed_everything()
    shape = TINY if ctx.tiny else FULL
    model = LSTMLanguageModel(shape).to(ctx.device).train()
    # The example's plain SGD with lr 20 and gradient clipping at 0.25.
    optimizer = torch.optim.SGD(model.parameters(), lr=20.0)
    n = ctx.batch_size
    make_batch = token_batches(n, shape.vocab, shape.bptt, ctx.device)

    return Built(model, optimizer, make_batch, standard_step(optimizer, next_token_loss, clip_norm=0.25), n)
