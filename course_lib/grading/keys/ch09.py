"""The instructors' key to notebook 09, Generating text.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch09`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import torch

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded
from course_lib.generation import filter_logits

from .core import MISTAKES, hidden, solution

# -- top-p-min-keep --------------------------------------------------------------------------------


@solution("top-p-min-keep")
def top_p_min_keep(logits: torch.Tensor, p: float, min_tokens_to_keep: int) -> torch.Tensor:
    probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)  # (B, V) each
    before = probs.cumsum(dim=-1) - probs  # (B, V): the mass of the tokens before each
    rank = torch.arange(logits.shape[-1], device=logits.device)  # (V,)
    drop_sorted = (before >= p) & (rank >= min_tokens_to_keep)
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


@hidden("top-p-min-keep")
def _top_p_min_keep(seed: int) -> list[Case]:
    g = _seeded(seed + 16)
    return [
        Case((torch.randn(1, 6, generator=g) * 3, 0.9, 1), "min 1: the chapter's top-p"),
        Case((torch.randn(2, 8, generator=g) * 5, 0.1, 4), "a sharp distribution, min 4"),
        Case((torch.randn(4, 50, generator=g), 0.5, 10), "V = 50, min 10"),
        Case((torch.randn(3, 7, generator=g), 1.0, 2), "p = 1: every token"),
        Case((torch.randn(2, 5, generator=g) * 2, 0.6, 5), "min = V: every token"),
        Case((torch.randn(8, 1000, generator=g) * 4, 0.95, 3), "V = 1,000, p = 0.95"),
    ]


MISTAKES["top-p-min-keep"] = [
    lambda logits, p, keep: top_p_min_keep(logits, p, 1),  # ignores min_tokens_to_keep
    lambda logits, p, keep: top_p_min_keep(logits, 1.0, keep) if keep > 1 else top_p_min_keep(logits, p, 1),
    lambda logits, p, keep: top_p_min_keep(logits, p, keep - 1),  # keeps one too few
    lambda logits, p, keep: filter_logits(logits, top_p=p),  # banned
]  # the second: min_tokens_to_keep > 1 keeps everything


# -- min-p -----------------------------------------------------------------------------------------


@solution("min-p")
def min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    threshold = min_p * probs.max(dim=-1, keepdim=True).values  # (B, 1): scaled by each row's top token
    return logits.masked_fill(probs < threshold, float("-inf"))


@hidden("min-p")
def _min_p(seed: int) -> list[Case]:
    g = _seeded(seed + 17)
    return [
        Case((torch.randn(1, 6, generator=g), 0.0), "min_p 0: every token"),
        Case((torch.randn(2, 9, generator=g) * 4, 1.0), "min_p 1: the most likely only"),
        Case((torch.randn(5, 100, generator=g) * 3, 0.05), "V = 100, min_p 0.05"),
        Case((torch.tensor([[0.0, 0.0, 0.0], [10.0, 0.0, -10.0]]), 0.5), "a flat row and a sharp one"),
        Case((torch.randn(3, 1000, generator=g), 0.1), "V = 1,000, a flat distribution"),
    ]


def min_p_one_maximum(logits, m):  # each row's probabilities against the largest of the whole batch
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs < m * probs.max(), float("-inf"))


MISTAKES["min-p"] = [
    lambda logits, m: logits.masked_fill(logits < m * logits.amax(-1, keepdim=True), float("-inf")),  # on logits
    lambda logits, m: min_p(logits.flatten()[None], m).view_as(logits),  # one softmax for the batch
    min_p_one_maximum,
    lambda logits, m: logits.masked_fill(torch.softmax(logits, -1) < m, float("-inf")),  # absolute threshold
]


# -- repetition-penalty ----------------------------------------------------------------------------


@solution("repetition-penalty")
def repetition_penalty(logits: torch.Tensor, previous: list[int], penalty: float) -> torch.Tensor:
    logits = logits.clone()
    for token in set(previous):  # once per distinct token
        value = logits[token]
        logits[token] = value / penalty if value > 0 else value * penalty  # always towards less likely
    return logits


@hidden("repetition-penalty")
def _penalty(seed: int) -> list[Case]:
    g = _seeded(seed + 18)
    return [
        Case((torch.tensor([0.0, 1.0]), [0], 1.5), "a zero logit stays 0"),
        Case((torch.tensor([1.0, 2.0]), [], 1.3), "nothing generated yet"),
        Case((torch.randn(50, generator=g) * 3, torch.randint(0, 50, (40,), generator=g).tolist(), 1.3),
             "40 previous tokens, repeats among them"),
        Case((torch.tensor([-4.0, 4.0, -0.5]), [0, 1, 2, 1, 0], 1.0), "penalty 1: nothing changes"),
        Case((torch.randn(10, generator=g, dtype=torch.float64), [9, 9, 3], 2.5), "float64, penalty 2.5"),
    ]  # fmt: skip


def buggy_repetition_penalty(logits, previous, penalty):  # the function the exercise shows
    logits = logits.clone()
    for token in previous:
        logits[token] = logits[token] / penalty
    return logits


def penalised_in_place(logits, previous, penalty):  # right values, but the caller's logits changed too
    for token in set(previous):
        logits[token] = logits[token] / penalty if logits[token] > 0 else logits[token] * penalty
    return logits


MISTAKES["repetition-penalty"] = [
    buggy_repetition_penalty,
    penalised_in_place,
    lambda logits, prev, pen: buggy_repetition_penalty(logits, set(prev), pen),  # the sign still wrong
    lambda logits, prev, pen: repetition_penalty(repetition_penalty(logits, prev, pen), prev[1:], pen),
    lambda *args: repetition_penalty(*args).float(),  # float32 whatever the dtype of the logits
]  # the fourth: penalises a repeat again


# -- distinct-n ------------------------------------------------------------------------------------


@solution("distinct-n")
def distinct_n(tokens: list[int], n: int) -> float:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams)


@hidden("distinct-n")
def _distinct(seed: int) -> list[Case]:
    g = _seeded(seed + 19)
    return [
        Case(([7], 1), "one token"),
        Case(([1, 2, 3], 3), "one trigram"),
        Case(([4, 4, 4, 4, 4, 4], 3), "a run: one distinct trigram of four"),
        Case((torch.randint(0, 5, (200,), generator=g).tolist(), 2), "200 tokens of 5 kinds, bigrams"),
        Case((torch.randint(0, 1000, (300,), generator=g).tolist(), 4), "300 tokens of 1,000 kinds, 4-grams"),
    ]


MISTAKES["distinct-n"] = [
    lambda tokens, n: len(set(tokens)) / len(tokens),  # distinct tokens, not n-grams
    lambda tokens, n: len({tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}) / len(tokens),
    lambda tokens, n: (
        len({tuple(tokens[i : i + n]) for i in range(0, len(tokens) - n + 1, n)}) / max(1, len(tokens) // n)
    ),
]  # divided by the tokens; n-grams that do not overlap
