"""The instructors' key to notebook 14, Fast inference on a laptop.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch14`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- int8-zero-point -------------------------------------------------------------------------------


@solution("int8-zero-point")
def int8_zero_point(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    w = weight.float()
    low, high = w.amin(dim=1).clamp(max=0), w.amax(dim=1).clamp(min=0)  # (N,) each: 0 in the range
    scale = torch.where(high > low, (high - low) / 255, torch.ones_like(low))  # (N,)
    zero_point = torch.round(-low / scale).long()  # (N,): the level that stands for 0.0
    q = torch.round(w / scale[:, None]) + zero_point[:, None]  # (N, K)
    return q.clamp(0, 255).to(torch.uint8), scale, zero_point


@hidden("int8-zero-point")
def _zero_point(seed: int) -> list[Case]:
    g = _seeded(seed + 24)
    return [
        Case((torch.randn(64, 96, generator=g) * 0.05,), "a (64, 96) matrix"),
        Case((torch.relu(torch.randn(6, 10, generator=g)) + 0.1,), "every weight positive: the zero point is 0"),
        Case((-torch.rand(3, 5, generator=g) - 0.5,), "every weight negative: the zero point is 255"),
        Case((torch.randn(8, 6, generator=g).T.contiguous()[:, :5] * 3,), "a slice of a transposed matrix"),
        Case((torch.zeros(3, 4),), "all zeros"),
        Case((torch.randn(5, 7, generator=g, dtype=torch.float64),), "float64 weights: float32 scales"),
        Case((torch.tensor([[0.0, 0.0, 2.0], [1e-6, -3e-6, 2e-6], [1e5, -2.5e4, 0.0]]),), "one weight; tiny; huge"),
    ]


def zero_point_variant(weight, levels=255, with_zero=True, absmax=False, work=torch.float32):
    w = weight.to(work)
    low, high = w.amin(dim=1), w.amax(dim=1)
    if with_zero:
        low, high = low.clamp(max=0), high.clamp(min=0)
    if absmax:  # symmetric: the chapter's absmax scale, shifted by 128
        scale = torch.where(w.abs().amax(1) > 0, w.abs().amax(1) / 127, torch.ones_like(low))
        zero_point = torch.full_like(low, 128).long()
    else:
        scale = torch.where(high > low, (high - low) / levels, torch.ones_like(low))
        zero_point = torch.round(-low / scale).long()
    q = (torch.round(w / scale[:, None]) + zero_point[:, None]).clamp(0, 255).to(torch.uint8)
    return q, scale, zero_point


MISTAKES["int8-zero-point"] = [
    lambda w: zero_point_variant(w, with_zero=False),  # the row's range without 0
    lambda w: zero_point_variant(w, levels=256),  # 256 steps: the top weight falls off the grid
    lambda w: zero_point_variant(w, absmax=True),  # symmetric absmax, shifted by 128
    lambda w: zero_point_variant(w, work=w.dtype),  # no .float(): float64 weights give float64 scales
]


# -- int4-unpack -----------------------------------------------------------------------------------


@solution("int4-unpack")
def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    low, high = packed & 15, packed >> 4  # (N, K / 2) each: columns 2j and 2j + 1
    return torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1)  # (N, K): even, odd, even, odd


@hidden("int4-unpack")
def _unpack(seed: int) -> list[Case]:
    g = _seeded(seed + 25)
    return [
        Case((torch.tensor([[0x9C]], dtype=torch.uint8),), "one byte"),
        Case((torch.full((2, 3), 0xFF, dtype=torch.uint8),), "every value 15"),
        Case((torch.zeros(4, 2, dtype=torch.uint8),), "every value 0"),
        Case((torch.randint(0, 256, (64, 48), generator=g).to(torch.uint8),), "a (64, 48) matrix of bytes"),
        Case((torch.randint(0, 256, (8, 6), generator=g).to(torch.uint8).T,), "a transposed (6, 8): not contiguous"),
    ]


MISTAKES["int4-unpack"] = [
    lambda packed: torch.stack([packed >> 4, packed & 15], dim=-1).reshape(packed.shape[0], -1),  # high first
    lambda packed: torch.cat([packed & 15, packed >> 4], dim=-1),  # the evens, then the odds
    lambda packed: torch.stack([packed, packed >> 4], dim=-1).reshape(packed.shape[0], -1),  # not masked
    lambda packed: torch.stack([packed.view(-1) & 15, packed.view(-1) >> 4], -1).view(len(packed), -1),  # view
]


# -- draft-acceptance ------------------------------------------------------------------------------


@solution("draft-acceptance")
def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return torch.minimum(p, q).sum(dim=-1)  # q(x) min(1, p(x) / q(x)) = min(p(x), q(x)), summed over x


@hidden("draft-acceptance")
def _acceptance(seed: int) -> list[Case]:
    g = _seeded(seed + 26)

    def rows(*shape):
        return torch.softmax(torch.randn(*shape, generator=g) * 2, dim=-1)

    return [
        Case((torch.tensor([0.2, 0.3, 0.5]), torch.tensor([0.0, 0.0, 1.0])), "a one-hot draft (prompt lookup): p(x)"),
        Case((torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])), "disjoint: never accepted"),
        Case((rows(6, 10), rows(6, 10)), "six rows of ten tokens"),
        Case((rows(2, 3, 5), rows(2, 3, 5)), "a (2, 3) batch of rows"),
        Case((rows(4, 50).double(), rows(4, 50).double()), "float64"),
        Case((torch.tensor([0.1, 0.4, 0.5]), torch.tensor([0.0, 0.6, 0.4])), "q is 0 where p is not"),
        Case((torch.tensor([0.0, 0.3, 0.7]), torch.tensor([0.0, 1.0, 0.0])), "one-hot, a token neither gives"),
    ]


MISTAKES["draft-acceptance"] = [
    lambda p, q: (q * torch.clamp(p / q, max=1)).sum(dim=-1),  # 0 / 0 where both are 0
    lambda p, q: torch.minimum(p, q).mean(dim=-1),  # a mean over the vocabulary
    lambda p, q: 1 - (p - q).abs().sum(dim=-1),  # the total variation without its half
    lambda p, q: (p * q).sum(dim=-1),  # both draw the same token
    lambda *args: acceptance_rate(*args).float(),  # float32 whatever the dtype of p and q
]


# -- residual-rows ---------------------------------------------------------------------------------


@solution("residual-rows")
def residual_rows(p: torch.Tensor, q: torch.Tensor, draft_ids: torch.Tensor) -> torch.Tensor:
    full = torch.zeros_like(p)  # (..., V): the tokens the draft lacks have probability 0
    full[..., draft_ids] = q.to(p.dtype)  # draft token j is the target's token draft_ids[j]
    left = (p - full).clamp_min(0)  # (..., V)
    total = left.sum(dim=-1, keepdim=True)  # (..., 1): one sum per row
    return torch.where(total > 0, left / total.clamp_min(1e-30), p)  # nothing left over: p itself


@hidden("residual-rows")
def _residual_rows(seed: int) -> list[Case]:
    g = _seeded(seed + 27)

    def rows(*shape):
        return torch.softmax(torch.randn(*shape, generator=g) * 2, dim=-1)

    def ids(v, vq):  # a draft that knows vq of the target's v tokens, in another order
        return torch.randperm(v, generator=g)[:vq]

    same, equal = rows(2, 3, 4), rows(3, 7).double()
    other = same.clone()
    other[1, 2] = rows(4)
    return [
        Case((rows(6, 10), rows(6, 10), ids(10, 10)), "six rows of ten tokens, the draft's in another order"),
        Case((torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0]), torch.tensor([0, 1])), "disjoint: all of p"),
        Case((torch.tensor([0.2, 0.3, 0.5]), torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0, 1, 2])),
             "a one-hot draft (prompt lookup)"),
        Case((same, other, torch.arange(4)), "a (2, 3) batch: one row differs, five have q == p"),
        Case((rows(2, 3).double(), rows(2, 3).double(), ids(3, 3)), "float64"),
        Case((equal, equal.clone(), torch.arange(7)), "float64, q == p in every row"),
        Case((rows(4, 12), rows(4, 9), ids(12, 9)), "a draft vocabulary of 9 of a target's 12, in any order"),
        Case((rows(4, 12), rows(4, 9), torch.arange(9)), "a draft vocabulary of the target's first 9 of 12"),
        Case((torch.tensor([0.2, 0.8]), torch.tensor([1.0]), torch.tensor([1])), "a one-token draft: the target's 1"),
    ]  # fmt: skip


def padded(q, p):  # the draft's tokens taken as the target's first ones, the rest probability 0
    return F.pad(q, (0, p.shape[-1] - q.shape[-1]))


def buggy_residual(p, q, draft_ids):  # the function the exercise shows
    left = (p - padded(q, p)).clamp_min(0)
    return left / left.sum()


def residual_if_any_left(p, q, draft_ids):
    full = torch.zeros_like(p)
    full[..., draft_ids] = q
    left = (p - full).clamp_min(0)
    return p if left.sum() == 0 else left / left.sum(dim=-1, keepdim=True)


def gathered_residual(p, q, draft_ids):  # p read at the draft's tokens: the others are lost
    return residual_rows(p[..., draft_ids], q, torch.arange(q.shape[-1]))


MISTAKES["residual-rows"] = [
    buggy_residual,
    lambda p, q, ids: residual_rows(p, padded(q, p), torch.arange(p.shape[-1])),  # the draft's ids ignored
    lambda p, q, ids: (p - padded(q, p)).clamp_min(0) / (p - padded(q, p)).clamp_min(0).sum(dim=-1, keepdim=True),
    residual_if_any_left,  # p only when no row has anything left over
    gathered_residual,
    lambda p, q, ids: residual_rows(p, q.flip(-1), ids),  # the ids read backwards
    lambda *args: residual_rows(*args).float(),  # float32 whatever the dtype of p
]  # the third: NaN for q == p
