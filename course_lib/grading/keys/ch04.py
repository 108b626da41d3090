"""The instructors' key to notebook 04, Self-attention.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch04`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- linear-attention ------------------------------------------------------------------------------


@solution("linear-attention")
def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1  # (..., Tq, d), (..., Tk, d): positive features
    numerator = phi_q @ (phi_k.transpose(-2, -1) @ v)  # (..., Tq, dv): (d, dv) first, linear in T
    denominator = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (..., Tq, 1): each row's total weight
    return numerator / denominator


@hidden("linear-attention")
def _linear_attention(seed: int) -> list[Case]:
    g = _seeded(seed + 8)

    def r(*shape, scale=1.0, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=dtype) * scale

    return [
        Case((r(3, 4), r(6, 4), r(6, 2)), "3 queries, 6 keys: not square"),
        Case((r(2, 3, 5, 8), r(2, 3, 5, 8), r(2, 3, 5, 8)), "(B, H, T, d) = (2, 3, 5, 8)"),
        Case((r(4, 8, scale=10), r(4, 8, scale=10), r(4, 3)), "large entries: elu's linear part"),
        Case((r(64, 16), r(64, 16), r(64, 32)), "T = 64, d = 16"),
        Case((r(1, 6), r(1, 6), r(1, 6)), "one token: the output is v"),
        Case((r(5, 16, dtype=torch.float64), r(5, 16, dtype=torch.float64), r(5, 4, dtype=torch.float64)), "float64"),
    ]


def linear_weights(q, k, phi=lambda x: F.elu(x) + 1):
    w = phi(q) @ phi(k).transpose(-2, -1)
    return w / w.sum(-1, keepdim=True)


MISTAKES["linear-attention"] = [
    lambda q, k, v: (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1) @ v,  # no denominator
    lambda q, k, v: linear_weights(q, k, phi=lambda x: x.exp()) @ v,  # exp: softmax attention again
    lambda q, k, v: linear_weights(q / q.shape[-1] ** 0.25, k / q.shape[-1] ** 0.25) @ v,  # scaled as softmax's
    lambda q, k, v: linear_weights(q, k) @ (F.elu(v) + 1),  # phi on the values
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v),  # banned
    lambda q, k, v: linear_attention(q, k, v).float(),  # float32 whatever the inputs' dtype
]


# -- score-scale -----------------------------------------------------------------------------------


@solution("score-scale")
def score_scale(d: int, var_q: float, var_k: float) -> float:
    return math.sqrt(d * var_q * var_k)  # Var(q . k) = d var_q var_k for independent mean-0 entries


@hidden("score-scale")
def _score_scale(seed: int) -> list[Case]:
    return [
        Case((1, 1.0, 1.0), "d = 1"),
        Case((512, 1.0, 1.0), "d = 512: about 22.6"),
        Case((64, 1 / 3, 1 / 3), "a third of the variance each, as nn.Linear's default init gives"),
        Case((8, 9.0, 0.5), "different variances"),
        Case((4096, 0.02, 2.0), "wide and small"),
    ]


MISTAKES["score-scale"] = [
    lambda d, vq, vk: math.sqrt(d),  # ignores the variances
    lambda d, vq, vk: d * vq * vk,  # the variance, not its square root
    lambda d, vq, vk: math.sqrt(d * (vq + vk)),  # adds the variances
]


# -- attention-pool --------------------------------------------------------------------------------


@solution("attention-pool")
def attention_pool(x: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    scores = x @ query / math.sqrt(x.shape[-1])  # (B, T)
    weights = torch.softmax(scores, dim=-1)  # (B, T): over the tokens of each text, not the batch
    return (weights.unsqueeze(-1) * x).sum(dim=1)  # (B, C)


@hidden("attention-pool")
def _attention_pool(seed: int) -> list[Case]:
    g = _seeded(seed + 9)
    return [
        Case((torch.randn(1, 1, 3, generator=g), torch.randn(3, generator=g)), "one token: itself"),
        Case((torch.randn(8, 5, 16, generator=g), torch.randn(16, generator=g)), "a batch of 8"),
        Case((torch.randn(3, 4, 2, generator=g) * 100, torch.randn(2, generator=g)), "large values: nearly one-hot"),
        Case((torch.randn(2, 7, 4, generator=g, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64)),
             "float64"),
        Case((torch.randn(5, 3, 6, generator=g), torch.zeros(6)), "a zero query: the mean of each text"),
    ]  # fmt: skip


def pool_over_batch(x, query):  # the function the exercise shows
    weights = torch.softmax(x @ query / math.sqrt(x.shape[-1]), dim=0)
    return (weights.unsqueeze(-1) * x).sum(dim=1)


MISTAKES["attention-pool"] = [
    pool_over_batch,
    lambda x, query: x.mean(dim=1),  # no attention at all
    lambda x, query: (torch.softmax(x @ query, dim=-1).unsqueeze(-1) * x).sum(dim=1),  # no sqrt(d)
    lambda *args: attention_pool(*args).float(),  # float32 whatever the dtype of x
]


# -- attention-entropy -----------------------------------------------------------------------------


@solution("attention-entropy")
def attention_entropy(weights: torch.Tensor) -> float:
    plogp = torch.where(weights > 0, weights * weights.clamp_min(1e-30).log(), 0.0)  # 0 log 0 = 0
    return -plogp.sum(dim=-1).mean().item()


@hidden("attention-entropy")
def _attention_entropy(seed: int) -> list[Case]:
    g = _seeded(seed + 23)
    causal = torch.softmax(torch.randn(6, 6, generator=g).masked_fill(torch.ones(6, 6).triu(1).bool(), -torch.inf), -1)
    return [
        Case((torch.tensor([[1.0]]),), "one key: entropy 0"),
        Case((causal,), "a causal map: zeros above the diagonal"),
        Case((torch.softmax(torch.randn(2, 4, 8, 8, generator=g), -1),), "(B, H, T, T)"),
        Case((torch.full((3, 1000), 1e-3),), "uniform over 1,000: log 1000"),
        Case((torch.softmax(torch.randn(5, 5, generator=g, dtype=torch.float64) * 50, -1),), "nearly one-hot, float64"),
    ]


MISTAKES["attention-entropy"] = [
    lambda w: -(w * w.log()).sum(-1).mean().item(),  # nan where a weight is 0
    lambda w: -(w * (w + 1e-3).log()).sum(-1).mean().item(),  # an epsilon that moves every answer
    lambda w: -(w * w.clamp_min(1e-30).log()).sum(-1).mean().item() / math.log(w.shape[-1]) if w.shape[-1] > 1 else 0.0,
    lambda w: -(w * w.clamp_min(1e-30).log()).sum().item(),  # the sum over rows, not the mean
]  # the third: normalised by log T
