"""Count-based n-gram language models: the first language models, and the baseline.

An n-gram model is a Markov chain of order n - 1: the next token depends only on the
previous n - 1 tokens, and its probability is a ratio of counts,

    P(w | context) = (count(context, w) + alpha) / (count(context) + alpha * V),

where ``alpha`` (add-alpha, or Laplace, smoothing) keeps unseen pairs from getting
probability zero. Counts are stored sparsely (sorted n-gram keys), so a trigram model over
GPT-2's 50,257 tokens is as cheap as one over 100 characters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


class NGramLanguageModel:
    """P(next token | previous ``order - 1`` tokens), estimated by counting."""

    def __init__(self, order: int, vocab_size: int, alpha: float = 1.0):
        if order < 1:
            raise ValueError(f"order must be at least 1 (1 = unigram, 2 = bigram), got {order}")
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if vocab_size**order >= 2**62:
            raise ValueError(f"vocab_size**order = {vocab_size}**{order} is too large to index n-grams")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.order, self.vocab_size, self.alpha = order, vocab_size, float(alpha)
        self._powers = vocab_size ** torch.arange(order - 1, -1, -1, dtype=torch.long)  # (n,)
        self.ngram_keys = self.ngram_counts = None
        self.context_keys = self.context_counts = None

    def _as_ids(self, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if len(ids) and (ids.min() < 0 or ids.max() >= self.vocab_size):
            bad = ids[(ids < 0) | (ids >= self.vocab_size)][0].item()
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{self.vocab_size - 1})")
        return ids

    def _keys(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One integer per n-gram and per context: the tokens read as base-V digits."""
        windows = ids.unfold(0, self.order, 1)  # (N - n + 1, n)
        keys = (windows * self._powers).sum(dim=1)  # (N - n + 1,)
        return keys, keys // self.vocab_size  # context = all digits but the last

    def fit(self, ids: Sequence[int] | torch.Tensor) -> NGramLanguageModel:
        ids = self._as_ids(ids)
        if len(ids) < self.order:
            raise ValueError(f"need at least {self.order} tokens to count {self.order}-grams, got {len(ids)}")
        keys, contexts = self._keys(ids)
        self.ngram_keys, self.ngram_counts = torch.unique(keys, return_counts=True)
        self.context_keys, self.context_counts = torch.unique(contexts, return_counts=True)
        return self

    @staticmethod
    def _lookup(table_keys: torch.Tensor, table_counts: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        idx = torch.searchsorted(table_keys, keys).clamp(max=len(table_keys) - 1)
        return torch.where(table_keys[idx] == keys, table_counts[idx], 0).double()

    def _probabilities(self, ngram_keys: torch.Tensor) -> torch.Tensor:
        if self.ngram_keys is None:
            raise RuntimeError("the model has not been fitted yet: call fit(ids) first")
        joint = self._lookup(self.ngram_keys, self.ngram_counts, ngram_keys)
        context = self._lookup(self.context_keys, self.context_counts, ngram_keys // self.vocab_size)
        denominator = context + self.alpha * self.vocab_size
        # An unseen context with alpha = 0 has no counts at all: fall back to uniform.
        return torch.where(denominator > 0, (joint + self.alpha) / denominator.clamp(min=1e-300), 1 / self.vocab_size)

    def next_token_probs(self, context: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Distribution over the next token, shape ``(V,)``; only the last n-1 tokens matter."""
        context = self._as_ids(context)
        if len(context) < self.order - 1:
            raise ValueError(f"a {self.order}-gram model needs {self.order - 1} context tokens, got {len(context)}")
        tail = context[len(context) - (self.order - 1) :] if self.order > 1 else context[:0]
        context_key = (tail * self._powers[1:]).sum() if self.order > 1 else torch.tensor(0)
        keys = context_key * self.vocab_size + torch.arange(self.vocab_size)  # (V,)
        return self._probabilities(keys).float()

    def cross_entropy(self, ids: Sequence[int] | torch.Tensor) -> float:
        """Mean negative log-likelihood (nats per token) of each token after the first n-1."""
        ids = self._as_ids(ids)
        if len(ids) < self.order:
            raise ValueError(f"need at least {self.order} tokens to evaluate, got {len(ids)}")
        keys, _ = self._keys(ids)
        return -self._probabilities(keys).log().mean().item()

    def perplexity(self, ids: Sequence[int] | torch.Tensor) -> float:
        """exp(cross-entropy): the model is as unsure as a fair die with this many faces."""
        return math.exp(self.cross_entropy(ids))

    def sample(self, context: Sequence[int], num_tokens: int, generator: torch.Generator | None = None) -> list[int]:
        """Extend ``context`` by ``num_tokens`` tokens drawn one at a time from the model."""
        out = [int(i) for i in context]
        for _ in range(num_tokens):
            probs = self.next_token_probs(out)  # (V,)
            out.append(int(torch.multinomial(probs, 1, generator=generator)))
        return out
