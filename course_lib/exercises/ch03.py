"""The exercises of notebook 03, The MLP language model.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch03`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .core import Case, _seeded, exercise


@exercise(
    "label-smoothing",
    hint=[
        "the target is now a distribution over all V classes: how much does the true class get, how much "
        "does every other one?",
        "-sum_j q_j log p_j splits in two: (1 - eps) times -log p(target), plus eps times the MEAN over all V "
        "classes of -log p_j; both come from one table of log-probabilities",
        "log p = logits - logsumexp(logits) per row stays finite for logits like 1000; usual mistakes: eps / (V - 1) "
        "on the other classes, softmax then log (-inf), the sum over rows instead of the mean",
    ],
    bans=("torch.nn.functional.cross_entropy",),
)
def _label_smoothing_cases() -> list[Case]:
    g = _seeded(2)

    def answer(logits: torch.Tensor, targets: torch.Tensor, eps: float) -> torch.Tensor:
        return F.cross_entropy(logits.double(), targets, label_smoothing=eps).to(logits.dtype)  # PyTorch's rule

    inputs = [
        ((torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([0]), 0.0), "eps = 0: plain cross-entropy"),
        ((torch.zeros(2, 4), torch.tensor([1, 3]), 0.3), "equal logits: ln 4 whatever eps"),
        ((torch.tensor([[1000.0, 0.0, -1000.0]]), torch.tensor([0]), 0.1), "large logits, a confident right answer"),
        ((torch.randn(5, 7, generator=g) * 2, torch.tensor([0, 6, 2, 2, 5]), 0.2), "a batch of 5, eps 0.2"),
        (
            (torch.randn(3, 5, generator=g, dtype=torch.float64), torch.tensor([4, 0, 2]), 0.1),
            "float64 logits: a float64 loss",
        ),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


def _window_mean(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The expected answer of a window-losses case, one window at a time."""
    means = []
    for row_logits, row_targets in zip(logits, targets):  # (T, V), (T,)
        real = row_targets != -100
        log_p = row_logits[real].double().log_softmax(dim=-1)  # (n_real, V)
        means.append(-log_p[torch.arange(int(real.sum())), row_targets[real]].mean())
    return torch.stack(means).to(logits.dtype)  # (B,)


@exercise(
    "window-losses",
    hint=[
        "run the function above on two windows, the second ending in -100 targets: what does F.cross_entropy put "
        "at a -100 position, and how many positions does mean(dim=1) divide by?",
        "a -100 position gets a loss of 0 but still counts in the mean: divide each window's sum by its OWN number "
        "of real targets",
        "the mask is targets != -100, one count per row; usual mistakes: one count for the whole batch, the mean "
        "over every position, a scalar instead of one loss per window",
    ],
)
def _window_loss_cases() -> list[Case]:
    g = _seeded(3)
    padded = torch.tensor([[1, 2, 0, 3], [4, 1, -100, -100]])
    ragged = torch.tensor([[0, 1, 2, 3, 4, 5], [5, 4, 3, -100, -100, -100], [2, -100, -100, -100, -100, -100]])
    inside = torch.tensor([[-100, 2, 0, -100, 1], [3, -100, -100, 0, 2]])
    inputs = [
        ((torch.randn(2, 4, 5, generator=g), torch.tensor([[1, 2, 0, 3], [4, 1, 1, 0]])), "no padding"),
        ((torch.randn(2, 4, 5, generator=g), padded), "the second window ends in two -100 targets"),
        ((torch.randn(3, 6, 6, generator=g) * 2, ragged), "three windows, 6, 3 and 1 real targets"),
        ((torch.randn(2, 5, 4, generator=g), inside), "-100 targets at the start and in the middle: 3 real each"),
        (
            (torch.randn(2, 3, 4, generator=g, dtype=torch.float64), torch.tensor([[0, 1, -100], [2, 3, 0]])),
            "float64 logits: float64 losses",
        ),
    ]
    return [Case(args, note, _window_mean(*args)) for args, note in inputs]


@exercise(
    "min-training-loss",
    hint=[
        "for one context, the best model predicts each next token with the share of times it followed that context "
        "in this text; what does that give at c = 0?",
        "count N(context, next) over the positions t = c .. n - 1 (context ids[t - c:t], next ids[t]), and "
        "N(context) as the sum of N(context, next) over next; the loss is the mean over those positions of "
        "-ln(N(context, next) / N(context))",
        "usual mistakes: N(context) counted wherever the context occurs (also at the very end, where no token "
        "follows), bits instead of nats, the mean over distinct contexts instead of over positions",
    ],
    bans=("course_lib.ngram.NGramLanguageModel",),
    prediction=True,
)
def _min_training_loss_cases() -> list[Case]:
    return [
        Case(([0, 1, 0, 1], 0), "c = 0: the frequencies of the tokens themselves", math.log(2)),
        Case(([0, 1, 0, 1, 0], 1), "c = 1: every context decides its next token", 0.0),
        Case(([0, 0, 1, 0, 0, 1], 1), "c = 1: after 0, half 0 and half 1", 0.8 * math.log(2)),
        Case(([1, 2, 3, 1, 2, 4], 2), "c = 2: (1, 2) is followed by 3 once and 4 once", math.log(2) / 2),
    ]


@exercise(
    "bits-per-character",
    hint=[
        "a model with longer tokens has fewer of them: which total is the same for two tokenizers of one text?",
        "add up the nats of every token, turn the total into bits (divide by ln 2), and divide by the number of "
        "characters of the whole text",
        "a ratio of two sums, not a mean of ratios; a token that decodes to no characters still costs its nats; "
        "usual mistakes: bits per token, each token's bits per character averaged, multiplying by ln 2",
    ],
)
def _bits_per_character_cases() -> list[Case]:
    ln2 = math.log(2)
    return [
        Case(([ln2, ln2, ln2], ["a", "b", "c"]), "one character a token, 1 bit each", 1.0),
        Case(([2 * ln2, 2 * ln2], ["ab", "c"]), "2 bits a token, 3 characters", 4 / 3),
        Case(([1.0, 3.0, 0.5], ["the", " ", "cat"]), "4.5 nats for 7 characters", 4.5 / ln2 / 7),
        Case(([1.0, 1.0], ["", "ab"]), "a token with no characters still costs", 2 / ln2 / 2),
        Case(
            ([3 * ln2, ln2], ["né", "e"]),
            "characters as len counts them: é is one (two UTF-8 bytes)",
            4 / 3,
            hint="count characters as len does: 'é' is one character, though UTF-8 needs two bytes for it",
        ),
    ]
