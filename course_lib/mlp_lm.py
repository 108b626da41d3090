"""The MLP language model of Bengio, Ducharme, Vincent and Jauvin (2003).

Embed each of the last ``c`` tokens, concatenate the ``c`` vectors, pass them through one
tanh hidden layer, and output logits over the vocabulary. The first widely cited neural
probabilistic language model with learned word embeddings: what it learns about a token is shared
across all contexts.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLPLanguageModel(nn.Module):
    """(B, T) token ids -> (B, T, V) logits; position t sees the ``context`` tokens ending at t.

    Positions before the start of the sequence are filled with an extra, learned "padding"
    embedding (id ``vocab_size``), so every position gets a prediction and the model trains
    on the same (B, T) windows as every later model in the course.
    """

    def __init__(self, vocab_size: int, context: int, embed_dim: int = 32, hidden: int = 512):
        super().__init__()
        if context < 1:
            raise ValueError(f"context must be at least 1 token, got {context}")
        self.vocab_size, self.context = vocab_size, context
        self.embed = nn.Embedding(vocab_size + 1, embed_dim)  # + 1: the padding token
        self.hidden = nn.Linear(context * embed_dim, hidden)
        self.out = nn.Linear(hidden, vocab_size)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.numel() and idx.device.type != "meta" and (idx.min() < 0 or idx.max() >= self.vocab_size):
            raise ValueError(f"token ids must be in 0..{self.vocab_size - 1}")
        padded = F.pad(idx, (self.context - 1, 0), value=self.vocab_size)  # (B, T + c - 1)
        windows = padded.unfold(1, self.context, 1)  # (B, T, c): the c tokens ending at each t
        x = self.embed(windows).flatten(2)  # (B, T, c * E)
        h = torch.tanh(self.hidden(x))  # (B, T, hidden)
        return self.out(h)  # (B, T, V)
