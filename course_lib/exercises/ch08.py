"""The exercises of notebook 08, Pretraining.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch08`.
"""

from __future__ import annotations

import torch

from .core import Case, exercise


@exercise(
    "lr-from-zero",
    hint=[
        "three pieces: before warmup_steps, between warmup_steps and total_steps, after; where is step 0?",
        "the warmup is a straight line through (0, 0) and (warmup_steps, max_lr); the cosine's progress runs "
        "from 0 at warmup_steps to 1 at total_steps, and (1 + cos(pi * progress)) / 2 goes from 1 to 0",
        "after total_steps the rate stays at min_lr; usual mistakes: the warmup of the chapter (step + 1), "
        "the cosine counted from step 0, decaying to 0 instead of min_lr",
    ],
    bans=("course_lib.training.lr_at",),
)
def _lr_from_zero_cases() -> list[Case]:
    return [
        Case((0, 1e-3, 1e-4, 10, 110), "step 0: nothing yet", 0.0),
        Case((5, 1e-3, 1e-4, 10, 110), "half way up", 5e-4),
        Case((60, 1e-3, 1e-4, 10, 110), "half way down the cosine", 5.5e-4),
        Case((200, 1e-3, 1e-4, 10, 110), "after the end: min_lr", 1e-4),
        Case((0, 1e-3, 1e-4, 0, 10), "no warmup: the peak at step 0", 1e-3),
        Case((5, 1.0, 0.1, 5, 5), "warmup_steps = total_steps: min_lr from total_steps on", 0.1),
    ]


@exercise(
    "adamw-first-step",
    hint=[
        "on the first step Adam's averages hold one gradient each: what are m-hat and v-hat after bias correction?",
        "after bias correction m-hat is g itself and v-hat is g squared: what is m-hat / (sqrt(v-hat) + eps)?",
        "AdamW's decay is applied to the weight itself, by the factor 1 - lr * weight_decay, besides the Adam "
        "step; a zero gradient gives no Adam step at all",
    ],
    bans=("torch.optim.AdamW", "torch.optim.Adam", "torch.optim.adamw.adamw", "course_lib.training.make_optimizer"),
)
def _adamw_cases() -> list[Case]:
    return [
        Case((torch.tensor([1.0, -2.0]), torch.tensor([0.5, -30.0]), 0.1, 0.0), "no decay: every weight moves lr",
             torch.tensor([0.9, -1.9])),
        Case((torch.tensor([1.0, -2.0]), torch.tensor([1e-3, 4.0]), 0.01, 0.1), "with weight decay",
             torch.tensor([0.989, -2.008])),
        Case((torch.tensor([3.0]), torch.tensor([0.0]), 0.1, 0.5), "a zero gradient: the decay alone",
             torch.tensor([2.85])),
        Case((torch.tensor([1.0]), torch.tensor([1e-8]), 0.1, 0.0), "a gradient as small as eps",
             torch.tensor([0.95])),
        Case((torch.tensor([1.0, -2.0], dtype=torch.float64), torch.tensor([0.5, -30.0], dtype=torch.float64), 0.1,
              0.5), "float64 weights: float64 weights after the step", torch.tensor([0.85, -1.8], dtype=torch.float64)),
    ]  # fmt: skip


@exercise(
    "accumulated-gradient",
    hint=[
        "give it two micro-batches of 3 and 1 examples: whose gradient should count more?",
        "each micro-gradient is a MEAN over its own examples: turn each back into a sum over its examples "
        "before you average over the whole batch",
        "the plain mean of the micro-gradients is right only when every micro-batch has the same size",
    ],
)
def _accumulated_gradient_cases() -> list[Case]:
    return [
        Case(([torch.tensor([1.0]), torch.tensor([3.0])], [1, 1]), "equal sizes: the plain mean", torch.tensor([2.0])),
        Case(([torch.tensor([1.0, 0.0]), torch.tensor([5.0, 4.0])], [3, 1]), "a short last micro-batch",
             torch.tensor([2.0, 1.0])),
        Case(([torch.ones(2, 2), torch.zeros(2, 2), 4 * torch.ones(2, 2)], [2, 4, 2]), "three micro-batches",
             1.25 * torch.ones(2, 2)),
    ]  # fmt: skip


@exercise(
    "smoothed-loss",
    hint=[
        "an average that forgets: each new value gets weight 1 - beta; where does it start, and what does that do?",
        "s starts at 0 and s = beta * s + (1 - beta) * x for each value in turn; at first s is pulled towards 0",
        "divide the t-th average (t = 1, 2, ...) by 1 - beta ** t, as Adam corrects m and v",
    ],
)
def _smoothed_cases() -> list[Case]:
    return [
        Case(([2.0, 2.0, 2.0], 0.9), "a constant: the correction keeps it", [2.0, 2.0, 2.0]),
        Case(([1.0, 3.0], 0.5), "two values", [1.0, 7 / 3]),
        Case(([4.0, 0.0, 4.0], 0.0), "beta 0: the values themselves", [4.0, 0.0, 4.0]),
    ]
