"""The instructors' key to notebook 00, Language models and PyTorch.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch00`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import torch

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- trigram-counts --------------------------------------------------------------------------------


@solution("trigram-counts")
def trigram_counts(ids: list[int], vocab_size: int) -> torch.Tensor:
    counts = torch.zeros(vocab_size, vocab_size, vocab_size, dtype=torch.long)  # (V, V, V)
    for a, b, c in zip(ids, ids[1:], ids[2:]):
        counts[a, b, c] += 1
    return counts


@hidden("trigram-counts")
def _trigram(seed: int) -> list[Case]:
    g = _seeded(seed + 0)
    return [
        Case(([], 3), "no tokens: all zeros"),
        Case(([2, 1], 4), "two tokens: no trigram"),
        Case(([4, 4, 4], 5), "only the largest id"),
        Case(([0, 1, 2, 3, 4, 5], 8), "a chain, ids 6 and 7 unseen"),
        Case(([1, 0, 2] * 20, 3), "a cycle of three"),
        Case((torch.randint(3, 12, (400,), generator=g).tolist(), 14), "400 random tokens, ids 3..11 of 14"),
    ]


MISTAKES["trigram-counts"] = [
    lambda ids, v: trigram_counts(ids, v).permute(2, 1, 0),  # indexed (c, b, a)
    lambda ids, v: trigram_counts(ids, max(ids, default=0) + 1),  # vocabulary from the data
    lambda ids, v: trigram_counts(ids[:-1], v),  # drops the last trigram
    lambda ids, v: trigram_counts(ids[::2] + ids[1::2], v),  # tokens out of order
    lambda ids, v: trigram_counts(ids, v).float(),  # the right counts as floats: the statement says int64
]


# -- interpolated-bigram ---------------------------------------------------------------------------


@solution("interpolated-bigram")
def interpolated_bigram(counts: torch.Tensor, lam: float) -> torch.Tensor:
    counts = counts.double()
    rows = counts.sum(dim=1, keepdim=True)  # (V, 1): how often each token came first
    unigram = counts.sum(dim=0) / counts.sum()  # (V,): how often each token came second
    bigram = torch.where(rows > 0, counts / rows.clamp_min(1), unigram)  # (V, V): unseen rows, the unigram
    return (lam * bigram + (1 - lam) * unigram).float()  # (V, V)


@hidden("interpolated-bigram")
def _interpolated(seed: int) -> list[Case]:
    g = _seeded(seed + 20)
    sparse = torch.randint(0, 5, (6, 6), generator=g) * (torch.rand(6, 6, generator=g) < 0.3)
    sparse[2] = 0  # a token that never came first
    return [
        Case((torch.tensor([[3]]), 0.7), "one token"),
        Case((torch.tensor([[0, 5], [0, 0]]), 0.9), "one pair seen; the second row never came first"),
        Case((torch.randint(0, 50, (5, 5), generator=g), 0.3), "dense counts, lam 0.3"),
        Case((sparse, 0.95), "sparse counts with an empty row, lam 0.95"),
        Case((torch.randint(0, 1000, (40, 40), generator=g), 0.99), "40 tokens, large counts"),
    ]


def interpolated(counts, lam, unigram_of="next"):
    counts = counts.double()
    rows = counts.sum(1, keepdim=True)
    unigram = (counts.sum(0) if unigram_of == "next" else counts.sum(1)) / counts.sum()
    bigram = torch.where(rows > 0, counts / rows.clamp_min(1), unigram)
    return (lam * bigram + (1 - lam) * unigram).float()


MISTAKES["interpolated-bigram"] = [
    lambda c, lam: interpolated(c, lam, unigram_of="previous"),  # P(b) from the row sums
    lambda c, lam: interpolated(c, 1 - lam),  # lam weighs the unigram
    lambda c, lam: (lam * c / c.sum(1, keepdim=True) + (1 - lam) * c.sum(0) / c.sum()).float(),  # 0/0 rows
    lambda c, lam: (lam * c / c.sum(1, keepdim=True).clamp_min(1) + (1 - lam) * c.sum(0) / c.sum()).float(),
]  # the last: an unseen row keeps only (1 - lam) of the unigram and does not sum to 1


# -- accumulated-grad ------------------------------------------------------------------------------


@solution("accumulated-grad")
def accumulated_grad(x: float, times: int) -> float:
    return times * (3 * x**2 - 2)  # backward() adds to .grad: without zero_grad() the gradients pile up


@hidden("accumulated-grad")
def _accumulated(seed: int) -> list[Case]:
    return [
        Case((1.0, 1), "x = 1: the slope is 1"),
        Case((-4.0, 1), "x = -4, once"),
        Case((1.0, 10), "ten calls"),
        Case((3.25, 7), "x = 3.25, seven times"),
        Case((-2.0, 9), "x = -2, nine times"),
    ]


MISTAKES["accumulated-grad"] = [
    lambda x, times: 3 * x**2 - 2,  # as if backward() replaced the gradient
    lambda x, times: times * (x**3 - 2 * x),  # the value, not the derivative
    lambda x, times: (3 * x**2 - 2) ** times,  # multiplies instead of adding
]


# -- logsumexp -------------------------------------------------------------------------------------


@solution("logsumexp")
def logsumexp(x: torch.Tensor) -> torch.Tensor:
    m = x.max(dim=-1, keepdim=True).values  # (..., 1): each row's own maximum, not the whole tensor's
    m = torch.where(m == float("-inf"), 0.0, m)  # a row of -inf only: exp gives 0s, log 0 = -inf, not nan
    return (m + (x - m).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)


@hidden("logsumexp")
def _logsumexp(seed: int) -> list[Case]:
    g = _seeded(seed + 1)
    return [
        Case((torch.tensor([5.0]),), "one element: itself"),
        Case((torch.tensor([1e4, 0.0, -1e4]),), "huge values of both signs"),
        Case((torch.tensor([float("-inf"), 0.0, -3.0]),), "a -inf entry counts as zero probability"),
        Case((torch.randn(3, 4, 5, generator=g) * 3000,), "(3, 4, 5): logsumexp over the last dim only"),
        Case((torch.randn(6, 7, generator=g).T * 40,), "a non-contiguous (7, 6) tensor"),
        Case((torch.randn(4, 3, 5, generator=g).transpose(0, 1) * 40,), "a non-contiguous (3, 4, 5) tensor"),
        Case((torch.zeros(1000),), "1,000 zeros: log 1000"),
        Case((torch.tensor([[-5e4, -5e4 - 1.0], [2e4, 2e4]], dtype=torch.float64),), "float64, far from 0"),
        Case((torch.full((2, 3, 4), float("-inf")),), "every row -inf only: -inf"),
    ]


def global_max_logsumexp(x):  # the function the exercise shows: one maximum for the whole tensor
    m = x.max()
    return m + (x - m).exp().sum(dim=-1).log()


def unguarded_logsumexp(x):  # each row's own maximum, but -inf - (-inf) = nan on a row of -inf only
    m = x.max(dim=-1, keepdim=True).values
    return (m + (x - m).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)


MISTAKES["logsumexp"] = [
    global_max_logsumexp,
    unguarded_logsumexp,
    lambda x: x.exp().sum(dim=-1).log(),  # overflows to inf
    lambda x: x.max(dim=-1).values,  # the max alone
    lambda x: torch.logsumexp(x, dim=-1),  # banned
    torch.logsumexp,  # banned, passed itself
    lambda *args: logsumexp(*args).float(),  # float32 whatever the dtype of x
    lambda x: logsumexp(x.view(-1, x.shape[-1])).view(x.shape[:-1]),  # view: fails on a non-contiguous batch
]
