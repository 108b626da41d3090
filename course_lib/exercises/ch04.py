"""The exercises of notebook 04, Self-attention.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch04`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .core import Case, _seeded, exercise


def _feature_map(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1  # positive everywhere: a similarity without exp


@exercise(
    "linear-attention",
    hint=[
        "write the weights first, as softmax's would be: phi(q) phi(k)^T, each row divided by its own sum",
        "phi goes on q and on k, not on v; the denominator of row i is the sum over j of phi(q_i) . phi(k_j), "
        "the same sum as the numerator's without v",
        "no sqrt(d) and no softmax here; usual mistakes: no denominator, phi on v, k.T on a batch",
    ],
    bans=("torch.nn.functional.scaled_dot_product_attention", "torch.softmax", "torch.Tensor.softmax"),
)
def _linear_attention_cases() -> list[Case]:
    g = _seeded(3)

    def answer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        w = _feature_map(q) @ _feature_map(k).transpose(-2, -1)  # (..., Tq, Tk)
        return (w / w.sum(dim=-1, keepdim=True)) @ v  # (..., Tq, dv)

    inputs = [
        (
            (torch.zeros(2, 2), torch.zeros(2, 2), torch.tensor([[1.0, 2.0], [3.0, 4.0]])),
            "equal similarities: the mean of v",
        ),
        (
            tuple(torch.randn(n, d, generator=g, dtype=torch.float64) for n, d in ((3, 4), (5, 4), (5, 2))),
            "3 queries, 5 keys: not square; float64 inputs, a float64 output",
        ),
        (
            (torch.randn(2, 5, 16, generator=g), torch.randn(2, 5, 16, generator=g), torch.randn(2, 5, 8, generator=g)),
            "a batch, d = 16",
        ),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]  # fmt: skip


@exercise(
    "score-scale",
    hint=[
        "start from one product q_i k_i of independent, mean-0 entries: what is its variance?",
        "with mean-0 independent factors, Var(q_i k_i) = E[q_i^2] E[k_i^2]; and the d products are independent",
        "the variance of q . k is the sum of d of them; divide by its square root to bring it back to 1",
    ],
    prediction=True,
)
def _score_scale_cases() -> list[Case]:
    return [
        Case((64, 1.0, 1.0), "unit variances, d = 64", 8.0),
        Case((16, 4.0, 1.0), "queries of variance 4", 8.0),
        Case((100, 0.25, 0.25), "both of variance 1/4", 2.5),
    ]


@exercise(
    "attention-pool",
    hint=[
        "run the buggy function on one text, then on two, and sum its weights: over what do they sum to 1?",
        "the scores are (B, T): the softmax must run over the tokens of each text (dim=1 or -1), not over "
        "the batch (dim=0), which mixes different texts",
        "weights (B, T) -> (B, T, 1) to multiply x (B, T, C), then sum over T",
    ],
)
def _attention_pool_cases() -> list[Case]:
    g = _seeded(4)

    def answer(x: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(x @ query / math.sqrt(x.shape[-1]), dim=-1)  # (B, T)
        return torch.einsum("bt,btc->bc", weights, x)  # (B, C)

    inputs = [
        ((torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]), torch.zeros(2)), "one text, a query of zeros: the mean"),
        ((torch.randn(2, 3, 4, generator=g), torch.randn(4, generator=g)), "two texts of 3 tokens"),
        ((torch.randn(4, 6, 8, generator=g), torch.randn(8, generator=g) * 3), "four texts, a sharp query"),
        (
            (torch.randn(2, 3, 4, generator=g, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64)),
            "float64 texts: a float64 pooling",
        ),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


@exercise(
    "attention-entropy",
    hint=[
        "the entropy of one row is -sum p log p; what should a weight of exactly 0 contribute?",
        "0 * log 0 is nan in floating point but 0 in the limit: leave the zero weights out of the sum",
        "sum over the last dimension (the keys), then the mean over every other dimension",
    ],
)
def _entropy_cases() -> list[Case]:
    return [
        Case((torch.tensor([[0.25, 0.25, 0.25, 0.25]]),), "uniform over 4: log 4", math.log(4)),
        Case((torch.tensor([[1.0, 0.0], [0.5, 0.5]]),), "one-hot (0) and uniform (log 2): their mean", math.log(2) / 2),
        Case((torch.tensor([[[0.9, 0.1], [0.1, 0.9]], [[1.0, 0.0], [1.0, 0.0]]]),), "a batch of two (2, 2) maps",
             -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)) / 2),
    ]  # fmt: skip
