"""The exercises of notebook 11, Instruction fine-tuning.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch11`.
"""

from __future__ import annotations

import math

import torch

from .core import Case, _seeded, exercise


@exercise(
    "answer-loss",
    hint=[
        "give it targets with -100 in them: what does clamp(min=0) turn them into, and does the mean count them?",
        "-100 marks a target without a loss: leave it out of the sum AND out of the count; the mean is over the "
        "kept targets of the whole batch (not a mean of each row's mean)",
        "keep = targets != -100 (not targets > 0: token 0 is a token like any other); gather the log-softmax at "
        "the targets with the -100s replaced by any valid id, then -(picked * keep).sum() / keep.sum()",
    ],
    bans=(
        "torch.nn.functional.cross_entropy",
        "torch.nn.functional.nll_loss",
        "torch.nn.CrossEntropyLoss",
        "torch.nn.NLLLoss",
        "course_lib.instruct.instruction_loss",
    ),
)
def _answer_loss_cases() -> list[Case]:
    g = _seeded(21)

    def answer(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits.double(), dim=-1)  # (B, T, V)
        keep = targets != -100  # (B, T)
        picked = logp[keep, targets[keep]]  # (kept,)
        return (-picked.mean()).to(logits.dtype)

    targets_1 = torch.tensor([[1, 2, 3], [4, 0, 2]])
    targets_2 = torch.tensor([[3, 1, 4, 1], [5, 2, -100, -100]])
    targets_3 = torch.tensor([[-100, 0, 2, -100, -100], [-100, -100, 0, 0, 5]])
    inputs = [
        ((torch.randn(2, 3, 6, generator=g), targets_1), "no -100 at all: every target counts"),
        ((torch.randn(2, 4, 6, generator=g), targets_2), "the second row padded: two targets without a loss"),
        ((torch.randn(2, 5, 6, generator=g), targets_3), "prompts masked too; token 0 is a real target"),
        (
            (torch.tensor([[[100.0, 0.0, -100.0], [0.0, 200.0, 0.0]]]), torch.tensor([[2, 1]])),
            "large logits: -log p(2) = 200 in the first position, about 0 in the second",
        ),
    ]
    cases = [Case(args, note, answer(*args)) for args, note in inputs]
    cases[-1].hint = (
        "exp(200) overflows: log(exp / sum) gives inf / inf = nan; torch.log_softmax (or the logits minus their "
        "logsumexp) stays finite"
    )
    double = (torch.randn(2, 4, 6, generator=g, dtype=torch.float64), targets_2)
    return [*cases, Case(double, "float64 logits: a float64 loss", answer(*double))]


@exercise(
    "chat-targets",
    hint=[
        "walk through ids once and keep a flag: am I inside a reply? Which token switches it on, which one off?",
        "a reply starts AFTER the assistant marker (the marker itself is prompt) and ends WITH the end-of-text "
        "that closes it (a target: it teaches the model to stop); a reply cut off at the end still counts",
        "then shift: target t is ids[t + 1], so keep ids[t + 1] where token t + 1 is part of a reply, -100 "
        "elsewhere, a long tensor of len(ids) - 1; usual mistakes: the closing end-of-text masked, the marker "
        "kept, only the last reply kept (the single-turn prompt mask)",
    ],
)
def _chat_target_cases() -> list[Case]:
    U, A, E = 100, 101, 0  # <|user|>, <|assistant|>, <|endoftext|>
    x = -100
    return [
        Case(([U, 5, 6, A, 7, 8, E], A, E), "one turn", torch.tensor([x, x, x, 7, 8, E])),
        Case(([U, 5, A, 7, E, U, 6, 6, A, 8, 9, E], A, E), "two turns: both replies",
             torch.tensor([x, x, 7, E, x, x, x, x, 8, 9, E])),
        Case(([U, 5, A, 7, 8], A, E), "a reply cut off before its end-of-text", torch.tensor([x, x, 7, 8])),
        Case(([U, 5, 6, E], A, E), "no reply at all: no target", torch.tensor([x, x, x])),
        Case(([U, 5, A, E, U, 6, A, 7, E], A, E), "an empty reply, then one of one token",
             torch.tensor([x, x, E, x, x, x, 7, E])),
    ]  # fmt: skip


@exercise(
    "loss-share",
    hint=[
        "a row of n tokens gives how many targets? And a prompt of p tokens hides how many of them?",
        "n tokens give n - 1 targets (the shift), and every one of them up to the closing end-of-text has a loss; "
        "masking a prompt of p tokens hides the targets 0 .. p - 2, so p - 1 of them",
        "the batch is padded to the longest row L, so it holds B * (L - 1) target positions; the share is the "
        "targets with a loss over that, a float",
    ],
    bans=("course_lib.instruct.collate",),
    prediction=True,
)
def _loss_share_cases() -> list[Case]:
    return [
        Case(([6, 4], [3, 2], False), "two rows, nothing masked", 0.8),
        Case(([6, 4], [3, 2], True), "the same rows, prompts masked", 0.5),
        Case(([4, 4, 4], [3, 1, 2], True), "no padding; a one-token prompt hides nothing", 2 / 3),
        Case(([12, 2], [1, 1], False), "one long row beside a short one", 12 / 22),
    ]


@exercise(
    "bradley-terry",
    hint=[
        "start with two models: which gap s_A - s_B makes A's wins most likely? Set the derivative of "
        "wins_A * log sigma(s) + wins_B * log sigma(-s) to zero",
        "for M models maximise sum over i, j of wins[i, j] * log sigma(s_i - s_j): gradient ascent (autograd, "
        "thousands of steps) or the MM update p_i = W_i / sum_j n_ij / (p_i + p_j) with p = exp(s), "
        "W_i the wins of i and n_ij the games between i and j",
        "iterate until nothing moves by 1e-7, then subtract the mean; usual mistakes: strengths from each "
        "model's overall win rate, wins read transposed, too few steps",
    ],
    prediction=True,
)
def _bradley_terry_cases() -> list[Case]:
    log3 = math.log(3)
    return [
        Case((torch.tensor([[0.0, 30.0], [10.0, 0.0]]),), "A beat B 30 times in 40",
             torch.tensor([log3 / 2, -log3 / 2])),
        Case((torch.tensor([[0.0, 12.0], [12.0, 0.0]]),), "even: both 0", torch.tensor([0.0, 0.0])),
        Case((torch.tensor([[0.0, 30.0, 0.0], [10.0, 0.0, 30.0], [0.0, 10.0, 0.0]]),),
             "a chain: A and C never met", torch.tensor([log3, 0.0, -log3])),
    ]  # fmt: skip
