"""The instructors' key to notebook 12, Prompting, inference-time compute, and limits.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch12`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import math

import torch

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- pass-at-k -------------------------------------------------------------------------------------


@solution("pass-at-k")
def pass_at_k(n: int, c: int, k: int) -> float:
    return 1 - math.comb(n - c, k) / math.comb(n, k)  # 1 - P(all k drawn are wrong)


@hidden("pass-at-k")
def _pass_at_k(seed: int) -> list[Case]:
    return [
        Case((1, 1, 1), "one sample, right"),
        Case((1, 0, 1), "one sample, wrong"),
        Case((200, 3, 100), "200 samples, 3 right, k = 100"),
        Case((100, 50, 1), "half right, k = 1"),
        Case((20, 1, 20), "k = n: right if any is"),
        Case((50, 10, 5), "Chen et al.'s sizes"),
    ]


MISTAKES["pass-at-k"] = [
    lambda n, c, k: 1 - (1 - c / n) ** k,  # drawn with replacement: biased low
    lambda n, c, k: c / n,  # pass@1 whatever k
    lambda n, c, k: min(1.0, k * c / n),  # adds up the chances of overlapping events
]


# -- mcnemar-exact ---------------------------------------------------------------------------------


@solution("mcnemar-exact")
def mcnemar_mid_p(a: list[int], b: list[int]) -> float:
    a_only = sum(x == 1 and y == 0 for x, y in zip(a, b))
    b_only = sum(x == 0 and y == 1 for x, y in zip(a, b))
    d = a_only + b_only  # only the disagreements say which is better: each a fair coin if neither is
    if d == 0:
        return 1.0
    uneven = abs(a_only - d / 2)  # how far the split seen is from d/2 : d/2
    chance = [math.comb(d, k) / 2**d for k in range(d + 1)]  # of A alone right on k of the d
    more = sum(p for k, p in enumerate(chance) if abs(k - d / 2) > uneven)  # both tails
    same = sum(p for k, p in enumerate(chance) if abs(k - d / 2) == uneven)  # one split or two
    return more + same / 2


@hidden("mcnemar-exact")
def _mcnemar(seed: int) -> list[Case]:
    g = _seeded(seed + 24)
    a = (torch.rand(300, generator=g) < 0.6).int().tolist()
    b = [x if k % 5 else 1 - x for k, x in enumerate(a)]
    return [
        Case(([0], [1]), "one item, one disagreement"),
        Case(([1, 0] * 10 + [0] * 5, [0, 0] * 10 + [1] * 5), "10 : 5"),
        Case(([0] * 12, [1] * 12), "12 : 0 for B"),
        Case(([1] * 60 + [0] * 40, [0] * 60 + [1] * 40), "60 : 40, every item disagrees"),
        Case((a, b), "300 items, one in five flipped"),
        Case(((1, 1, 0), (1, 1, 0)), "tuples, no disagreement"),
        Case(([1] * 5 + [0] * 5 + [1], [0] * 5 + [1] * 5 + [1]), "5 : 5, a tie"),
    ]


def mcnemar_counts(a, b):
    return sum(x > y for x, y in zip(a, b)), sum(x < y for x, y in zip(a, b))


def mcnemar_exact_p(a, b):  # the exact test the chapter's tables print: a split as uneven counts whole
    a_only, b_only = mcnemar_counts(a, b)
    d = a_only + b_only
    return min(1.0, 2 * sum(math.comb(d, k) for k in range(min(a_only, b_only) + 1)) / 2**d)


def mcnemar_one_sided(a, b):
    a_only, b_only = mcnemar_counts(a, b)
    d, low = a_only + b_only, min(a_only, b_only)
    return min(1.0, (sum(math.comb(d, k) for k in range(low)) + math.comb(d, low) / 2) / 2**d)


def mcnemar_tie_as_two(a, b):  # 2 P(X <= low) - P(X = low): a tie's one split counted from both sides
    a_only, b_only = mcnemar_counts(a, b)
    d, low = a_only + b_only, min(a_only, b_only)
    return (2 * sum(math.comb(d, k) for k in range(low + 1)) - math.comb(d, low)) / 2**d


def mcnemar_over_every_item(a, b):  # the agreements counted as coins too
    n, a_only = len(a), mcnemar_counts(a, b)[0]
    return mcnemar_mid_p([1] * a_only + [0] * (n - a_only), [0] * a_only + [1] * (n - a_only))


def mcnemar_normal(a, b):  # the normal approximation: not exact with few disagreements
    a_only, b_only = mcnemar_counts(a, b)
    return math.erfc(abs(a_only - b_only) / math.sqrt(a_only + b_only) / math.sqrt(2))


MISTAKES["mcnemar-exact"] = [
    mcnemar_exact_p,
    mcnemar_one_sided,
    mcnemar_tie_as_two,
    mcnemar_over_every_item,
    mcnemar_normal,
    lambda a, b: mcnemar_mid_p(a, b) if any(x != y for x, y in zip(a, b)) else 0.5,  # no disagreement: 0.5
]


# -- holm-adjusted ---------------------------------------------------------------------------------


@solution("holm-adjusted")
def holm_adjusted(p_values: list[float]) -> list[float]:
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted, running = [0.0] * m, 0.0
    for rank, k in enumerate(order):
        running = max(running, 1 - (1 - p_values[k]) ** (m - rank))  # Sidak's; never below a smaller p's
        adjusted[k] = running
    return adjusted


@hidden("holm-adjusted")
def _holm(seed: int) -> list[Case]:
    return [
        Case(([],), "no p-values"),
        Case(([0.3],), "one p-value: itself"),
        Case(([0.055, 0.26, 0.23, 0.43, 0.25, 1.0, 1.0],), "seven comparisons, as in the chapter"),
        Case(([0.04, 0.01, 0.04, 0.03, 0.01],), "ties and a reversal"),
        Case(([0.0, 1e-9, 0.9],), "zero and tiny p-values"),
        Case(([0.2, 0.1, 0.3, 0.4],), "every product above the last"),
    ]


def sidak(p, times):
    return 1 - (1 - p) ** times


def holm_sidak_without_running_max(p_values):  # the function the exercise shows
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted = [0.0] * m
    for rank, k in enumerate(order):
        adjusted[k] = sidak(p_values[k], m - rank)
    return adjusted


def holm_by_hand(p_values):  # Holm's own (m - rank) * p: the chapter's method, not Sidak's
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted, running = [0.0] * m, 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[k]))
        adjusted[k] = running
    return adjusted


def hochberg_sidak(p_values):  # the step-up procedure: a running minimum from the largest p
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted, running = [0.0] * m, 1.0
    for rank in range(m - 1, -1, -1):
        k = order[rank]
        running = min(running, sidak(p_values[k], m - rank))
        adjusted[k] = running
    return adjusted


MISTAKES["holm-adjusted"] = [
    holm_sidak_without_running_max,
    lambda ps: [sidak(p, len(ps)) for p in ps],  # Sidak's single step: every p as the smallest
    holm_by_hand,
    lambda ps: [max(holm_sidak_without_running_max(ps)[: k + 1]) for k in range(len(ps))],  # maximum in input order
    hochberg_sidak,
]


# -- majority-right --------------------------------------------------------------------------------


@solution("majority-right")
def majority_right(p: float, n: int) -> float:
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n // 2 + 1, n + 1))


@hidden("majority-right")
def _majority_right(seed: int) -> list[Case]:
    return [
        Case((0.0, 5), "never right"),
        Case((1.0, 7), "always right"),
        Case((0.9, 25), "a strong model, 25 votes"),
        Case((0.44, 5), "greedy's rate in the chapter, five votes"),
        Case((0.51, 101), "barely above half, 101 votes"),
        Case((0.3, 1), "one vote"),
    ]


MISTAKES["majority-right"] = [
    lambda p, n: sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n // 2, n + 1)),  # k >= n // 2
    lambda p, n: p**n,  # every sample right
    lambda p, n: 1 - (1 - p) ** n,  # at least one right: pass@n, not the vote
    lambda p, n: sum(p**k * (1 - p) ** (n - k) for k in range(n // 2 + 1, n + 1)),  # no C(n, k)
]
