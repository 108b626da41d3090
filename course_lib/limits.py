"""Measuring some limits of language models (chapter 12): memorisation and templated bias probes.

- :func:`verbatim_continuations` feeds the model prefixes cut from a text and checks whether its
  greedy continuation reproduces the text word for word: on training text that is memorisation
  (and, with personal data in the corpus, a privacy leak); on unseen text it is the baseline of
  what is simply predictable;
- :func:`next_word_probabilities` reads the probability of a few candidate next words after
  templated prompts ("The nurse said that" -> " he" / " she"): a probe, with the caveats that the
  templates, the words and the model's other uses of them all shape the number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .generation import generate
from .model import GPT
from .runtime import evaluating, model_device


@dataclass
class Verbatim:
    exact: float  # share of prefixes whose whole continuation is reproduced
    mean_tokens: float  # mean number of leading continuation tokens reproduced
    n: int
    leading: list[int] = field(default_factory=list, repr=False)  # that number, per prefix

    def mean_tokens_interval(self, z: float = 1.96) -> tuple[float, float]:
        """A 95% interval for ``mean_tokens`` (normal approximation: mean ± z·sd/√n)."""
        if len(self.leading) < 2:
            raise ValueError(f"need the counts of at least 2 prefixes, got {len(self.leading)}")
        values = torch.tensor(self.leading, dtype=torch.float64)
        half = z * values.std().item() / len(values) ** 0.5
        return self.mean_tokens - half, self.mean_tokens + half


@torch.no_grad()
def verbatim_continuations(
    model: GPT, ids: torch.Tensor, n: int = 100, prefix_length: int = 32, length: int = 16, seed: int = 0
) -> Verbatim:
    """Greedy continuations of ``n`` prefixes cut at random places of ``ids`` (1-D), compared
    token by token with what really follows them."""
    window = prefix_length + length
    if len(ids) < window + 1 or n < 1:
        raise ValueError(f"need at least {window + 1} tokens and n >= 1, got {len(ids)} tokens and n={n}")
    starts = torch.randint(0, len(ids) - window, (n,), generator=torch.Generator().manual_seed(seed))
    windows = torch.stack([ids[s : s + window] for s in starts.tolist()])  # (n, prefix + length)
    out = generate(model, windows[:, :prefix_length], length, greedy=True).cpu()  # (n, prefix + length)
    same = out[:, prefix_length:] == windows[:, prefix_length:]  # (n, length)
    leading = same.long().cumprod(dim=1).sum(dim=1)  # (n,): tokens right before the first mistake
    return Verbatim(
        exact=same.all(dim=1).float().mean().item(),
        mean_tokens=leading.float().mean().item(),
        n=n,
        leading=leading.tolist(),
    )


@torch.no_grad()
def next_word_probabilities(model: GPT, tokenizer, prompts: Sequence[str], words: Sequence[str]) -> torch.Tensor:
    """(len(prompts), len(words)) probabilities of each word (a single token, e.g. " he") as the
    next token after each prompt."""
    ids = [tokenizer.encode(w) for w in words]
    if any(len(i) != 1 for i in ids):
        raise ValueError(f"each word must be a single token; {[w for w, i in zip(words, ids) if len(i) != 1]} are not")
    device = model_device(model)
    rows = []
    with evaluating(model):
        for prompt in prompts:
            logits = model(torch.tensor([tokenizer.encode(prompt)], device=device))[0, -1].float()  # (V,)
            rows.append(torch.softmax(logits, dim=-1)[[i[0] for i in ids]].cpu())
    return torch.stack(rows)
