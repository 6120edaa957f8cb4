"""Transformer translation (Gavel's "Transformer"): the base encoder-decoder of
"Attention is all you need" on Multi30k-shaped batches (German → English).

Batch size counts sentence pairs; each is padded to a fixed length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.common import generator, seed_everything, standard_step
from models.spec import BuildContext, Built


@dataclass(frozen=True)
class TranslationShape:
    src_vocab: int
    tgt_vocab: int
    length: int
    d_model: int
    heads: int
    layers: int
    ffn: int


# Multi30k after the usual min-frequency cut: ~8k German, ~6k English tokens.
FULL = TranslationShape(src_vocab=8000, tgt_vocab=6000, length=32, d_model=512, heads=8, layers=6, ffn=2048)
TINY = TranslationShape(src_vocab=200, tgt_vocab=200, length=8, d_model=32, heads=2, layers=1, ffn=64)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, shape: TranslationShape):
        super().__init__()
        self.src_embed = nn.Embedding(shape.src_vocab, shape.d_model)
        self.tgt_embed = nn.Embedding(shape.tgt_vocab, shape.d_model)
        self.position = nn.Embedding(shape.length, shape.d_model)
        self.core = nn.Transformer(
            d_model=shape.d_model,
            nhead=shape.heads,
            num_encoder_layers=shape.layers,
            num_decoder_layers=shape.layers,
            dim_feedforward=shape.ffn,
            dropout=0.1,
            batch_first=True,
        )
        self.project = nn.Linear(shape.d_model, shape.tgt_vocab)
        self.register_buffer(
            "causal", nn.Transformer.generate_square_subsequent_mask(shape.length - 1), persistent=False
        )

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        src_pos = torch.arange(src.shape[1], device=src.device)
        tgt_pos = torch.arange(tgt_in.shape[1], device=src.device)
        hidden = self.core(
            self.src_embed(src) + self.position(src_pos),
            self.tgt_embed(tgt_in) + self.position(tgt_pos),
            tgt_mask=self.causal,
            tgt_is_causal=True,
        )
        return self.project(hidden)


def _loss(model, batch) -> torch.Tensor:
    src, tgt = batch
    logits = model(src, tgt[:, :-1])  # teacher forcing: predict the next token
    return nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), label_smoothing=0.1
    )


def build_transformer(ctx: BuildContext) -> Built:
    seed_everything()
    shape = TINY if ctx.tiny else FULL
    model = Seq2SeqTransformer(shape).to(ctx.device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    n = ctx.batch_size

    def make_batch():
        gen = generator(ctx.device)
        src = torch.randint(0, shape.src_vocab, (n, shape.length), device=ctx.device, generator=gen)
        tgt = torch.randint(0, shape.tgt_vocab, (n, shape.length), device=ctx.device, generator=gen)
        return src, tgt

    return Built(model, optimizer, make_batch, standard_step(optimizer, _loss), n)
