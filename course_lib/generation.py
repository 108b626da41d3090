"""Turning a language model into a writer: predict, pick a token, append, repeat."""

from __future__ import annotations

import torch
import torch.nn as nn


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    context_length: int,
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Extend each row of ``idx`` (B, T) by ``max_new_tokens`` tokens.

    At every step the model sees at most the last ``context_length`` tokens; the logits of
    the last position give the next token, either the most likely one (``greedy``) or a draw
    from softmax(logits / temperature).
    """
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be positive (or use greedy=True), got {temperature}")
    was_training = model.training
    model.eval()
    for _ in range(max_new_tokens):
        logits = model(idx[:, -context_length:])[:, -1, :]  # (B, V): the prediction after the last token
        if greedy:
            next_id = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            next_id = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        idx = torch.cat([idx, next_id], dim=1)  # (B, T + 1)
    model.train(was_training)
    return idx
