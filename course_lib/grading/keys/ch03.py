"""The instructors' key to notebook 03, The MLP language model.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch03`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import math
from collections import Counter

import torch
import torch.nn.functional as F

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- label-smoothing -------------------------------------------------------------------------------


@solution("label-smoothing")
def smoothed_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, eps: float) -> torch.Tensor:
    log_p = logits - torch.logsumexp(logits, dim=-1, keepdim=True)  # (N, V): finite for large logits
    nll = -log_p[torch.arange(len(targets)), targets]  # (N,): the true class
    uniform = -log_p.mean(dim=-1)  # (N,): eps is spread over all V classes, the true one included
    return ((1 - eps) * nll + eps * uniform).mean()


@hidden("label-smoothing")
def _label_smoothing(seed: int) -> list[Case]:
    g = _seeded(seed + 6)
    return [
        Case((torch.randn(64, 100, generator=g) * 3, torch.randint(0, 100, (64,), generator=g), 0.1), "64 x 100"),
        Case((torch.tensor([[1e4, -1e4, 0.0]]), torch.tensor([1]), 0.1), "huge logits, the least likely target"),
        Case((torch.randn(3, 5, generator=g), torch.tensor([4, 4, 4]), 1.0), "eps = 1: the uniform target alone"),
        Case((torch.randn(3, 1, generator=g), torch.tensor([0, 0, 0]), 0.5), "one class: loss 0"),
        Case((torch.randn(4, 6, generator=g, dtype=torch.float64), torch.tensor([5, 1, 0, 2]), 0.05), "float64"),
    ]


def smoothed_other_classes(logits, targets, eps):  # eps / (V - 1) on every other class, none on the true one
    V = logits.shape[-1]
    q = torch.full_like(logits, eps / (V - 1)).scatter(-1, targets[:, None], 1 - eps)  # (N, V)
    return -(q * logits.log_softmax(-1)).sum(-1).mean()


def smoothed_via_softmax(logits, targets, eps):  # log of a softmax: log 0 = -inf for large logits
    q = torch.full_like(logits, eps / logits.shape[-1])
    q[torch.arange(len(targets)), targets] += 1 - eps
    return -(q * torch.softmax(logits, -1).log()).sum(-1).mean()


MISTAKES["label-smoothing"] = [
    lambda z, y, eps: smoothed_cross_entropy(z, y, 0.0),  # no smoothing at all
    smoothed_other_classes,
    smoothed_via_softmax,
    lambda z, y, eps: smoothed_cross_entropy(z, y, eps) * len(y),  # the sum over rows
    lambda z, y, eps: F.cross_entropy(z, y, label_smoothing=eps),  # right, but banned
    lambda *args: smoothed_cross_entropy(*args).float(),  # float32 whatever the dtype of the logits
]


# -- window-losses ---------------------------------------------------------------------------------


@solution("window-losses")
def window_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T): 0 at -100
    real = (targets != -100).sum(dim=1)  # (B,): each window's own number of targets
    return losses.sum(dim=1) / real


@hidden("window-losses")
def _window_losses(seed: int) -> list[Case]:
    g = _seeded(seed + 7)
    targets = torch.randint(0, 20, (8, 16), generator=g)
    for b, n in enumerate([16, 1, 5, 9, 16, 2, 15, 3]):
        targets[b, n:] = -100
    inner = torch.tensor([[3, -100, 4, -100]])  # -100 inside a window, not only at its end
    return [
        Case((torch.randn(8, 16, 20, generator=g), targets), "eight windows of random lengths"),
        Case((torch.randn(1, 4, 6, generator=g), inner), "-100 inside the window"),
        Case((torch.randn(1, 1, 3, generator=g), torch.tensor([[2]])), "one window of one token"),
        Case((torch.randn(2, 3, 4, generator=g, dtype=torch.float64), torch.tensor([[0, 1, -100], [2, 3, 0]])),
             "float64"),
    ]  # fmt: skip


def window_losses_as_shown(logits, targets):  # the function the exercise shows
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    return losses.mean(dim=1)


def window_losses_one_count(logits, targets):  # every window divided by the whole batch's count
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return losses.sum(dim=1) / (targets != -100).sum()


def window_losses_up_to_the_first_pad(logits, targets):  # as if every -100 sat at the end of its window
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    real = targets != -100
    first_pad = (~real).int().argmax(dim=1)
    n = torch.where(real.all(dim=1), torch.full_like(first_pad, targets.shape[1]), first_pad)
    return losses.sum(dim=1) / n


MISTAKES["window-losses"] = [
    window_losses_as_shown,
    window_losses_one_count,
    lambda z, y: F.cross_entropy(z.flatten(0, 1), y.flatten()),  # one number for the batch
    lambda z, y: window_losses(z, y).float(),  # float32 whatever the logits' dtype
    window_losses_up_to_the_first_pad,
]


# -- min-training-loss -----------------------------------------------------------------------------


@solution("min-training-loss")
def min_training_loss(ids: list[int], c: int) -> float:
    pairs = Counter((tuple(ids[t - c : t]), ids[t]) for t in range(c, len(ids)))  # N(context, next)
    contexts = Counter()  # N(context): only where a next token follows
    for (context, _), n in pairs.items():
        contexts[context] += n
    total = sum(n * -math.log(n / contexts[context]) for (context, _), n in pairs.items())
    return total / (len(ids) - c)  # the mean over positions, in nats


@hidden("min-training-loss")
def _min_training_loss(seed: int) -> list[Case]:
    g = _seeded(seed + 8)
    ids = torch.randint(0, 4, (300,), generator=g).tolist()
    return [
        Case((ids, 0), "300 random ids, c = 0"),
        Case((ids, 2), "300 random ids, c = 2"),
        Case((ids, 6), "300 random ids, c = 6: most contexts seen once"),
        Case(([5, 5, 5, 5], 1), "one token repeated: 0"),
        Case(([7, 8], 1), "one position"),
        Case(([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], 0), "ids that do not start at 0"),
    ]


def min_loss_contexts_anywhere(ids, c):  # N(context) also counts a context with no token after it
    from collections import Counter

    pairs = Counter((tuple(ids[t - c : t]), ids[t]) for t in range(c, len(ids)))
    contexts = Counter(tuple(ids[t - c : t]) for t in range(c, len(ids) + 1))
    return sum(n * -math.log(n / contexts[ctx]) for (ctx, _), n in pairs.items()) / (len(ids) - c)


def min_loss_per_context(ids, c):  # each distinct context's entropy, averaged without weights
    from collections import Counter

    pairs = Counter((tuple(ids[t - c : t]), ids[t]) for t in range(c, len(ids)))
    by_context = {}
    for (ctx, _), n in pairs.items():
        by_context.setdefault(ctx, []).append(n)
    entropies = [sum(-n / sum(ns) * math.log(n / sum(ns)) for n in ns) for ns in by_context.values()]
    return sum(entropies) / len(entropies)


def min_loss_by_ngram(ids, c):  # right (the n-gram without smoothing is that model), but banned
    from course_lib.ngram import NGramLanguageModel

    return NGramLanguageModel(order=c + 1, vocab_size=max(ids) + 1, alpha=0).fit(ids).cross_entropy(ids)


MISTAKES["min-training-loss"] = [
    min_loss_contexts_anywhere,
    lambda ids, c: min_training_loss(ids, c) / math.log(2),  # bits
    min_loss_per_context,
    min_loss_by_ngram,
]


# -- bits-per-character ----------------------------------------------------------------------------


@solution("bits-per-character")
def bits_per_character(token_losses: list[float], token_texts: list[str]) -> float:
    bits = sum(token_losses) / math.log(2)  # the whole text's code length
    return bits / sum(len(t) for t in token_texts)  # a ratio of sums: every character counts once


@hidden("bits-per-character")
def _bits_per_character(seed: int) -> list[Case]:
    g = _seeded(seed + 9)
    losses = (torch.rand(50, generator=g) * 4).tolist()
    texts = ["x" * int(n) for n in torch.randint(0, 6, (50,), generator=g)]
    texts[0] = "ok"  # at least one character in all
    return [
        Case((losses, texts), "50 tokens of 0 to 5 characters"),
        Case(([0.0, 0.0], ["a", "b"]), "a perfect model: 0 bits"),
        Case(([5.0], ["héllo"]), "one token, one non-ASCII character"),
        Case(([math.log(2) * 8] * 4, ["abcd"] * 4), "8 bits for 4 characters, four times"),
    ]


MISTAKES["bits-per-character"] = [
    lambda losses, texts: sum(losses) / math.log(2) / len(losses),  # bits per token
    lambda losses, texts: sum(x / math.log(2) / len(t) for x, t in zip(losses, texts)) / len(texts),  # mean of ratios
    lambda losses, texts: sum(losses) * math.log(2) / sum(len(t) for t in texts),  # times ln 2
    lambda losses, texts: sum(losses) / math.log(2) / sum(len(t.encode()) for t in texts),  # UTF-8 bytes
]
