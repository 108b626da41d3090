"""The instructors' key to notebook 02, Embeddings and training data.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch02`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import math

import torch

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- padded-windows --------------------------------------------------------------------------------


@solution("padded-windows")
def padded_windows(ids: list[int], context_length: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    T = context_length
    n = math.ceil((len(ids) - 1) / T)  # every token after the first is a target once
    inputs = torch.full((n, T), pad_id)  # (N, T)
    targets = torch.full((n, T), -100)  # (N, T): -100 is skipped by cross-entropy
    for i in range(n):
        x, y = ids[i * T : i * T + T], ids[i * T + 1 : i * T + T + 1]
        inputs[i, : len(x)] = torch.tensor(x)
        targets[i, : len(y)] = torch.tensor(y)
    return inputs, targets


@hidden("padded-windows")
def _padded(seed: int) -> list[Case]:
    g = _seeded(seed + 4)
    return [
        Case(([3, 4], 1, 0), "context 1, two tokens"),
        Case((list(range(9)), 4, 0), "an exact fit of two windows"),
        Case((list(range(1, 12)), 5, -1), "a pad id of -1, one token in the last window"),
        Case((torch.randint(0, 50, (100,), generator=g).tolist(), 8, 50), "100 random ids, context 8"),
        Case(([5, 5, 5], 16, 1), "a context much longer than the text"),
    ]


def without_short_window(ids, c, pad):
    inputs, targets = padded_windows(ids, c, pad)
    return (inputs[:-1], targets[:-1]) if (len(ids) - 1) % c else (inputs, targets)


MISTAKES["padded-windows"] = [
    without_short_window,
    lambda ids, c, pad: tuple(t.masked_fill(t == -100, pad) for t in padded_windows(ids, c, pad)),  # pads targets
    lambda ids, c, pad: tuple(t.roll(-1, 0) for t in padded_windows(ids, c, pad)),  # windows out of order
]


# -- embedding-grad --------------------------------------------------------------------------------


@solution("embedding-grad")
def embedding_grad(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    counts = torch.bincount(ids.flatten(), minlength=weight.shape[0])  # (V,): lookups per row
    return 2 * counts[:, None] * weight  # (V, C): d(row ** 2)/d(row) = 2 row, once per lookup


@hidden("embedding-grad")
def _embedding_grad(seed: int) -> list[Case]:
    g = _seeded(seed + 5)
    return [
        Case((torch.randn(4, 3, generator=g), torch.tensor([3, 3, 3, 3])), "the last row four times"),
        Case((torch.randn(5, 2, generator=g), torch.tensor([], dtype=torch.long)), "no lookups: all zeros"),
        Case((torch.randn(7, 4, generator=g), torch.randint(0, 7, (2, 3, 4), generator=g)), "(2, 3, 4) ids"),
        Case((torch.randn(100, 8, generator=g), torch.randint(0, 100, (64,), generator=g)), "V = 100"),
    ]


MISTAKES["embedding-grad"] = [
    lambda w, ids: 2 * w * (torch.bincount(ids.flatten(), minlength=w.shape[0]) > 0)[:, None],  # once per row
    lambda w, ids: torch.bincount(ids.flatten(), minlength=w.shape[0])[:, None] * w,  # forgets the 2
    lambda w, ids: 2 * w,  # every row, looked up or not
]


# -- split-windows ---------------------------------------------------------------------------------


@solution("split-windows")
def split_windows(
    ids: torch.Tensor, context_length: int, stride: int, val_fraction: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    cut = int(len(ids) * (1 - val_fraction))  # split the tokens first: no window crosses it

    def windows(part: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        starts = range(0, len(part) - context_length, stride)
        x = [part[s : s + context_length] for s in starts]
        y = [part[s + 1 : s + context_length + 1] for s in starts]
        empty = torch.zeros(0, context_length, dtype=part.dtype)
        return (torch.stack(x), torch.stack(y)) if x else (empty, empty)

    return (*windows(ids[:cut]), *windows(ids[cut:]))


@hidden("split-windows")
def _split(seed: int) -> list[Case]:
    g = _seeded(seed + 21)
    return [
        Case((torch.arange(100, 140), 5, 5, 0.5), "half and half, ids not from 0"),
        Case((torch.arange(25), 4, 3, 0.2), "stride 3, context 4"),
        Case((torch.arange(10), 3, 1, 0.1), "validation of one token: no window"),
        Case((torch.randint(0, 1000, (300,), generator=g), 16, 4, 0.1), "300 random ids, stride 4"),
        Case((torch.arange(50), 6, 10, 0.3), "stride longer than the context"),
    ]


def leaky_split(ids, c, stride, val_fraction):  # the function the exercise shows, seed 0
    starts = range(0, len(ids) - c, stride)
    x = torch.stack([ids[s : s + c] for s in starts])
    y = torch.stack([ids[s + 1 : s + c + 1] for s in starts])
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    n_val = int(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    return x[train], y[train], x[val], y[val]


MISTAKES["split-windows"] = [
    leaky_split,
    lambda ids, c, s, f: split_windows(ids, c, c, f),  # ignores the stride
    lambda ids, c, s, f: split_windows(ids.flip(0), c, s, 1 - f)[2:] + split_windows(ids.flip(0), c, s, 1 - f)[:2],
]  # the last: validation first


# -- nearest-tokens --------------------------------------------------------------------------------


@solution("nearest-tokens")
def nearest_tokens(weight: torch.Tensor, token: int, k: int) -> list[int]:
    unit = weight / weight.norm(dim=1, keepdim=True)  # (V, C): directions only
    similarity = unit @ unit[token]  # (V,)
    similarity[token] = float("-inf")  # not itself
    return similarity.topk(k).indices.tolist()


@hidden("nearest-tokens")
def _nearest(seed: int) -> list[Case]:
    g = _seeded(seed + 22)
    return [
        Case((torch.tensor([[1.0, 0.0], [0.0, 1.0]]), 1, 1), "two rows: the other one"),
        Case(
            (torch.tensor([[3.0, 4.0], [-3.0, -4.0], [0.6, 0.8], [4.0, -3.0]]), 0, 3), "same, opposite, at 90 degrees"
        ),
        Case((torch.randn(50, 16, generator=g), 7, 5), "50 random rows, k = 5"),
        Case(
            (torch.randn(20, 3, generator=g) * torch.rand(20, 1, generator=g) * 100, 0, 19), "every row, lengths apart"
        ),
    ]


def nearest_by_dot(weight, token, k):
    scores = weight @ weight[token]
    scores[token] = float("-inf")
    return scores.topk(k).indices.tolist()


MISTAKES["nearest-tokens"] = [
    lambda w, t, k: [t] + nearest_tokens(w, t, k)[: k - 1],
    nearest_by_dot,
    lambda w, t, k: nearest_tokens(w, t, w.shape[0] - 1)[::-1][:k],
]  # itself first; a plain dot product; the least similar
