"""The instructors' key to notebook 06, Positional encodings.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch06`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- rope-scaling ----------------------------------------------------------------------------------


@solution("rope-scaling")
def scaled_rope_frequencies(head_dim: int, scale: float, method: str) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim  # (D/2,): 2i / D
    if method == "linear":
        return (10000.0**-exponents / scale).float()  # every position divided by scale
    base = 10000.0 * scale ** (head_dim / (head_dim - 2))  # the last pair slowed by exactly scale
    return (base**-exponents).float()


@hidden("rope-scaling")
def _rope_scaling(seed: int) -> list[Case]:
    return [
        Case((4, 2.0, "ntk"), "D = 4: two pairs"),
        Case((4, 2.0, "linear"), "D = 4, linear"),
        Case((128, 4.0, "ntk"), "D = 128, NTK"),
        Case((128, 16.0, "linear"), "D = 128, linear, scale 16"),
        Case((16, 1.0, "linear"), "scale 1, linear: unchanged"),
        Case((32, 2.5, "ntk"), "a scale that is not a whole number"),
    ]


def rope_frequencies_with_base(head_dim, base):
    return base ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


MISTAKES["rope-scaling"] = [
    lambda d, s, m: (
        rope_frequencies_with_base(d, 1e4) / s if m == "linear" else rope_frequencies_with_base(d, 1e4 * s)
    ).float(),  # NTK: the base times scale
    lambda d, s, m: scaled_rope_frequencies(d, 1 / s, m) if m == "linear" else scaled_rope_frequencies(d, s, m),
    lambda d, s, m: (
        rope_frequencies_with_base(d, 1e4) / s
        if m == "linear"
        else rope_frequencies_with_base(d, 1e4 * s ** ((d - 2) / d))
    ).float(),  # the exponent upside down
    lambda d, s, m: scaled_rope_frequencies(d, s, "linear"),  # NTK taken for linear
]


# -- alibi-bias ------------------------------------------------------------------------------------


@solution("alibi-bias")
def alibi_bias(slopes: torch.Tensor, T: int) -> torch.Tensor:
    position = torch.arange(T)
    back = position[:, None] - position[None, :]  # (T, T): query i minus key j, negative for the future
    bias = -slopes[:, None, None] * back.clamp(min=0)  # (H, T, T), in the dtype of slopes
    return bias.masked_fill(back < 0, float("-inf"))  # the causal mask in the same tensor


@hidden("alibi-bias")
def _alibi_bias(seed: int) -> list[Case]:
    return [
        Case((torch.tensor([1.0]), 1), "one head, T = 1"),
        Case((torch.tensor([2 ** (-8 / 8 * (h + 1)) for h in range(8)]), 16), "eight heads, T = 16"),
        Case((torch.tensor([0.3, 0.7, 0.1]), 5), "slopes in no order"),
        Case((torch.tensor([0.5, 0.25], dtype=torch.float64), 6), "float64 slopes"),
    ]


def alibi_as_shown(slopes, T):  # the function the exercise shows: j - i, future keys only
    position = torch.arange(T)
    distance = (position[None, :] - position[:, None]).clamp(min=0)  # (T, T)
    bias = -slopes[:, None, None] * distance
    return bias.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))


def alibi_without_mask(slopes, T):  # course_lib's bias: 0 for the future, the mask left to later
    position = torch.arange(T)
    return -slopes[:, None, None] * (position[:, None] - position[None, :]).clamp(min=0)


MISTAKES["alibi-bias"] = [
    alibi_as_shown,
    lambda slopes, T: alibi_bias(-slopes, T),  # the sign: far keys favoured
    alibi_without_mask,
    lambda slopes, T: alibi_bias(slopes, T) - slopes[:, None, None] * torch.ones(T, T).tril(),  # i - j + 1
    lambda slopes, T: alibi_bias(slopes, T).float(),  # float32 whatever the slopes' dtype
]


# -- stretch-positions -----------------------------------------------------------------------------


@solution("stretch-positions")
def stretch_positions(table: torch.Tensor, new_length: int) -> torch.Tensor:
    L = table.shape[0]
    x = torch.arange(new_length, dtype=torch.float64) * (L - 1) / (new_length - 1)  # (N,): old positions
    low = x.floor().long().clamp(max=L - 2)  # (N,): the row before; the last row mixes L - 2 and L - 1
    w = (x - low).to(table.dtype)[:, None]  # (N, 1): the share of the row after
    return (1 - w) * table[low] + w * table[low + 1]  # (N, C)


@hidden("stretch-positions")
def _stretch_positions(seed: int) -> list[Case]:
    g = _seeded(seed + 12)
    return [
        Case((torch.randn(64, 16, generator=g), 256), "64 positions to 256"),
        Case((torch.randn(2, 4, generator=g), 2), "two rows, unchanged"),
        Case((torch.randn(5, 3, generator=g), 2), "five rows to the first and last"),
        Case((torch.randn(10, 6, generator=g, dtype=torch.float64), 7), "float64, ten rows to seven"),
        Case((torch.randn(8, 3, generator=g).T.contiguous().T, 20), "a non-contiguous table"),
    ]


def stretch_ends_move(table, new_length):  # x = p * L / new_length: the last row is never reached
    L = table.shape[0]
    x = torch.arange(new_length, dtype=torch.float64) * L / new_length
    low = x.floor().long().clamp(max=L - 2)
    w = (x - low).clamp(max=1).to(table.dtype)[:, None]
    return (1 - w) * table[low] + w * table[low + 1]


def stretch_nearest(table, new_length):  # the nearest row, no mix
    x = torch.arange(new_length, dtype=torch.float64) * (table.shape[0] - 1) / (new_length - 1)
    return table[x.round().long()]


MISTAKES["stretch-positions"] = [
    stretch_ends_move,
    stretch_nearest,
    lambda table, n: F.interpolate(table.T[None], size=n, mode="linear", align_corners=True)[0].T,  # banned
    lambda *args: stretch_positions(*args).float(),  # float32 whatever the dtype of the table
]


# -- alibi-reach -----------------------------------------------------------------------------------


@solution("alibi-reach")
def alibi_reach(slope: float, T: int, share: float) -> int:
    weights = torch.exp(-slope * torch.arange(T, dtype=torch.float64))  # (T,): nearest key first
    mass = (weights / weights.sum()).cumsum(0)  # (T,): the weight of the r nearest keys
    return min(T, int((mass < share).sum()) + 1)  # rounding may leave the last sum a hair below 1


@hidden("alibi-reach")
def _alibi_reach(seed: int) -> list[Case]:
    return [
        Case((0.25, 64, 0.9), "head 0 of four, 64 keys"),
        Case((0.00390625, 256, 0.9), "head 3 of four, 256 keys"),
        Case((0.0625, 256, 0.5), "head 1 of four, 256 keys"),
        Case((0.0, 1, 1.0), "one key"),
        Case((0.0, 64, 0.999), "slope 0, nearly all the weight: every key"),
        Case((1.0, 100, 0.3), "a share below the query's own weight"),
    ]


def reach_from_oldest(slope, T, share):  # adds the weights from the first key in the window
    weights = torch.exp(-slope * torch.arange(T, dtype=torch.float64)).flip(0)
    mass = (weights / weights.sum()).cumsum(0)
    return int((mass < share).sum()) + 1


MISTAKES["alibi-reach"] = [
    reach_from_oldest,
    lambda slope, T, share: math.ceil(math.log(1 - share) / -slope),  # an infinite past: T ignored
    lambda slope, T, share: alibi_reach(slope, T, share) - 1,  # the index, not the count
]
