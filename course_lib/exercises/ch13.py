"""The exercises of notebook 13, Learning from preferences and rewards.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch13`.
"""

from __future__ import annotations

import torch

from .core import Case, _seeded, exercise


@exercise(
    "zero-contrast-share",
    hint=[
        "take one problem that one sampled answer gets right with probability p: what is the chance that all "
        "G of its answers are right? that all G are wrong?",
        "the G answers are independent draws: all right with probability p ** G, all wrong with (1 - p) ** G, "
        "and a group has no contrast in either case",
        "add the two for each problem, then average over the problems; usual mistakes: only the all-wrong "
        "groups, the formula applied to the mean rate instead of to each problem",
    ],
    prediction=True,
)
def _zero_contrast_cases() -> list[Case]:
    return [
        Case(([0.5], 2), "one problem, right half the time, groups of 2", 0.5),
        Case(([0.5], 8), "the same problem, groups of 8", 2 / 2**8),
        Case(([0.0, 1.0], 8), "never right, always right: no contrast either way", 1.0),
        Case(([0.1, 0.9, 0.5], 4), "three problems, groups of 4", (0.1**4 + 0.9**4 + 0.9**4 + 0.1**4 + 2 / 16) / 3),
    ]


@exercise(
    "answer-logprob",
    hint=[
        "try V = 2, T = 3, prompt_len = 1 and work the answer out by hand: which row of logits holds the "
        "model's probabilities for ids[1]?",
        "logits[t] is computed from ids[: t + 1], so it predicts the NEXT token, ids[t + 1]: the answer token "
        "ids[t] is scored by row t - 1",
        "the rows prompt_len - 1 to T - 2 against the tokens prompt_len to T - 1, log_softmax over the "
        "vocabulary, summed; usual mistakes: the rows of the answer itself, the prompt summed too, a mean",
    ],
)
def _answer_logprob_cases() -> list[Case]:
    g = _seeded(131)

    def answer(logits: torch.Tensor, ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
        total = torch.zeros((), dtype=logits.dtype)
        for t in range(prompt_len, len(ids)):  # each answer token, scored by the row before it
            total = total + logits[t - 1].log_softmax(dim=-1)[ids[t]]
        return total

    small = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    inputs = [
        ((small, torch.tensor([1, 0, 1]), 1), "V = 2, T = 3: a prompt of one token, an answer of two"),
        ((torch.randn(6, 5, generator=g), torch.randint(0, 5, (6,), generator=g), 4), "a prompt of 4 tokens"),
        ((torch.randn(9, 13, generator=g) * 3, torch.randint(0, 13, (9,), generator=g), 2), "T = 9, V = 13"),
        ((small.double(), torch.tensor([0, 1, 0]), 2), "float64 logits: a float64 log-probability"),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


@exercise(
    "ipo-loss",
    hint=[
        "compute h for each pair first: the chosen answer's log-ratio to the reference minus the rejected one's",
        "h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected), with no beta in it; beta only sets "
        "the target margin 1 / (2 * beta)",
        "each pair's loss is (h - 1 / (2 * beta)) ** 2, and the loss is their mean, a 0-dim tensor; usual "
        "mistakes: beta * h inside the square, the sum over pairs, the reference left out",
    ],
)
def _ipo_cases() -> list[Case]:
    g = _seeded(132)
    ref_c, ref_r = -torch.rand(4, generator=g) * 10, -torch.rand(4, generator=g) * 10
    pol_c, pol_r = -torch.rand(4, generator=g) * 10, -torch.rand(4, generator=g) * 10
    return [
        Case((ref_c, ref_r, ref_c, ref_r, 0.1), "the policy is the reference: h = 0, loss 5 ** 2", torch.tensor(25.0)),
        Case((torch.tensor([-1.0]), torch.tensor([-9.0]), torch.tensor([-4.0]), torch.tensor([-4.0]), 0.5),
             "one pair, h = 8, beta 0.5", torch.tensor(49.0)),
        Case((torch.tensor([-2.0, -3.0]), torch.tensor([-7.0, -3.0]), torch.tensor([-2.0, -2.0]),
              torch.tensor([-2.0, -3.0]), 0.1), "two pairs: h = 5 and h = -1", torch.tensor(18.0)),
        Case((pol_c, pol_r, ref_c, ref_r, 0.25), "four pairs, beta 0.25",
             (((pol_c - ref_c) - (pol_r - ref_r) - 2.0) ** 2).mean()),
        Case(tuple(torch.tensor([x], dtype=torch.float64) for x in (-1.0, -9.0, -4.0, -4.0)) + (0.5,),
             "float64 log-probabilities: a float64 loss", torch.tensor(49.0, dtype=torch.float64)),
    ]  # fmt: skip


@exercise(
    "addition-checker",
    hint=[
        "compute the right answer from the prompt first, as a string; then ask what may differ from it",
        "the prompt looks like '37+45=': split it at '+' and '=', add, and reverse the sum's digits with [::-1]",
        "compare the whole answer, stripped of surrounding spaces, as a string: int() would accept '028' and "
        "'+28', 'in' would accept '2828'",
    ],
    bans=("course_lib.tasks.addition_reward", "course_lib.tasks.addition_answer"),
)
def _checker_cases() -> list[Case]:
    return [
        Case(("37+45=", "28"), "right: 82 reversed", 1.0),
        Case(("37+45=", " 28\n"), "right, with spaces and a newline around it", 1.0),
        Case(("37+45=", "82"), "the digits in the usual order: wrong", 0.0),
        Case(("37+45=", "2828"), "the right digits twice: a hedge, wrong", 0.0),
        Case(("5+5=", "01"), "right: 10 reversed, the zero first", 1.0),
        Case(("37+45=", "028"), "a leading zero: wrong", 0.0),
        Case(("37+45=", "+28"), "a sign: wrong", 0.0),
        Case(("99+99=", "891"), "right: three digits", 1.0),
        Case(("3+4=", "seven"), "not a number: wrong", 0.0),
    ]
