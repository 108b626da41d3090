"""The exercises of notebook 10, Fine-tuning for classification.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch10`.
"""

from __future__ import annotations

import torch

from .core import Case, _seeded, exercise


def _mean_pooled(features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The expected answer of a mean-pooling case, row by row."""
    return torch.stack([features[b, : int(n)].mean(dim=0) for b, n in enumerate(lengths)])  # (B, C)


@exercise(
    "mean-pooling",
    hint=[
        "which positions of row b are real tokens, and how many are there?",
        "row b's real tokens are positions 0 .. lengths[b] - 1: a (B, T) mask, positions < lengths[:, None], "
        "zeroes the padding; divide each row's sum by its own length",
        "usual mistakes: the mean over all T positions (padding included), the sum of the real tokens divided by "
        "T, one position too few",
    ],
)
def _mean_pooling_cases() -> list[Case]:
    g = _seeded(12)
    inputs = [
        (
            (torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]]), torch.tensor([2])),
            "one text: two real tokens, one pad",
        ),
        ((torch.randn(3, 5, 4, generator=g), torch.tensor([5, 2, 3])), "rows padded by 0, 3 and 2 tokens"),
        ((torch.randn(2, 6, 2, generator=g), torch.tensor([1, 6])), "a one-token text beside a full one"),
        (
            (torch.randn(2, 3, 2, generator=g, dtype=torch.float64), torch.tensor([3, 1])),
            "float64 features: a float64 mean",
        ),
    ]
    return [Case(args, note, _mean_pooled(*args)) for args, note in inputs]  # fmt: skip


@exercise(
    "wilson-interval",
    hint=[
        "take the low end alone: there p is below k/n, so the condition reads (k - 1/2)/n - p <= z sqrt(p (1 - p) "
        "/ n); the unknown p is on both sides: square it; what kind of equation in p do you get?",
        "((k - 1/2)/n - p)^2 = z^2 p (1 - p) / n is a quadratic in p (collect it as a p^2 + b p + c = 0): the low "
        "end is its smaller root; the high end is the larger root of the same quadratic with (k + 1/2)/n",
        "at k = 0 the low side holds for every p (its left side is negative): the low end is 0; so is the high "
        "end 1 at k = n. Usual mistakes: Wilson's interval uncorrected, the half count on the wrong side, the "
        "standard error at k/n (Wald's), the ends returned high first",
    ],
    bans=("course_lib.evaluation.wilson_interval", "course_lib.evaluation.accuracy_text"),
)
def _wilson_cases() -> list[Case]:
    return [
        Case((5, 10), "5 of 10: symmetric about 0.5", (0.20142, 0.79858)),
        Case((0, 10), "none right: the low end is 0, the high end is not", (0.0, 0.344544)),
        Case((69, 135), "the head alone on validation", (0.424041, 0.597539)),
        Case((10, 10), "all right: the high end is 1", (0.655456, 1.0)),
    ]


@exercise(
    "last-real-token",
    hint=[
        "draw a row of 2 real tokens in a window of 5, padded on the left, then on the right: where is its last "
        "real token each time?",
        "padding on the left pushes every row's text to the END of the window, whatever its length; on the "
        "right the text starts at 0 and its last token depends on the length",
        "usual mistakes: lengths - 1 for both sides, position -1 for both sides, T - lengths (the FIRST real "
        "token of a left-padded row)",
    ],
    bans=("course_lib.classification.last_real_token",),
)
def _last_real_cases() -> list[Case]:
    f = torch.arange(5 * 5 * 2, dtype=torch.float32).view(5, 5, 2)  # (B=5, T=5, C=2): every entry different
    lengths = torch.tensor([5, 2, 3, 1, 4])
    rows = torch.arange(5)
    return [
        Case((f, lengths, "right"), "right-padded", f[rows, torch.tensor([4, 1, 2, 0, 3])]),
        Case((f, lengths, "left"), "the same lengths, left-padded", f[rows, torch.tensor([4, 4, 4, 4, 4])]),
        Case((f[:2, :4], torch.tensor([4, 4]), "left"), "no padding at all", f[:2, 3]),
        Case((f[:2], torch.tensor([1, 5]), "right"), "a one-token text beside a full one", f[[0, 1], [0, 4]]),
        Case((f[:3].double(), torch.tensor([2, 5, 1]), "left"), "float64 features, left-padded", f[:3, 4].double()),
    ]  # fmt: skip


@exercise(
    "macro-f1",
    hint=[
        "one F1 per class, then their plain mean: which classes take part?",
        "for class k: TP texts of class k predicted k, FP other texts predicted k, FN texts of class k predicted "
        "something else; F1 = 2 TP / (2 TP + FP + FN); average over every class in labels or predictions",
        "a class never predicted right has F1 = 0 and still counts; usual mistakes: the accuracy, only the "
        "classes of the labels, the F1 of the mean precision and mean recall, a mean weighted by class size",
    ],
)
def _macro_f1_cases() -> list[Case]:
    return [
        Case(([0, 1, 2], [0, 1, 2]), "every answer right", 1.0),
        Case(([0, 0, 0, 0], [0, 0, 1, 2]), "always class 0", (4 / 6 + 0 + 0) / 3),
        Case(([0, 1, 1, 0], [0, 1, 0, 1]), "two classes, half right", 0.5),
        Case(([2, 0, 1], [0, 0, 1]), "a class that only the predictions have", (2 / 3 + 1 + 0) / 3),
    ]
