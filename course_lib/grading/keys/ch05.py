"""The instructors' key to notebook 05, Causal masking and multi-head attention.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch05`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import torch

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- local-causal-mask -----------------------------------------------------------------------------


@solution("local-causal-mask")
def local_causal_mask(T: int, window: int) -> torch.Tensor:
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]  # (T, 1), (1, T)
    return (j <= i) & (i - j < window)  # (T, T): the past, at most window tokens back, itself included


@hidden("local-causal-mask")
def _local_mask(seed: int) -> list[Case]:
    return [
        Case((1, 1), "one token"),
        Case((8, 3), "T = 8, window 3"),
        Case((6, 6), "the window equals T"),
        Case((10, 4), "T = 10, window 4"),
        Case((32, 1), "window 1, T = 32"),
    ]


MISTAKES["local-causal-mask"] = [
    lambda T, w: local_causal_mask(T, w + 1),  # i - j <= window
    lambda T, w: (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs() < w,  # both sides
    lambda T, w: local_causal_mask(T, w).T,  # the upper triangle
]


# -- left-padded-mask ------------------------------------------------------------------------------


@solution("left-padded-mask")
def left_padded_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))  # (T, T)
    real = torch.arange(T) >= (T - lengths)[:, None]  # (B, T): the last lengths[b] positions
    itself = torch.eye(T, dtype=torch.bool)  # a padding query attends to itself: no empty row
    return (causal & real[:, None, :]) | itself  # (B, T, T)


@hidden("left-padded-mask")
def _left_padded(seed: int) -> list[Case]:
    return [
        Case((torch.tensor([1]), 1), "one real token"),
        Case((torch.tensor([1]), 5), "four pads and one token"),
        Case((torch.tensor([5, 1, 3, 4]), 5), "four rows of every kind"),
        Case((torch.tensor([8, 8]), 8), "no padding anywhere"),
        Case((torch.tensor([2, 7, 4]), 9), "T = 9"),
    ]


def buggy_left_padded_mask(lengths, T):  # the function the exercise shows
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    real = torch.arange(T) < lengths[:, None]
    return causal & real[:, None, :]


MISTAKES["left-padded-mask"] = [
    buggy_left_padded_mask,
    lambda lengths, T: left_padded_mask(lengths, T) & (torch.arange(T) >= (T - lengths)[:, None])[:, :, None],
    lambda lengths, T: torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(len(lengths), T, T),  # no padding
    lambda lengths, T: (
        torch.tril(torch.ones(T, T, dtype=torch.bool)) & (torch.arange(T) >= (T - lengths)[:, None])[:, None, :]
    ),  # empty rows for the padding queries
]  # the second: padding queries see nothing, not even themselves


# -- mha-parameters --------------------------------------------------------------------------------


@solution("mha-parameters")
def mha_parameters(d_model: int, n_heads: int) -> int:
    head_dim = d_model // n_heads
    heads = n_heads * 3 * (d_model * head_dim + head_dim)  # query, key, value of every head
    return heads + d_model * d_model + d_model  # the output projection; n_heads cancels out


@hidden("mha-parameters")
def _mha_parameters(seed: int) -> list[Case]:
    return [
        Case((1, 1), "C = 1"),
        Case((64, 8), "C = 64, 8 heads"),
        Case((64, 64), "as many heads as channels"),
        Case((1024, 16), "GPT-2 medium"),
        Case((384, 6), "the 10.8 M model's width"),
    ]


MISTAKES["mha-parameters"] = [
    lambda C, H: 4 * C * C,  # no biases
    lambda C, H: H * 3 * (C * C + C) + C * C + C,  # each head as wide as the model
    lambda C, H: 3 * (C * C + C),  # forgets the output projection
    lambda C, H: sum(p.numel() for p in torch.nn.MultiheadAttention(C, H).parameters()),  # banned: torch's class
]


# -- previous-token-score --------------------------------------------------------------------------


@solution("previous-token-score")
def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # (...,): mean of w[i, i - 1]


@hidden("previous-token-score")
def _previous_token(seed: int) -> list[Case]:
    g = _seeded(seed + 10)
    causal = torch.ones(7, 7).triu(1).bool()
    return [
        Case((torch.tensor([[1.0, 0.0], [0.3, 0.7]]),), "T = 2: one weight"),
        Case((torch.softmax(torch.randn(4, 7, 7, generator=g).masked_fill(causal, -torch.inf), -1),), "4 heads, T = 7"),
        Case((torch.softmax(torch.randn(2, 3, 6, 6, generator=g), -1),), "(B, H, T, T), not causal"),
        Case((torch.eye(5).roll(-1, 1).T.contiguous(),), "every query on the token before, wrapped around"),
    ]


MISTAKES["previous-token-score"] = [
    lambda w: torch.diagonal(w, offset=1, dim1=-2, dim2=-1).mean(-1),  # the next token
    lambda w: torch.diagonal(w, dim1=-2, dim2=-1).mean(-1),  # itself
    lambda w: torch.diagonal(w, offset=-1, dim1=-2, dim2=-1).sum(-1) / w.shape[-1],  # divides by T
]
