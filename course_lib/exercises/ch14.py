"""The exercises of notebook 14, Fast inference on a laptop.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch14`.
"""

from __future__ import annotations

import torch

from ..quantization import unpack_int4
from .core import Case, _seeded, exercise


def _zero_point_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The expected answers of "int8-zero-point", step by step as the statement says."""
    low = weight.float().amin(dim=1).clamp(max=0)  # (N,): the range always holds 0
    high = weight.float().amax(dim=1).clamp(min=0)  # (N,)
    scale = torch.where(high > low, (high - low) / 255, torch.ones_like(low))  # (N,)
    zero_point = torch.round(-low / scale).long()  # (N,)
    q = (torch.round(weight.float() / scale[:, None]) + zero_point[:, None]).clamp(0, 255).to(torch.uint8)
    return q, scale, zero_point


@exercise(
    "int8-zero-point",
    hint=[
        "one row at a time: which range must the 256 levels cover, and where does 0.0 land on them?",
        "the range is [min(row min, 0), max(row max, 0)], so scale = (high - low) / 255, and 0.0 sits at the "
        "level zero_point = round(-low / scale); a row of zeros gets scale 1",
        "q = round(w / scale) + zero_point, clamped to 0..255, as torch.uint8; usual mistakes: the range "
        "without 0 (a row of positive weights), 127 or 256 levels, q = round((w - low) / scale)",
    ],
    bans=("torch.quantize_per_channel", "torch.quantize_per_tensor"),
)
def _zero_point_cases() -> list[Case]:
    g = _seeded(141)
    inputs = [
        ((torch.tensor([[-1.0, 0.0, 2.0]]),), "one row from -1 to 2: 0.0 is level 85"),
        ((torch.tensor([[0.2, 1.0, 0.6], [-0.4, -0.2, -1.0]]),), "a row of positive weights, a row of negatives"),
        ((torch.randn(4, 8, generator=g) * 0.02 + 0.01,), "weights of a trained model's size, off centre"),
        ((torch.tensor([[0.0, 0.0], [3.0, -1.0]]),), "a row of zeros: scale 1, all at the zero point"),
        ((torch.tensor([[0.5, -0.25, 1.0]], dtype=torch.float64),), "float64 weights: still float32 scales"),
    ]
    return [Case(args, note, _zero_point_int8(*args)) for args, note in inputs]


@exercise(
    "int4-unpack",
    reference=lambda packed: unpack_int4(packed),
    hint=[
        "pack a row of four values by hand, e.g. [1, 2, 3, 4]: which bits of which byte hold each?",
        "the low four bits of byte j (packed & 15) are column 2j, the high four (packed >> 4) column 2j + 1",
        "put them back in the order even, odd, even, odd: stack the two on a new last dimension and reshape to "
        "(N, K); usual mistakes: the high bits first, the evens and the odds side by side (torch.cat)",
    ],
    bans=("course_lib.quantization.unpack_int4", "course_lib.quantization.Int4Linear"),
)
def _unpack_cases() -> list[Case]:
    g = _seeded(142)
    return [
        Case((torch.tensor([[0x21, 0xF0]], dtype=torch.uint8),), "one row: 0x21 holds 1 (low) and 2 (high)"),
        Case((torch.tensor([[0x43, 0x00], [0xFF, 0x5A]], dtype=torch.uint8),), "two rows"),
        Case((torch.randint(0, 256, (3, 8), generator=g).to(torch.uint8),), "(3, 8) bytes: 16 values a row"),
        Case((torch.randint(0, 256, (4, 3), generator=g).to(torch.uint8).T,), "a transposed (3, 4): not contiguous"),
    ]


@exercise(
    "draft-acceptance",
    hint=[
        "a guess x comes with probability q(x) and is then kept with probability min(1, p(x) / q(x)): add "
        "that up over the vocabulary",
        "q(x) * min(1, p(x) / q(x)) simplifies: it is min(q(x), p(x)), and it stays right where q(x) = 0 (such "
        "a token is never proposed), where p / q would not",
        "so the rate is the sum of min(p, q) over the last dimension, one number per row; usual mistakes: "
        "q * min(1, p / q) (0 / 0 where q = 0), a mean instead of a sum, 1 - sum |p - q| without the half",
    ],
    prediction=True,
)
def _acceptance_cases() -> list[Case]:
    p = torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])
    q = torch.tensor([[0.1, 0.1, 0.1, 0.3, 0.4], [0.2, 0.2, 0.2, 0.2, 0.2]])
    return [
        Case((torch.tensor([0.6, 0.4]), torch.tensor([0.6, 0.4])), "the draft is the target: every guess kept",
             torch.tensor(1.0)),
        Case((torch.tensor([0.6, 0.4]), torch.tensor([0.3, 0.7])), "two tokens", torch.tensor(0.7)),
        Case((torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.75, 0.0])), "a token neither proposes",
             torch.tensor(0.75)),
        Case((p, q), "a batch of two rows: the second draft is exact", torch.tensor([0.4, 1.0])),
        Case((torch.tensor([0.6, 0.4], dtype=torch.float64), torch.tensor([0.3, 0.7], dtype=torch.float64)),
             "two tokens in float64: a float64 rate", torch.tensor(0.7, dtype=torch.float64)),
    ]  # fmt: skip


@exercise(
    "residual-rows",
    hint=[
        "try the function on a batch of two rows (B, V), on a row where q equals p, and on a draft whose tokens "
        "are not the target's first ones",
        "q[..., j] is the probability of the target's token draft_ids[j]: put each where it belongs in a (..., V) "
        "tensor of zeros (indexing or index_copy on the last dimension); every other token has probability 0",
        "the sum must run over each row's vocabulary only (dim=-1, keepdim=True), and a row with nothing left "
        "over has a sum of 0: 0 / 0",
        "where a row's sum is 0, return that row of p (torch.where over the rows); usual mistakes: one sum for the "
        "whole batch, NaN for q == p, p for the whole batch when one row is left with nothing",
    ],
    bans=("course_lib.speculative.residual_distribution",),
)
def _residual_rows_cases() -> list[Case]:
    first = torch.tensor([0, 1])  # the draft knows the target's tokens 0 and 1, in that order
    return [
        Case((torch.tensor([0.4, 0.4, 0.2]), torch.tensor([0.1, 0.2, 0.7]), torch.tensor([0, 1, 2])),
             "one row, the same vocabulary: two tokens left over", torch.tensor([0.6, 0.4, 0.0])),
        Case((torch.tensor([[0.7, 0.3], [0.5, 0.5]]), torch.tensor([[0.5, 0.5], [0.9, 0.1]]), first),
             "a batch of rows", torch.tensor([[1.0, 0.0], [0.0, 1.0]]), hint=2),
        Case((torch.tensor([0.3, 0.7]), torch.tensor([0.3, 0.7]), first), "q == p: nothing left over, p itself",
             torch.tensor([0.3, 0.7]), hint=3),
        Case((torch.tensor([[0.2, 0.8], [0.5, 0.5]]), torch.tensor([[0.2, 0.8], [0.75, 0.25]]), first),
             "a batch whose first row has q == p", torch.tensor([[0.2, 0.8], [0.0, 1.0]]), hint=3),
        Case((torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]]), torch.tensor([[0.6, 0.4], [0.1, 0.9]]), first),
             "a draft of the target's first 2 tokens of 3: q is 0 for the third",
             torch.tensor([[0.0, 0.0, 1.0], [0.1 / 0.6, 0.0, 0.5 / 0.6]])),
        Case((torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.6, 0.4]), torch.tensor([2, 0])),
             "the draft's tokens are the target's 2 and 0: q = (0.4, 0, 0.6) in the target's vocabulary",
             torch.tensor([0.25, 0.75, 0.0]), hint=1),
        Case((torch.tensor([[0.1, 0.6, 0.3], [0.3, 0.3, 0.4]]), torch.tensor([[0.5, 0.5], [0.4, 0.6]]),
              torch.tensor([1, 2])), "a batch, the draft knowing the target's tokens 1 and 2",
             torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]), hint=1),
        Case((torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64), torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64),
              torch.tensor([0, 1, 2])), "one row in float64: a float64 row",
             torch.tensor([0.6, 0.4, 0.0], dtype=torch.float64)),
    ]  # fmt: skip
