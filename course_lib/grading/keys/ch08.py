"""The instructors' key to notebook 08, Pretraining.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch08`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import math

import torch

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- lr-from-zero ----------------------------------------------------------------------------------


@solution("lr-from-zero")
def lr_from_zero(step: int, max_lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return max_lr * step / warmup_steps  # 0 at step 0
    if step >= total_steps:
        return min_lr  # the cosine's end, also when warmup_steps == total_steps leaves it no steps
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2


@hidden("lr-from-zero")
def _lr_from_zero(seed: int) -> list[Case]:
    return [
        Case((9, 1e-3, 1e-4, 10, 110), "the last warmup step: 9/10 of the peak"),
        Case((10, 1e-3, 1e-4, 10, 110), "the end of the warmup: the peak"),
        Case((110, 1e-3, 1e-4, 10, 110), "the last step: min_lr"),
        Case((25, 6e-4, 0.0, 0, 100), "no warmup, a quarter of the way"),
        Case((0, 6e-4, 6e-5, 0, 100), "no warmup: the peak at step 0"),
        Case((333, 3e-4, 3e-5, 100, 1000), "a longer run"),
        Case((1, 1.0, 0.5, 4, 8), "round numbers"),
        Case((20, 3e-4, 3e-5, 20, 20), "warmup_steps = total_steps: min_lr at total_steps"),
    ]


def cosine_from_step_zero(s, hi, lo, w, t):
    if s < w:
        return hi * s / w
    return lo + (hi - lo) * (1 + math.cos(math.pi * min(s, t) / t)) / 2


def lr_past_the_end(s, hi, lo, w, t):  # min_lr only after total_steps: 0 / 0 when warmup_steps == total_steps
    if s < w:
        return hi * s / w
    if s > t:
        return lo
    return lo + (hi - lo) * (1 + math.cos(math.pi * (s - w) / (t - w))) / 2


MISTAKES["lr-from-zero"] = [
    lambda s, hi, lo, w, t: hi * (s + 1) / w if s < w else lr_from_zero(s, hi, lo, w, t),  # the chapter's warmup
    lambda s, hi, lo, w, t: lr_from_zero(s, hi, 0.0, w, t),  # decays to 0
    cosine_from_step_zero,
    lambda s, hi, lo, w, t: hi * s / w if s <= w else lr_from_zero(s, hi, lo, w, t),  # 0 / 0 with no warmup
    lr_past_the_end,
]


# -- adamw-first-step ------------------------------------------------------------------------------


@solution("adamw-first-step")
def adamw_first_step(w: torch.Tensor, g: torch.Tensor, lr: float, weight_decay: float) -> torch.Tensor:
    m_hat, v_hat = g, g**2  # one gradient in each average, bias-corrected
    return w * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + 1e-8)  # decay first, then about lr


@hidden("adamw-first-step")
def _adamw(seed: int) -> list[Case]:
    g = _seeded(seed + 13)
    return [
        Case((torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g) * 1e3, 1e-3, 0.1), "huge gradients"),
        Case((torch.randn(5, generator=g), torch.randn(5, generator=g) * 1e-6, 1e-2, 0.0), "tiny gradients"),
        Case((torch.zeros(3), torch.randn(3, generator=g), 0.5, 0.5), "zero weights: no decay to see"),
        Case((torch.full((3,), 10.0), torch.randn(3, generator=g) * 0.1, 0.1, 0.5), "large weights, strong decay"),
        Case((torch.randn(2, 2, generator=g, dtype=torch.float64), torch.randn(2, 2, generator=g, dtype=torch.float64),
              3e-4, 0.01), "float64"),
    ]  # fmt: skip


def adamw_by_torch(w, g, lr, weight_decay):
    p = torch.nn.Parameter(w.clone())
    p.grad = g.clone()
    torch.optim.AdamW([p], lr=lr, weight_decay=weight_decay).step()
    return p.detach()


MISTAKES["adamw-first-step"] = [
    lambda w, g, lr, wd: w * (1 - lr * wd) - lr * g,  # SGD: the step scales with the gradient
    lambda w, g, lr, wd: w - lr * (g + wd * w) / ((g + wd * w).abs() + 1e-8),  # L2 in the gradient: Adam, not AdamW
    lambda w, g, lr, wd: w - lr * wd * w - lr * g / (g.abs() + 1e-8) * (1 - 0.9),  # m without bias correction
    adamw_by_torch,  # right, but banned
    lambda *args: adamw_first_step(*args).float(),  # float32 whatever the dtype of w
]


# -- accumulated-gradient --------------------------------------------------------------------------


@solution("accumulated-gradient")
def accumulated_gradient(micro_grads: list[torch.Tensor], sizes: list[int]) -> torch.Tensor:
    return sum(n * g for n, g in zip(sizes, micro_grads)) / sum(sizes)  # each mean weighted by its examples


@hidden("accumulated-gradient")
def _accumulated_gradient(seed: int) -> list[Case]:
    g = _seeded(seed + 14)
    return [
        Case(([torch.tensor([7.0])], [5]), "one micro-batch"),
        Case(([torch.randn(3, generator=g) for _ in range(4)], [8, 8, 8, 8]), "four equal micro-batches"),
        Case(([torch.randn(2, 3, generator=g) for _ in range(3)], [16, 16, 5]), "a short last one"),
        Case(([torch.randn(4, generator=g), torch.randn(4, generator=g)], [1, 100]), "sizes far apart"),
    ]


MISTAKES["accumulated-gradient"] = [
    lambda grads, sizes: sum(grads) / len(grads),  # the plain mean: the function the exercise shows
    lambda grads, sizes: sum(grads),  # the sum: k times too large
    lambda grads, sizes: sum(n * g for n, g in zip(sizes, grads)) / len(grads),  # weighted, divided by k
]


# -- smoothed-loss ---------------------------------------------------------------------------------


@solution("smoothed-loss")
def smoothed_loss(values: list[float], beta: float) -> list[float]:
    s, out = 0.0, []
    for t, x in enumerate(values, start=1):
        s = beta * s + (1 - beta) * x
        out.append(s / (1 - beta**t))  # the bias correction: s started at 0
    return out


@hidden("smoothed-loss")
def _smoothed(seed: int) -> list[Case]:
    g = _seeded(seed + 15)
    return [
        Case(([5.0], 0.99), "one value: itself"),
        Case(([], 0.9), "no values"),
        Case(((torch.linspace(4, 2, 50) + torch.randn(50, generator=g) * 0.3).tolist(), 0.9), "a noisy falling curve"),
        Case(([1.0, 0.0] * 10, 0.5), "alternating"),
        Case(([3.0, 1.0, 2.0], 0.999), "beta close to 1"),
    ]


def smoothed_without_correction(values, beta):
    s, out = 0.0, []
    for x in values:
        s = beta * s + (1 - beta) * x
        out.append(s)
    return out


MISTAKES["smoothed-loss"] = [
    smoothed_without_correction,
    lambda values, beta: smoothed_loss(values, 1 - beta),  # beta on the new value
    lambda values, beta: [sum(values[: t + 1]) / (t + 1) for t in range(len(values))],  # a running mean
]
