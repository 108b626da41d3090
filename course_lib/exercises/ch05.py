"""The exercises of notebook 05, Causal masking and multi-head attention.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch05`.
"""

from __future__ import annotations

import torch

from .core import Case, exercise


def _allowed(rows: list[str]) -> torch.Tensor:
    """A boolean mask written out row by row: '1' may attend, '.' may not."""
    return torch.tensor([[c == "1" for c in row] for row in rows])


@exercise(
    "local-causal-mask",
    hint=[
        "draw the mask for T = 5, window = 2 on paper: which keys may query 3 see?",
        "query i may attend key j when j <= i (causal) AND i - j < window (at most window tokens, itself included)",
        "a column of query positions against a row of key positions broadcasts to (T, T); usual mistakes: "
        "one key too many, the window on both sides, the upper triangle",
    ],
)
def _local_mask_cases() -> list[Case]:
    return [
        Case((4, 1), "window 1: only itself", _allowed(["1...", ".1..", "..1.", "...1"])),
        Case((5, 2), "window 2: itself and the one before", _allowed(["1....", "11...", ".11..", "..11.", "...11"])),
        Case((3, 5), "a window longer than T: the causal mask", _allowed(["1..", "11.", "111"])),
    ]


@exercise(
    "left-padded-mask",
    hint=[
        "in a left-padded row, where are the real tokens: at the start or at the end?",
        "row b's real tokens are its LAST lengths[b] positions: j >= T - lengths[b]; a key must be real AND not in "
        "the future",
        "a padding query would then see nothing at all (a row of -inf: NaN after softmax): let it attend to itself",
    ],
)
def _left_padded_cases() -> list[Case]:
    return [
        Case((torch.tensor([3]), 3), "no padding: the causal mask", _allowed(["1..", "11.", "111"]).unsqueeze(0)),
        Case((torch.tensor([2]), 4), "two pads, then two tokens",
             _allowed(["1...", ".1..", "..1.", "..11"]).unsqueeze(0)),
        Case((torch.tensor([1, 3]), 3), "a batch of two",
             torch.stack([_allowed(["1..", ".1.", "..1"]), _allowed(["1..", "11.", "111"])])),
    ]  # fmt: skip


@exercise(
    "mha-parameters",
    hint=[
        "count one head's query, key and value weights and biases, then all heads, then the output projection",
        "each head maps C to D = C / n_heads, with a weight and a bias for each of query, key and value; "
        "multiply by the number of heads and simplify",
        "the output projection is C x C plus a bias of C",
    ],
    bans=(
        "course_lib.attention.MultiHeadAttentionWrapper",
        "course_lib.attention.MultiHeadAttention",
        "course_lib.attention.AttentionHead",
        "torch.nn.MultiheadAttention",
    ),
)
def _mha_parameter_cases() -> list[Case]:
    return [
        Case((12, 3), "the wrapper above: C = 12, 3 heads", 624),
        Case((12, 1), "one head", 624),
        Case((768, 12), "GPT-2 small's attention", 2362368),
    ]


@exercise(
    "previous-token-score",
    hint=[
        "where in a (T, T) map is the weight of query i on the token just before it?",
        "those weights w[i, i - 1] lie on the diagonal just below the main one (torch.diagonal has an offset); "
        "there are T - 1 of them",
        "average them over the last dimension; the leading dimensions (heads, batch) stay",
    ],
)
def _previous_token_cases() -> list[Case]:
    uniform = torch.tril(torch.ones(3, 3)) / torch.arange(1, 4)[:, None]  # (3, 3): rows 1, 1/2 1/2, 1/3 ...
    previous = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # always the token before
    return [
        Case((previous,), "a previous-token head", torch.tensor(1.0)),
        Case((uniform,), "uniform over the past: (1/2 + 1/3) / 2", torch.tensor(5 / 12)),
        Case((torch.stack([previous, uniform, torch.eye(3)]),), "three heads", torch.tensor([1.0, 5 / 12, 0.0])),
    ]
