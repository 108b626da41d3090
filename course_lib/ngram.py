"""Count-based n-gram language models: the first language models, and the baseline.

An n-gram model is a Markov chain of order n - 1: the next token depends only on the
previous n - 1 tokens, and its probability is a ratio of counts,

    P(w | context) = (count(context, w) + alpha) / (count(context) + alpha * V),

where ``alpha`` (add-alpha, or Laplace, smoothing) keeps unseen pairs from getting
probability zero. With ``backoff=True`` a context never seen in training falls back to the
longest shorter context that was seen, instead of to a uniform guess. Counts are stored
sparsely (sorted n-gram keys), so a trigram model over GPT-2's 50,257 tokens is as cheap as one over 100 characters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


class NGramLanguageModel:
    """P(next token | previous ``order - 1`` tokens), estimated by counting."""

    def __init__(self, order: int, vocab_size: int, alpha: float = 1.0, backoff: bool = False):
        if order < 1:
            raise ValueError(f"order must be at least 1 (1 = unigram, 2 = bigram), got {order}")
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if vocab_size**order >= 2**62:
            raise ValueError(f"vocab_size**order = {vocab_size}**{order} is too large to index n-grams")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.order, self.vocab_size, self.alpha, self.backoff = order, vocab_size, float(alpha), backoff
        self._powers = vocab_size ** torch.arange(order - 1, -1, -1, dtype=torch.long)  # (n,)
        # order k -> (sorted k-gram keys, their counts, sorted context keys, their counts)
        self._tables: dict[int, tuple[torch.Tensor, ...]] = {}

    @property
    def context_keys(self) -> torch.Tensor:
        """The distinct contexts (of order - 1 tokens) seen in training, as integer keys."""
        self._check_fitted()
        return self._tables[self.order][2]

    def _check_fitted(self) -> None:
        if not self._tables:
            raise RuntimeError("the model has not been fitted yet: call fit(ids) first")

    def _as_ids(self, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if len(ids) and (ids.min() < 0 or ids.max() >= self.vocab_size):
            bad = ids[(ids < 0) | (ids >= self.vocab_size)][0].item()
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{self.vocab_size - 1})")
        return ids

    def _keys(self, ids: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """One integer per k-gram (default k = order): its tokens read as base-V digits.

        The context of a key is ``key // V`` (all digits but the last), and the last j
        tokens of a key are ``key % V**j``.
        """
        k = self.order if k is None else k
        windows = ids.unfold(0, k, 1)  # (N - k + 1, k)
        return (windows * self._powers[self.order - k :]).sum(dim=1)  # (N - k + 1,)

    def fit(self, ids: Sequence[int] | torch.Tensor) -> NGramLanguageModel:
        ids = self._as_ids(ids)
        if len(ids) < self.order:
            raise ValueError(f"need at least {self.order} tokens to count {self.order}-grams, got {len(ids)}")
        for k in range(1, self.order + 1) if self.backoff else [self.order]:
            k_keys = self._keys(ids, k)
            self._tables[k] = (
                *torch.unique(k_keys, return_counts=True),
                *torch.unique(k_keys // self.vocab_size, return_counts=True),
            )
        return self

    @staticmethod
    def _lookup(table_keys: torch.Tensor, table_counts: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        idx = torch.searchsorted(table_keys, keys).clamp(max=len(table_keys) - 1)
        return torch.where(table_keys[idx] == keys, table_counts[idx], 0).double()

    def _probabilities_at(self, k: int, ngram_keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """P(last token | its k - 1 predecessors), and whether that context was ever seen."""
        gram_keys, gram_counts, context_keys, context_counts = self._tables[k]
        keys = ngram_keys % self.vocab_size**k
        joint = self._lookup(gram_keys, gram_counts, keys)
        context = self._lookup(context_keys, context_counts, keys // self.vocab_size)
        denominator = context + self.alpha * self.vocab_size
        # An unseen context with alpha = 0 has no counts at all: fall back to uniform.
        probs = torch.where(denominator > 0, (joint + self.alpha) / denominator.clamp(min=1e-300), 1 / self.vocab_size)
        return probs, context > 0

    def _probabilities(self, ngram_keys: torch.Tensor, max_order: int | None = None) -> torch.Tensor:
        self._check_fitted()
        if not self.backoff:
            return self._probabilities_at(self.order, ngram_keys)[0]
        probs, _ = self._probabilities_at(1, ngram_keys)
        for k in range(2, (max_order or self.order) + 1):  # a longer seen context overrides a shorter one
            probs_k, seen = self._probabilities_at(k, ngram_keys)
            probs = torch.where(seen, probs_k, probs)
        return probs

    def next_token_probs(self, context: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Distribution over the next token, shape ``(V,)``; only the last n-1 tokens matter.

        With backoff a shorter context is fine (the model uses what it has).
        """
        context = self._as_ids(context)
        n_ctx = min(len(context), self.order - 1)
        if n_ctx < self.order - 1 and not self.backoff:
            raise ValueError(f"a {self.order}-gram model needs {self.order - 1} context tokens, got {len(context)}")
        tail = context[len(context) - n_ctx :]  # (n_ctx,)
        context_key = (tail * self._powers[self.order - n_ctx :]).sum()
        keys = context_key * self.vocab_size + torch.arange(self.vocab_size)  # (V,)
        return self._probabilities(keys, max_order=n_ctx + 1).float()

    def token_losses(self, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """(len(ids) - n + 1,) the negative log-likelihood (nats) of each token after the first n-1:
        one number per position, to compare with another model on the same positions."""
        ids = self._as_ids(ids)
        if len(ids) < self.order:
            raise ValueError(f"need at least {self.order} tokens to evaluate, got {len(ids)}")
        return -self._probabilities(self._keys(ids)).log()

    def cross_entropy(self, ids: Sequence[int] | torch.Tensor) -> float:
        """Mean negative log-likelihood (nats per token) of each token after the first n-1."""
        return self.token_losses(ids).mean().item()

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
