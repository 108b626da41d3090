"""The exercises of notebook 06, Positional encodings.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch06`.
"""

from __future__ import annotations

import math

import torch

from .core import Case, _seeded, exercise


def _rope_thetas(head_dim: int, base: float) -> torch.Tensor:
    """theta_i = base ** (-2i / head_dim), in float64: the expected answers of rope-scaling."""
    return base ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (D/2,)


@exercise(
    "rope-scaling",
    hint=[
        "linear: what happens to every angle position * theta_i when every position is divided by scale? "
        "NTK: only the base changes; write theta_0 and theta_last with a new base b",
        "theta_0 = b ** 0 = 1 whatever b is; the last pair, i = D/2 - 1, has theta = b ** (-(D - 2) / D): "
        "solve b ** (-(D - 2) / D) = 10000 ** (-(D - 2) / D) / scale for b",
        "b = 10000 * scale ** (D / (D - 2)); usual mistakes: the base times scale (the slowest pair then slows "
        "by less than scale), linear that multiplies by scale, the exponent upside down",
    ],
)
def _rope_scaling_cases() -> list[Case]:
    def answer(head_dim: int, scale: float, method: str) -> torch.Tensor:
        if method == "linear":
            return (_rope_thetas(head_dim, 10000.0) / scale).float()
        return _rope_thetas(head_dim, 10000.0 * scale ** (head_dim / (head_dim - 2))).float()

    inputs = [
        ((8, 1.0, "ntk"), "scale 1: RoPE's own frequencies"),
        ((8, 4.0, "linear"), "linear, scale 4"),
        ((8, 4.0, "ntk"), "NTK, scale 4"),
        ((64, 8.0, "ntk"), "NTK, D = 64, scale 8"),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


def _alibi_by_loops(slopes: torch.Tensor, T: int) -> torch.Tensor:
    """The expected answer of an alibi-bias case, entry by entry: the bias, -inf for future keys."""
    bias = torch.full((len(slopes), T, T), float("-inf"), dtype=slopes.dtype)  # (H, T, T)
    for h in range(len(slopes)):
        for i in range(T):  # the query
            for j in range(i + 1):  # the keys at or before it
                bias[h, i, j] = -slopes[h] * (i - j)
    return bias


@exercise(
    "alibi-bias",
    hint=[
        "print the buggy bias for one head and T = 4: which of its entries are neither 0 nor -inf?",
        "rows are queries i and columns keys j: a key j <= i lies i - j positions back; the function above "
        "measures j - i, which is positive only for FUTURE keys, and those are -inf: no bias is left",
        "-slope * (i - j) where j <= i, -inf where j > i, one (T, T) table per head; usual mistakes: the sign "
        "(far keys favoured), 0 for the future (the bias without its mask), one position too many",
    ],
    bans=("course_lib.positional.alibi_bias",),
)
def _alibi_bias_cases() -> list[Case]:
    inputs = [
        ((torch.tensor([0.5]), 3), "one head, T = 3"),
        ((torch.tensor([0.25, 0.0625]), 4), "two heads, T = 4"),
        ((torch.tensor([0.5, 0.25, 0.125, 0.0625]), 1), "T = 1: nothing to look back on"),
        ((torch.tensor([0.5, 0.125], dtype=torch.float64), 3), "float64 slopes: a float64 bias"),
    ]
    return [Case(args, note, _alibi_by_loops(*args)) for args, note in inputs]


def _stretched_by_loops(table: torch.Tensor, new_length: int) -> torch.Tensor:
    """The expected answer of a stretch-positions case, row by row."""
    L = table.shape[0]
    rows = []
    for p in range(new_length):
        x = p * (L - 1) / (new_length - 1)  # the old position this row stands for
        low = min(int(math.floor(x)), L - 2)
        w = x - low  # 0 at row low, 1 at row low + 1
        rows.append((1 - w) * table[low].double() + w * table[low + 1].double())
    return torch.stack(rows).to(table.dtype)  # (new_length, C)


@exercise(
    "stretch-positions",
    hint=[
        "row p of the new table stands for an old position x that is usually not a whole number: which two old "
        "rows lie either side of it?",
        "x = p * (L - 1) / (new_length - 1), so the first and last rows map to the first and last; mix rows "
        "floor(x) and floor(x) + 1 with weights 1 - (x - floor(x)) and x - floor(x)",
        "at the last row x = L - 1 exactly: there is no row L, take the last row itself; usual mistakes: "
        "x = p * L / new_length (the ends move), the nearest row instead of a mix, interpolating along C",
    ],
    bans=("torch.nn.functional.interpolate",),
)
def _stretch_positions_cases() -> list[Case]:
    g = _seeded(8)
    inputs = [
        ((torch.tensor([[0.0, 10.0], [2.0, 20.0]]), 3), "two rows to three: the middle is their mean"),
        ((torch.tensor([[0.0], [1.0], [4.0]]), 5), "three rows to five"),
        ((torch.randn(4, 3, generator=g), 4), "the same length: unchanged"),
        ((torch.randn(8, 5, generator=g), 3), "shrinking, eight rows to three"),
        ((torch.randn(5, 3, generator=g, dtype=torch.float64), 9), "a float64 table: a float64 table"),
    ]
    return [Case(args, note, _stretched_by_loops(*args)) for args, note in inputs]


def _reach_by_loop(slope: float, T: int, share: float) -> int:
    """The expected answer of an alibi-reach case: add the weights from the nearest key back."""
    weights = [math.exp(-slope * k) for k in range(T)]  # k positions back, equal raw scores
    total, running = sum(weights), 0.0
    for r, w in enumerate(weights, start=1):
        running += w
        if running >= share * total:
            return r
    return T


@exercise(
    "alibi-reach",
    hint=[
        "with equal raw scores, the bias alone sets the weights: what is the weight of the key k positions back, "
        "before the softmax divides?",
        "exp(-slope * k) for k = 0 (the query itself) .. T - 1; divide by their sum over all T keys, then add "
        "them up from k = 0 until the total reaches share",
        "the answer is how many keys you added (1 .. T), an int; usual mistakes: adding from the oldest key, the "
        "sum of an infinite series (T ignored), a count one too small",
    ],
)
def _alibi_reach_cases() -> list[Case]:
    inputs = [
        ((0.0, 10, 0.55), "slope 0: equal weights"),
        ((10.0, 10, 0.99), "a steep slope: the query itself"),
        ((0.5, 64, 0.9), "slope 1/2, 64 keys, 90%"),
        ((0.0625, 64, 0.5), "slope 1/16, 64 keys, half the weight"),
    ]
    return [Case(args, note, _reach_by_loop(*args)) for args, note in inputs]
