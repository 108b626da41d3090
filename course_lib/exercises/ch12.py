"""The exercises of notebook 12, Prompting, inference-time compute, and limits.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch12`.
"""

from __future__ import annotations

from .core import Case, exercise


@exercise(
    "pass-at-k",
    hint=[
        "turn it around: what is the chance that k samples drawn from the n contain NO right one?",
        "k drawn without replacement from n, of which n - c are wrong: all k are wrong in C(n - c, k) of the "
        "C(n, k) ways (math.comb)",
        "pass@k is the chance of the opposite, as a float (math.comb gives 0 when fewer than k samples are "
        "wrong). The usual mistake, 1 - (1 - c / n) ** k, draws with replacement and is biased low",
    ],
    prediction=True,
)
def _pass_at_k_cases() -> list[Case]:
    return [
        Case((5, 1, 2), "one right of five, two drawn", 0.4),
        Case((10, 3, 1), "k = 1: the share of right samples", 0.3),
        Case((6, 2, 3), "two right of six, three drawn", 0.8),
        Case((5, 3, 4), "only two wrong: four draws always hold a right one", 1.0),
        Case((8, 0, 8), "none right", 0.0),
    ]


@exercise(
    "mcnemar-exact",
    hint=[
        "which items say anything about which of the two is better? Count only those",
        "the items both get right, or both wrong, do not enter; of the d items where they disagree, A alone is "
        "right on some: under 'no difference' each disagreement is a fair coin, a binomial(d, 1/2)",
        "two-sided: the splits more uneven than the one seen, in either direction (a tail on each side), "
        "plus half the splits exactly as uneven (two of them, or one when the split is a tie); no "
        "disagreement at all: 1.0",
    ],
    bans=(
        "course_lib.evaluation.mcnemar_p",
        "course_lib.evaluation.paired_difference",
        "course_lib.evaluation.compare_family",
    ),
)
def _mcnemar_cases() -> list[Case]:
    return [
        Case(([1, 1, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0, 1, 1, 0]), "6 : 1 disagreements, 2 items that agree",
             (2 * 1 + 2 * 7 / 2) / 128),
        Case(([1, 0, 1, 0, 1, 0, 1], [0, 1, 0, 1, 0, 1, 1]), "3 : 3, a tie: one split exactly as uneven",
             1 - 20 / 64 / 2),
        Case(([1] * 7 + [0] * 2 + [1] * 10, [0] * 7 + [1] * 2 + [1] * 10), "7 : 2, 10 items both right",
             (2 * (1 + 9) + 2 * 36 / 2) / 512),
        Case(([0, 1, 1, 0], [0, 1, 1, 0]), "the same answers: no disagreement", 1.0),
    ]  # fmt: skip


@exercise(
    "holm-adjusted",
    hint=[
        "try p-values whose adjusted values 1 - (1 - p) ** (m - rank) come out smaller for a larger p: is the "
        "result still in the order of the p-values? Try two equal p-values too",
        "Holm-Sidak is a step-down procedure: a hypothesis is rejected only if every smaller p was rejected first, "
        "so an adjusted p can never be below the adjusted p of a smaller p",
        "sort; turn the smallest into 1 - (1 - p) ** m, the next into 1 - (1 - p) ** (m - 1), ...; carry the "
        "running maximum along the sorted order and give each adjusted p back at its input position (a list of "
        "floats); usual mistakes: Holm's (m - rank) * p, Sidak's 1 - (1 - p) ** m for every p, a running minimum "
        "from the largest p (Hochberg's step-up)",
    ],
    bans=("course_lib.evaluation.holm", "course_lib.evaluation.compare_family"),
)
def _holm_cases() -> list[Case]:
    return [
        Case(([0.001, 0.2, 0.01, 0.04],), "four p-values", [1 - 0.999**4, 0.2, 1 - 0.99**3, 1 - 0.96**2]),
        Case(([0.01, 0.04, 0.03],), "three p-values", [1 - 0.99**3, 1 - 0.97**2, 1 - 0.97**2]),
        Case(([0.02, 0.02],), "two equal p-values", [1 - 0.98**2, 1 - 0.98**2]),
        Case(([0.6, 0.7],), "a larger p below a smaller p's adjusted value", [0.84, 0.84]),
    ]


@exercise(
    "majority-right",
    hint=[
        "the majority is right when more than half of the n samples are right: how is the number of right "
        "samples distributed?",
        "the number of right samples is binomial(n, p): sum C(n, k) p^k (1 - p)^(n - k) over the k that are a majority",
        "n is odd, so a majority is k >= (n + 1) / 2, i.e. k > n / 2; the answer is a float. Usual mistakes: "
        "k >= n // 2, p ** n (all right), 1 - (1 - p) ** n (at least one right)",
    ],
    prediction=True,
)
def _majority_right_cases() -> list[Case]:
    return [
        Case((0.6, 1), "one sample: p itself", 0.6),
        Case((0.6, 3), "three samples", 0.648),
        Case((0.2, 3), "three samples of a weak model", 0.104),
        Case((0.5, 5), "a coin stays a coin", 0.5),
    ]
