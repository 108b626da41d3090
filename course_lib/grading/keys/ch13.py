"""The instructors' key to notebook 13, Learning from preferences and rewards.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch13`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- zero-contrast-share ---------------------------------------------------------------------------


@solution("zero-contrast-share")
def zero_contrast_share(pass_rates: list[float], G: int) -> float:
    return sum(p**G + (1 - p) ** G for p in pass_rates) / len(pass_rates)  # all right, or all wrong


@hidden("zero-contrast-share")
def _zero_contrast(seed: int) -> list[Case]:
    g = _seeded(seed + 20)
    return [
        Case(([0.3], 1), "groups of one answer: never any contrast"),
        Case(([0.177] * 10, 8), "ten problems at the pilot's sampled pass@1"),
        Case((torch.rand(519, generator=g).tolist(), 8), "519 problems, rates anywhere in [0, 1]"),
        Case(([0.0, 0.0, 0.5], 16), "two problems never solved, groups of 16"),
        Case(([0.99, 0.01], 64), "nearly always and nearly never right, groups of 64"),
    ]


MISTAKES["zero-contrast-share"] = [
    lambda rates, G: sum((1 - p) ** G for p in rates) / len(rates),  # only the all-wrong groups
    lambda rates, G: sum(p**G for p in rates) / len(rates),  # only the all-right groups
    lambda rates, G: (sum(rates) / len(rates)) ** G + (1 - sum(rates) / len(rates)) ** G,  # on the mean rate
    lambda rates, G: sum(1 - p**G - (1 - p) ** G for p in rates) / len(rates),  # the share WITH contrast
]


# -- answer-logprob --------------------------------------------------------------------------------


@solution("answer-logprob")
def answer_logprob(logits: torch.Tensor, ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=-1)  # (T, V): row t predicts ids[t + 1]
    answer = ids[prompt_len:]  # (T - prompt_len,)
    return logp[prompt_len - 1 : -1].gather(-1, answer[:, None]).sum()  # each token by the row before it


@hidden("answer-logprob")
def _answer_logprob(seed: int) -> list[Case]:
    g = _seeded(seed + 21)
    return [
        Case((torch.randn(2, 3, generator=g), torch.tensor([2, 0]), 1), "T = 2: one prompt token, one answer token"),
        Case((torch.randn(10, 7, generator=g), torch.randint(0, 7, (10,), generator=g), 9), "an answer of one token"),
        Case((torch.randn(5, 4, generator=g) * 1e4, torch.randint(0, 4, (5,), generator=g), 2),
             "huge logits: log(softmax) would give -inf"),
        Case((torch.randn(8, 6, generator=g, dtype=torch.float64), torch.randint(0, 6, (8,), generator=g), 3),
             "float64"),
        Case((torch.randn(20, 1000, generator=g), torch.randint(0, 1000, (20,), generator=g), 1),
             "V = 1,000, every token after the first"),
    ]  # fmt: skip


def buggy_answer_logprob(logits, ids, prompt_len):  # the function the exercise shows
    logp = F.log_softmax(logits, dim=-1)
    answer = ids[prompt_len:]
    return logp[prompt_len:].gather(-1, answer[:, None]).sum()


MISTAKES["answer-logprob"] = [
    buggy_answer_logprob,
    lambda logits, ids, n: F.log_softmax(logits, -1)[:-1].gather(-1, ids[1:, None]).sum(),  # the prompt too
    lambda logits, ids, n: F.log_softmax(logits, -1)[n - 1 : -1].gather(-1, ids[n:, None]).mean(),  # a mean
    lambda logits, ids, n: logits[n - 1 : -1].gather(-1, ids[n:, None]).sum(),  # logits, not log-probabilities
    lambda *args: answer_logprob(*args).float(),  # float32 whatever the dtype of the logits
]


# -- ipo-loss --------------------------------------------------------------------------------------


@solution("ipo-loss")
def ipo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta: float) -> torch.Tensor:
    h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)  # (N,): the log-ratio margin
    return ((h - 1 / (2 * beta)) ** 2).mean()  # smallest at the margin 1 / (2 beta)


@hidden("ipo-loss")
def _ipo(seed: int) -> list[Case]:
    g = _seeded(seed + 22)

    def logps(n, scale=10.0):
        return -torch.rand(n, generator=g) * scale

    ref_c, ref_r = logps(16), logps(16)
    return [
        Case((logps(16), logps(16), ref_c, ref_r, 0.1), "16 pairs, beta 0.1"),
        Case((ref_c + 2.5, ref_r - 2.5, ref_c, ref_r, 0.1), "every pair exactly at the margin 5: loss 0"),
        Case((ref_c + 100, ref_r - 100, ref_c, ref_r, 1.0), "margins far beyond the target: a large loss"),
        Case((torch.tensor([-3.0, -8.0]), torch.tensor([-5.0, -2.0]), torch.tensor([-4.0, -4.0]),
              torch.tensor([-4.0, -6.0]), 2.0), "two pairs, beta 2"),
        Case((logps(8, 50).double(), logps(8, 50).double(), logps(8, 50).double(), logps(8, 50).double(), 0.05),
             "float64, beta 0.05"),
    ]  # fmt: skip


def ipo(pc, pr, rc, rr, beta, scale=1.0, target=None):
    h = scale * ((pc - rc) - (pr - rr))
    return ((h - (1 / (2 * beta) if target is None else target)) ** 2).mean()


MISTAKES["ipo-loss"] = [
    lambda pc, pr, rc, rr, beta: ipo(pc, pr, rc, rr, beta, scale=beta),  # beta * h inside the square
    lambda pc, pr, rc, rr, beta: ((((pc - rc) - (pr - rr)) - 1 / (2 * beta)) ** 2).sum(),  # summed over pairs
    lambda pc, pr, rc, rr, beta: ipo(pc, pr, torch.zeros_like(rc), torch.zeros_like(rr), beta),  # no reference
    lambda pc, pr, rc, rr, beta: ipo(pc, pr, rc, rr, beta, target=1 / beta),  # the target margin 1 / beta
    lambda pc, pr, rc, rr, beta: -F.logsigmoid(beta * ((pc - rc) - (pr - rr))).mean(),  # plain DPO
    lambda *args: ipo_loss(*args).float(),  # float32 whatever the dtype of the log-probabilities
]


# -- addition-checker ------------------------------------------------------------------------------


@solution("addition-checker")
def addition_checker(prompt: str, answer: str) -> float:
    a, b = prompt.rstrip("=").split("+")
    return 1.0 if answer.strip() == str(int(a) + int(b))[::-1] else 0.0  # the exact string, reversed


@hidden("addition-checker")
def _addition_checker(seed: int) -> list[Case]:
    return [
        Case(("0+0=", "0"), "zero"),
        Case(("50+50=", "001"), "100 reversed: two zeros first"),
        Case(("50+50=", "1"), "100 reversed, its zeros dropped: wrong"),
        Case(("12+34=", "64\n"), "right, a newline after it"),
        Case(("12+34=", "6 4"), "a space inside: wrong"),
        Case(("12+34=", "46"), "the usual order: wrong"),
        Case(("12+34=", "6464"), "a hedge: wrong"),
        Case(("12+34=", "064"), "a leading zero: wrong"),
        Case(("12+34=", "-64"), "a sign: wrong"),
        Case(("12+34=", ""), "nothing: wrong"),
        Case(("99+1=", "001"), "a carry through every place"),
    ]


def _reversed_sum(prompt):
    a, b = prompt.rstrip("=").split("+")
    return str(int(a) + int(b))[::-1]


MISTAKES["addition-checker"] = [
    lambda p, a: 1.0 if _reversed_sum(p) in a else 0.0,  # loose: the digits anywhere
    lambda p, a: 1.0 if a.strip().isdigit() and int(a) == int(_reversed_sum(p)) else 0.0,  # int(): '028' passes
    lambda p, a: 1.0 if a == _reversed_sum(p) else 0.0,  # no strip: ' 28\n' fails
    lambda p, a: 1.0 if a.strip() == _reversed_sum(p)[::-1] else 0.0,  # the usual order
]
