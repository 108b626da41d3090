"""The instructors' key to notebook 10, Fine-tuning for classification.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch10`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import math

import torch

from course_lib import evaluation
from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- mean-pooling ----------------------------------------------------------------------------------


@solution("mean-pooling")
def mean_pooling(features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    real = torch.arange(features.shape[1]) < lengths[:, None]  # (B, T): True at real tokens
    total = (features * real[..., None]).sum(dim=1)  # (B, C): padding zeroed
    return total / lengths[:, None].to(features.dtype)


@hidden("mean-pooling")
def _mean_pooling(seed: int) -> list[Case]:
    g = _seeded(seed + 17)
    return [
        Case((torch.randn(3, 4, 2, generator=g), torch.tensor([1, 1, 1])), "every text one token long"),
        Case((torch.randn(16, 32, 8, generator=g), torch.randint(1, 33, (16,), generator=g)), "16 random lengths"),
        Case((torch.randn(2, 3, 4, generator=g), torch.tensor([2, 3], dtype=torch.int32)), "int32 lengths"),
        Case((torch.randn(2, 5, 3, generator=g, dtype=torch.float64), torch.tensor([4, 2])), "float64"),
        Case((torch.full((1, 3, 2), 1e4), torch.tensor([3])), "large equal values"),
    ]


def mean_pooling_over_t(features, lengths):  # the masked sum divided by T, not by the length
    real = torch.arange(features.shape[1]) < lengths[:, None]
    return (features * real[..., None]).sum(1) / features.shape[1]


MISTAKES["mean-pooling"] = [
    lambda features, lengths: features.mean(dim=1),  # padding averaged in
    mean_pooling_over_t,
    lambda features, lengths: mean_pooling(features, (lengths - 1).clamp(min=1)),  # one token too few
    lambda *args: mean_pooling(*args).float(),  # float32 whatever the dtype of the features
]


# -- wilson-interval -------------------------------------------------------------------------------


@solution("wilson-interval")
def wilson(correct: int, n: int) -> tuple[float, float]:
    z = 1.96

    def root(k: float, sign: int) -> float:  # a root of (k/n - p)^2 = z^2 p (1 - p) / n, collected in p
        p = k / n
        a, b, c = 1 + z * z / n, -(2 * p + z * z / n), p * p
        return (-b + sign * math.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)

    low = 0.0 if correct == 0 else root(correct - 0.5, -1)  # half a count towards p on each side
    high = 1.0 if correct == n else root(correct + 0.5, +1)
    return low, high


@hidden("wilson-interval")
def _wilson(seed: int) -> list[Case]:
    return [
        Case((1, 1), "one text, right"),
        Case((0, 1), "one text, wrong"),
        Case((46, 65), "46 of 65"),
        Case((999, 1000), "999 of 1000"),
        Case((3, 7), "3 of 7"),
        Case((130, 130), "all 130 test texts"),
    ]


def wald(correct, n, z=1.96):  # the standard error at k/n: the interval Wilson's replaces
    p = correct / n
    half = z * math.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


def wilson_with(correct, n, z2=1.96**2, shift=0.5):  # shift: the continuity correction, towards p on each side
    def root(k, sign):
        p = k / n
        a, b, c = 1 + z2 / n, -(2 * p + z2 / n), p * p
        return (-b + sign * math.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)

    low = 0.0 if correct == 0 else max(0.0, root(correct - shift, -1))
    high = 1.0 if correct == n else min(1.0, root(correct + shift, +1))
    return low, high


MISTAKES["wilson-interval"] = [
    wald,
    lambda k, n: tuple(reversed(wilson(k, n))),  # high first
    lambda k, n: wilson_with(k, n, z2=1.96),  # z where the formula has z squared
    lambda k, n: wilson_with(k, n, shift=0.0),  # Wilson's interval without the correction
    lambda k, n: wilson_with(k, n, shift=-0.5),  # the half count on the wrong side: narrower
    lambda k, n: evaluation.wilson_interval(k, n),  # banned (and uncorrected)
]


# -- last-real-token -------------------------------------------------------------------------------


@solution("last-real-token")
def last_real_token(features: torch.Tensor, lengths: torch.Tensor, side: str) -> torch.Tensor:
    if side == "left":
        return features[:, -1]  # (B, C): left padding ends every row at the last position
    return features[torch.arange(len(lengths)), lengths.long() - 1]  # (B, C): row b ends at lengths[b] - 1


@hidden("last-real-token")
def _last_real(seed: int) -> list[Case]:
    g = _seeded(seed + 31)
    f, lengths = torch.randn(6, 9, 4, generator=g), torch.tensor([9, 1, 4, 7, 2, 9])
    return [
        Case((f, lengths, "left"), "six left-padded rows"),
        Case((f, lengths, "right"), "six right-padded rows"),
        Case((f[:1], torch.tensor([3]), "right"), "one row"),
        Case((f[:3].double(), torch.tensor([2, 2, 2]), "left"), "float64, equal lengths"),
        Case((f[:2], torch.tensor([9, 5], dtype=torch.int32), "right"), "int32 lengths"),
    ]


def last_real_both(features, lengths, side, position):
    return features[torch.arange(len(lengths)), position(lengths, features.shape[1])]


MISTAKES["last-real-token"] = [
    lambda f, lengths, side: last_real_both(f, lengths, side, lambda n, T: n - 1),  # lengths - 1 on both sides
    lambda f, lengths, side: f[:, -1],  # position -1 on both sides
    lambda f, lengths, side: (
        last_real_both(f, lengths, side, lambda n, T: T - n) if side == "left" else last_real_token(f, lengths, side)
    ),  # the first real token of a left-padded row
    lambda *args: last_real_token(*args).float(),  # float32 whatever the dtype of the features
]


# -- macro-f1 --------------------------------------------------------------------------------------


@solution("macro-f1")
def macro_f1(predictions: list[int], labels: list[int]) -> float:
    scores = []
    for k in sorted(set(labels) | set(predictions)):
        tp = sum(p == k and y == k for p, y in zip(predictions, labels))
        fp = sum(p == k and y != k for p, y in zip(predictions, labels))
        fn = sum(p != k and y == k for p, y in zip(predictions, labels))
        scores.append(2 * tp / (2 * tp + fp + fn))
    return sum(scores) / len(scores)


@hidden("macro-f1")
def _macro_f1(seed: int) -> list[Case]:
    g = _seeded(seed + 19)
    labels = torch.randint(0, 6, (130,), generator=g).tolist()
    noisy = [y if k % 3 else (y + 1) % 6 for k, y in enumerate(labels)]
    return [
        Case(([1] * 130, labels), "always one area, 130 texts"),
        Case((noisy, labels), "a third wrong, six classes"),
        Case(([3], [3]), "one text, right"),
        Case(([2], [5]), "one text, wrong: two classes at 0"),
        Case(([4, 4, 7, 7], [4, 7, 4, 7]), "class ids that do not start at 0"),
    ]


def macro_f1_of_means(predictions, labels):  # the F1 of the mean precision and the mean recall
    classes = sorted(set(labels) | set(predictions))
    pairs = list(zip(predictions, labels))
    precision = [sum(p == y == k for p, y in pairs) / max(1, sum(p == k for p, _ in pairs)) for k in classes]
    recall = [sum(p == y == k for p, y in pairs) / max(1, sum(y == k for _, y in pairs)) for k in classes]
    P, R = sum(precision) / len(classes), sum(recall) / len(classes)
    return 2 * P * R / (P + R) if P + R else 0.0


MISTAKES["macro-f1"] = [
    lambda predictions, labels: sum(p == y for p, y in zip(predictions, labels)) / len(labels),  # the accuracy
    lambda predictions, labels: macro_f1(
        [p if p in labels else labels[0] for p in predictions], labels
    ),  # only the labels' classes (a predicted-only class dropped)
    macro_f1_of_means,
]
