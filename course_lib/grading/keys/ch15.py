"""The instructors' key to notebook 15, What the model learned.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch15`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import torch

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- uniform-previous-token-score ------------------------------------------------------------------


@solution("uniform-previous-token-score")
def uniform_previous_token_score(T: int) -> float:
    return sum(1 / (t + 1) for t in range(1, T)) / (T - 1)  # weight 1/(t + 1) on t - 1, for t = 1 .. T - 1


@hidden("uniform-previous-token-score")
def _uniform_score(seed: int) -> list[Case]:
    return [Case((T,), f"T = {T}") for T in (4, 10, 33, 256, 1024)]


MISTAKES["uniform-previous-token-score"] = [
    lambda T: 1 / T,  # 1/T at every position
    lambda T: sum(1 / (t + 1) for t in range(T)) / T,  # position 0 counted, with weight 1
    lambda T: sum(1 / t for t in range(1, T)) / (T - 1),  # 1/t: t positions instead of t + 1
]


# -- duplicate-token-scores ------------------------------------------------------------------------


@solution("duplicate-token-scores")
def duplicate_token_scores(attention: list[torch.Tensor], period: int) -> torch.Tensor:
    T = attention[0].shape[-1]
    queries = torch.arange(T - period, T)  # the second copy
    return torch.stack([a[:, :, queries, queries - period].mean(dim=(0, 2)) for a in attention])  # (L, H)


def _causal_rows(g: torch.Generator, L: int, B: int, H: int, T: int) -> list[torch.Tensor]:
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return [torch.randn(B, H, T, T, generator=g).masked_fill(~mask, float("-inf")).softmax(-1) for _ in range(L)]


@hidden("duplicate-token-scores")
def _duplicate(seed: int) -> list[Case]:
    g = _seeded(seed + 25)
    return [
        Case((_causal_rows(g, 1, 2, 2, 8), 4), "a batch of two, T = 2 * period"),
        Case((_causal_rows(g, 3, 1, 4, 13), 5), "three layers, three tokens before the copies"),
        Case((_causal_rows(g, 2, 3, 1, 2), 1), "period 1: each token its own copy"),
        Case((_causal_rows(g, 1, 1, 3, 21), 10), "one token before two copies of 10"),
        Case(([a.double() for a in _causal_rows(g, 2, 2, 2, 6)], 3), "float64 weights, two layers"),
    ]


def duplicate_scores(attention, period, shift=0, all_queries=False):
    T = attention[0].shape[-1]
    queries = torch.arange(period if all_queries else T - period, T)
    return torch.stack([a[:, :, queries, queries - period + shift].mean(dim=(0, 2)) for a in attention])


MISTAKES["duplicate-token-scores"] = [
    lambda a, p: duplicate_scores(a, p, shift=1),  # the induction score
    lambda a, p: duplicate_scores(a, p, all_queries=True),  # queries from position `period` on
    lambda a, p: duplicate_scores(a, p).mean(dim=1, keepdim=True).expand(len(a), a[0].shape[1]),  # heads averaged
    lambda *args: duplicate_token_scores(*args).float(),  # float32 whatever the dtype of the attention
]


# -- mean-ablate -----------------------------------------------------------------------------------


@solution("mean-ablate")
def mean_ablate(z: torch.Tensor, head: int) -> torch.Tensor:
    out = z.clone()
    out[:, :, head] = z[:, :, head].mean(dim=(0, 1))  # (D,): over the batch and the positions
    return out


@hidden("mean-ablate")
def _mean_ablate(seed: int) -> list[Case]:
    g = _seeded(seed + 26)
    return [
        Case((torch.randn(2, 3, 4, 5, generator=g), 0), "head 0"),
        Case((torch.randn(2, 3, 4, 5, generator=g), 3), "the last head"),
        Case((torch.randn(5, 1, 3, 2, generator=g), 1), "one position, five sequences"),
        Case((torch.randn(1, 1, 1, 6, generator=g), 0), "one head, one position: z itself"),
        Case((torch.randn(2, 4, 2, 3, generator=g).double(), 1), "float64"),
    ]


def ablated(z, head, mean):
    out = z.clone()
    out[:, :, head] = mean
    return out


def mean_ablate_in_place(z, head):  # the right values, but z itself changed
    z[:, :, head] = z[:, :, head].mean(dim=(0, 1))
    return z


MISTAKES["mean-ablate"] = [
    lambda z, h: ablated(z, h, z[:, :, h].mean()),  # the bug: one number for all of D
    lambda z, h: ablated(z, h, z[:, :, h].mean(dim=0)),  # the mean over the batch only
    lambda z, h: z - z.mean(dim=(0, 1)) + z.mean(dim=(0, 1)) * 0,  # every head centred
    lambda z, h: ablated(z, h, 0.0),  # zero ablation
    mean_ablate_in_place,
    lambda *args: mean_ablate(*args).float(),  # float32 whatever the dtype of z
]


# -- settled-fraction ------------------------------------------------------------------------------


@solution("settled-fraction")
def settled_fraction(lens: torch.Tensor, answers: torch.Tensor, k: int) -> torch.Tensor:
    index = answers[:, None, None].expand(-1, lens.shape[1], 1)  # (P, L + 1, 1)
    ranks = (lens > lens.gather(2, index)).sum(dim=2)  # (P, L + 1): logits strictly above the answer's
    stays = (ranks < k).flip(1).cumprod(dim=1).flip(1)  # (P, L + 1): within the top k here and after
    return stays.float().mean(dim=0)  # (L + 1,)


@hidden("settled-fraction")
def _settled(seed: int) -> list[Case]:
    g = _seeded(seed + 27)
    return [
        Case((torch.randn(6, 13, 50, generator=g), torch.randint(50, (6,), generator=g), 5), "6 prompts, top 5"),
        Case((torch.arange(12.0).view(1, 3, 4), torch.tensor([3]), 1), "always the largest: every layer"),
        Case((torch.arange(12.0).view(1, 3, 4).flip(-1), torch.tensor([3]), 1), "always the smallest: none"),
        Case((torch.randn(2, 31, 200, generator=g), torch.tensor([0, 5]), 200), "top 200 of 200: all"),
        Case((torch.zeros(3, 4, 3), torch.tensor([2, 0, 1]), 1), "every logit tied: all"),
    ]


def settled(lens, answers, k, every_layer=False, ties_against=False):
    own = lens.gather(2, answers[:, None, None].expand(-1, lens.shape[1], 1))  # (P, L + 1, 1)
    ranks = (lens >= own).sum(2) - 1 if ties_against else (lens > own).sum(2)
    inside = ranks < k  # (P, L + 1)
    stays = inside if every_layer else inside.flip(1).cumprod(1).flip(1).bool()
    return stays.float().mean(0)


MISTAKES["settled-fraction"] = [
    lambda lens, a, k: settled(lens, a, k, every_layer=True),  # in the top k there, even if it drops out later
    lambda lens, a, k: settled(lens, a, k, ties_against=True),  # a tie counted against the answer
    lambda lens, a, k: settled(lens, a, k) * len(a),  # a count of prompts, not a fraction
    lambda lens, a, k: settled(lens, a, k).double(),  # float64: the statement says float32
]
