"""The exercises of notebook 00, Language models and PyTorch.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch00`.
"""

from __future__ import annotations

import torch

from .core import Case, exercise


def _dense(shape: tuple[int, ...], entries: dict[tuple[int, ...], float], dtype=torch.long) -> torch.Tensor:
    """A tensor of zeros with a few entries set: an expected answer written out by hand."""
    out = torch.zeros(shape, dtype=dtype)
    for index, value in entries.items():
        out[index] = value
    return out


@exercise(
    "trigram-counts",
    hint=[
        "a trigram is three tokens in a row; how many start positions does a list of n tokens have?",
        "three shifted views of the list walked together give every (a, b, c); the table has vocab_size "
        "entries on each axis, even for ids that never occur",
        "usual mistakes: the indices in another order, the vocabulary taken from the data, the last trigram lost",
    ],
)
def _trigram_cases() -> list[Case]:
    return [
        Case(([0, 1, 1, 2], 3), "two trigrams", _dense((3, 3, 3), {(0, 1, 1): 1, (1, 1, 2): 1})),
        Case(([2, 2, 2, 2], 3), "a repeated token", _dense((3, 3, 3), {(2, 2, 2): 2})),
        Case(([0, 1], 4), "two tokens: no trigram", torch.zeros(4, 4, 4, dtype=torch.long)),
        Case(([], 2), "an empty list", torch.zeros(2, 2, 2, dtype=torch.long)),
        Case(([1, 0, 1, 0, 1], 2), "alternating", _dense((2, 2, 2), {(1, 0, 1): 2, (0, 1, 0): 1})),
    ]


@exercise(
    "interpolated-bigram",
    hint=[
        "build two tables from the counts: P(b | a) from each row, P(b) from the whole table; then mix them",
        "P(b | a) divides each row by its own total; P(b) counts how often b came SECOND, so it sums a column, "
        "over the total of the whole table",
        "a row a that never came first has no P(b | a): use P(b) there (torch.where on the row sums); usual "
        "mistakes: P(b) from the rows (counts.sum(1)), lam on the wrong table, dividing by 0",
    ],
)
def _interpolated_cases() -> list[Case]:
    counts = torch.tensor([[0, 2], [1, 1]])  # pairs: (0, 1) twice, (1, 0) once, (1, 1) once
    unseen = torch.tensor([[1, 1, 0], [0, 0, 2], [0, 0, 0]])  # token 2 never comes first
    return [
        Case((counts, 1.0), "lam = 1: the bigram alone", torch.tensor([[0.0, 1.0], [0.5, 0.5]])),
        Case((counts, 0.0), "lam = 0: the unigram of the next token", torch.tensor([[0.25, 0.75], [0.25, 0.75]])),
        Case((counts, 0.5), "half and half", torch.tensor([[0.125, 0.875], [0.375, 0.625]])),
        Case((unseen, 0.8), "a row never seen: the unigram", torch.tensor([[0.45, 0.45, 0.1], [0.05, 0.05, 0.9],
                                                                           [0.25, 0.25, 0.5]])),
    ]  # fmt: skip


@exercise(
    "accumulated-grad",
    hint=[
        "what does backward() do to a .grad that already holds a number: replace it, or something else?",
        "backward() does not replace x.grad: it adds this call's dy/dx to what is there, and nothing "
        "clears it between the calls",
    ],
    bans=("torch.Tensor.backward", "torch.autograd.backward", "torch.autograd.grad"),
    prediction=True,
)
def _accumulated_cases() -> list[Case]:
    return [
        Case((2.0, 1), "x = 2, once", 10.0),
        Case((2.0, 3), "x = 2, three times", 30.0),
        Case((0.0, 2), "x = 0, twice: the slope is negative there", -4.0),
        Case((0.5, 4), "x = 0.5, four times", -5.0),
    ]


@exercise(
    "logsumexp",
    reference=lambda x: torch.logsumexp(x, dim=-1),
    hint=[
        "the function is right for one row; feed it a batch whose rows are far apart and look at the small row",
        "x.max() is the maximum of the WHOLE tensor: in a row far below it every exp(x - m) underflows to 0, "
        "and log 0 = -inf; what maximum does each row need?",
        "then subtract it with keepdim and add it back after the log, squeezing the last dimension",
        "a row of -inf only has the maximum -inf, and -inf - (-inf) is nan: subtract 0 from such a row "
        "instead (torch.where); its answer is log 0 = -inf",
    ],
    bans=("torch.logsumexp", "torch.Tensor.logsumexp", "torch.special.logsumexp"),
)
def _logsumexp_cases() -> list[Case]:
    return [
        Case((torch.tensor([0.0, 0.0]),), "two zeros: log 2"),
        Case((torch.tensor([1000.0, 1000.0]),), "large values",
             hint="exp(1000) is far above float32's largest value (about 3.4e38): inf. log(sum(exp(x))) is "
             "m + log(sum(exp(x - m))) for any m: which m keeps every exp(x - m) at most 1?"),
        Case((torch.tensor([[1.0, 2.0], [500.0, 0.0]]),), "a batch of rows far apart"),
        Case((torch.tensor([[-1000.0, -1000.0], [3.0, 4.0]]),), "a very negative row beside a small one"),
        Case((torch.tensor([[0.0, float("-inf")], [float("-inf"), float("-inf")]]),),
             "-inf is probability 0; a row of -inf only: log 0 = -inf", hint=3),
        Case((torch.tensor([[0.5, 1.5], [300.0, -2.0]], dtype=torch.float64),), "float64 stays float64"),
        Case((torch.arange(24.0).reshape(2, 3, 4).transpose(0, 1),), "a non-contiguous (3, 2, 4): over the last dim"),
    ]  # fmt: skip
