"""The instructors' key to notebook 11, Instruction fine-tuning.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch11`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- answer-loss -----------------------------------------------------------------------------------


@solution("answer-loss")
def answer_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    keep = targets != -100  # (B, T): the targets with a loss (token 0 is one of them)
    logp = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    picked = logp.gather(-1, targets.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    return -(picked * keep).sum() / keep.sum()  # the mean over the kept targets of the whole batch


@hidden("answer-loss")
def _answer_loss(seed: int) -> list[Case]:
    g = _seeded(seed + 21)
    ragged = torch.randint(0, 50, (4, 9), generator=g)
    ragged[0, 5:], ragged[1, :3], ragged[2, 7:] = -100, -100, -100
    zeros = torch.tensor([[0, 0, -100], [-100, 0, -100]])
    return [
        Case((torch.randn(1, 1, 3, generator=g), torch.tensor([[2]])), "one target"),
        Case((torch.randn(4, 9, 50, generator=g), ragged), "padding and prompts in four rows"),
        Case((torch.randn(2, 3, 4, generator=g), zeros), "every kept target is token 0"),
        Case((torch.randn(3, 2, 5, generator=g), torch.tensor([[-100, -100], [1, 4], [-100, 3]])),
             "a row without any loss"),
        Case((torch.randn(2, 4, 8, generator=g) * 100, torch.tensor([[1, 2, 3, -100], [7, 6, 5, 4]])),
             "large logits: a stable log-softmax"),
        Case((torch.randn(2, 3, 6, generator=g, dtype=torch.float64), torch.tensor([[5, -100, 0], [1, 1, -100]])),
             "float64"),
    ]  # fmt: skip


def buggy_answer_loss(logits, targets):  # the function the exercise shows
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1))
    return -picked.mean()


def answer_loss_of_row_means(logits, targets):
    keep = targets != -100
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -((logp * keep).sum(dim=1) / keep.sum(dim=1)).mean()  # short answers weigh as much as long ones


def answer_loss_by_exp(logits, targets):  # log(exp / sum): inf / inf = nan for large logits
    keep = targets != -100
    p = logits.exp() / logits.exp().sum(dim=-1, keepdim=True)
    picked = p.gather(-1, targets.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1).log()
    return -(picked * keep).sum() / keep.sum()


MISTAKES["answer-loss"] = [
    buggy_answer_loss,
    answer_loss_by_exp,
    lambda logits, targets: answer_loss(logits, targets.masked_fill(targets == 0, -100)),  # > 0
    answer_loss_of_row_means,
    lambda logits, targets: answer_loss(logits, targets) * (targets != -100).sum() / targets.numel(),
    lambda logits, targets: F.cross_entropy(logits.flatten(0, 1), targets.flatten()),  # right, but banned
    lambda *args: answer_loss(*args).float(),  # float32 whatever the dtype of the logits
]  # the second: token 0 dropped as if it were padding; the fourth: divided by every position


# -- chat-targets ----------------------------------------------------------------------------------


@solution("chat-targets")
def chat_targets(ids: list[int], assistant_id: int, eot_id: int) -> torch.Tensor:
    in_reply, is_reply = False, []
    for token in ids:
        is_reply.append(in_reply)  # the marker itself is prompt; the closing end-of-text is reply
        if token == assistant_id:
            in_reply = True
        elif token == eot_id:
            in_reply = False
    targets = torch.tensor(ids[1:], dtype=torch.long)  # (T - 1,): target t is token t + 1
    keep = torch.tensor(is_reply[1:], dtype=torch.bool)
    return targets.masked_fill(~keep, -100)


@hidden("chat-targets")
def _chat_targets(seed: int) -> list[Case]:
    U, A, E = 49152, 49153, 2
    return [
        Case(([U, 9, A, E], A, E), "an empty reply: only its end-of-text"),
        Case(([U, 9, 9, 9], A, E), "no reply at all"),
        Case(([A, 7, 8, E], A, E), "the conversation starts with the assistant"),
        Case(([7], A, E), "one token: no target"),
        Case(([U, 4, A, 5, E, U, 6, A, 7, 7, E, U, 8, A, 9], A, E), "three turns, the last cut off"),
        Case(([E, U, 3, A, 4, E, E], A, E), "end-of-text before and after"),
    ]


def chat_targets_shifted_by(ids, assistant_id, eot_id, closing=True, marker=False, last_only=False, shift=1):
    in_reply, is_reply = False, []
    for k, token in enumerate(ids):
        if token == assistant_id:
            is_reply.append(marker or in_reply)
            in_reply = not last_only or assistant_id not in ids[k + 1 :]
        elif token == eot_id:
            is_reply.append(in_reply and closing)
            in_reply = in_reply and last_only
        else:
            is_reply.append(in_reply)
    keep = torch.tensor(is_reply[shift : shift + len(ids) - 1], dtype=torch.bool)
    return torch.tensor(ids[1:], dtype=torch.long).masked_fill(~keep, -100)


def chat_targets_by_index(ids, assistant_id, eot_id):  # each reply from its marker to the next end-of-text
    keep, start = [False] * len(ids), ids.index(assistant_id) + 1  # ValueError: no reply at all
    while True:
        end = ids.index(eot_id, start + 1) if eot_id in ids[start + 1 :] else len(ids) - 1  # skips an empty reply
        keep[start : end + 1] = [True] * (end + 1 - start)
        if assistant_id not in ids[end:]:
            break
        start = ids.index(assistant_id, end) + 1
    return torch.tensor(ids[1:]).masked_fill(~torch.tensor(keep[1:]), -100)


MISTAKES["chat-targets"] = [
    chat_targets_by_index,
    lambda ids, a, e: chat_targets_shifted_by(ids, a, e, closing=False),  # never learns to stop
    lambda ids, a, e: chat_targets_shifted_by(ids, a, e, marker=True),  # the marker as a target
    lambda ids, a, e: chat_targets_shifted_by(ids, a, e, last_only=True),  # the single-turn prompt mask
    lambda ids, a, e: chat_targets_shifted_by(ids, a, e, shift=0),  # the mask of the tokens, not the targets
]


# -- loss-share ------------------------------------------------------------------------------------


@solution("loss-share")
def loss_share(lengths: list[int], prompt_lengths: list[int], mask_instruction: bool) -> float:
    with_loss = sum(n - 1 for n in lengths)  # n tokens, n - 1 targets, the closing end-of-text included
    if mask_instruction:
        with_loss -= sum(p - 1 for p in prompt_lengths)  # a prompt of p tokens hides targets 0 .. p - 2
    return with_loss / (len(lengths) * (max(lengths) - 1))  # padded to the longest row


@hidden("loss-share")
def _loss_share(seed: int) -> list[Case]:
    g = _seeded(seed + 22)
    lengths = torch.randint(20, 128, (16,), generator=g).tolist()
    prompts = [int(n * 0.7) for n in lengths]
    return [
        Case(([9], [4], True), "one row"),
        Case(([9], [4], False), "one row, nothing masked: every target"),
        Case(([2, 2], [1, 1], True), "one-token prompts, one-token answers"),
        Case((lengths, prompts, False), "16 random lengths"),
        Case((lengths, prompts, True), "16 random lengths, prompts masked"),
        Case(([128, 10, 10, 10], [100, 5, 5, 5], True), "one long row pads the others"),
    ]


MISTAKES["loss-share"] = [
    lambda n, p, mask: loss_share(n, [x + 1 for x in p], mask),  # hides p targets, not p - 1
    lambda n, p, mask: sum(n) / (len(n) * max(n)),  # tokens, not targets
    lambda n, p, mask: loss_share(n, p, mask) * (max(n) - 1) / max(n),  # B * L positions
    lambda n, p, mask: loss_share(n, p, True),  # always masked
]


# -- bradley-terry ---------------------------------------------------------------------------------


@solution("bradley-terry")
def bradley_terry(wins: torch.Tensor) -> torch.Tensor:
    wins = wins.double()
    games = wins + wins.T  # (M, M): n_ij, the votes between i and j
    won = wins.sum(dim=1)  # (M,): W_i
    p = torch.ones(len(wins), dtype=torch.float64)
    for _ in range(100_000):  # the MM update (Hunter, 2004): each step raises the likelihood
        new = won / (games / (p[:, None] + p[None, :])).sum(dim=1)
        new = new / new.prod() ** (1 / len(new))  # the scale is free: fix the geometric mean at 1
        if (new.log() - p.log()).abs().max() < 1e-12:
            break
        p = new
    s = new.log()
    return (s - s.mean()).float()


@hidden("bradley-terry")
def _bradley_terry(seed: int) -> list[Case]:
    g = _seeded(seed + 23)
    counts = torch.randint(1, 30, (5, 5), generator=g).float().fill_diagonal_(0)
    return [
        Case((torch.tensor([[0.0, 1.0], [99.0, 0.0]]),), "B won 99 of 100"),
        Case((torch.tensor([[0.0, 5.0, 5.0], [5.0, 0.0, 5.0], [5.0, 5.0, 0.0]]),), "three equals"),
        Case((counts,), "five models, every pair met"),
        Case((torch.tensor([[0.0, 2.5, 0.0], [1.5, 0.0, 3.0], [1.0, 1.0, 0.0]]),), "ties counted half"),
        Case(
            (torch.tensor([[0, 8, 0, 1], [2, 0, 6, 0], [0, 4, 0, 7], [3, 0, 3, 0]], dtype=torch.float64),),
            "four models in a ring, float64",
        ),
    ]


def bradley_terry_by_ascent(wins, steps=50, lr=0.01):
    s = torch.zeros(len(wins), requires_grad=True)
    for _ in range(steps):
        likelihood = (wins * F.logsigmoid(s[:, None] - s[None, :])).sum()
        (grad,) = torch.autograd.grad(likelihood, s)
        s = (s + lr * grad).detach().requires_grad_()
    return (s - s.mean()).detach()


def bradley_terry_from_win_rates(wins):
    rate = wins.sum(1) / (wins + wins.T).sum(1)
    s = torch.log(rate / (1 - rate))
    return s - s.mean()


MISTAKES["bradley-terry"] = [
    bradley_terry_from_win_rates,  # each model's overall win rate, as if against an average opponent
    lambda wins: bradley_terry(wins.T),  # wins read transposed: the order reversed
    bradley_terry_by_ascent,  # too few steps: not converged
    lambda wins: (lambda s: s - s[0])(bradley_terry(wins)),  # the first pinned at 0, not centred
]
