"""The exercises of notebook 09, Generating text.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch09`.
"""

from __future__ import annotations

import torch

from .core import Case, _seeded, exercise


def _example_logits() -> tuple[torch.Tensor, torch.Tensor]:
    """One readable row of 5 logits, and a batch of 3 random rows; shared by the filters' cases."""
    g = _seeded(11)
    return torch.tensor([[2.0, -1.0, 0.5, 3.0, 1.0]]), torch.randn(3, 10, generator=g) * 2


def _nucleus(logits: torch.Tensor, p: float, keep: int) -> torch.Tensor:
    """The expected answer of a top-p case: the nucleus, or the ``keep`` most likely tokens if more."""
    probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)  # (B, V)
    rank = torch.arange(logits.shape[-1])  # (V,)
    drop_sorted = (probs.cumsum(-1) - probs >= p) & (rank >= keep)  # (B, V)
    return logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))


@exercise(
    "top-p-min-keep",
    hint=[
        "start from the nucleus of the chapter; when is it smaller than min_tokens_to_keep?",
        "in sorted order a token stays if the probability before it is below p OR its rank (0, 1, ...) is "
        "below min_tokens_to_keep; the rest become -inf",
        "decide on the sorted row, then carry the decision back to vocabulary order; usual mistakes: the "
        "nucleus counted with the token's own probability, the minimum ignored or off by one",
    ],
    bans=("course_lib.generation.filter_logits",),
)
def _top_p_min_keep_cases() -> list[Case]:
    small, batch = _example_logits()
    inputs = [
        ((small, 0.5, 1), "min 1: the nucleus alone"),
        ((small, 0.5, 3), "a small nucleus, three tokens kept"),
        ((small, 0.99, 2), "a nucleus larger than the minimum"),
        ((batch, 0.3, 2), "a batch of 3 rows"),
    ]
    return [Case(args, note, _nucleus(*args)) for args, note in inputs]


@exercise(
    "min-p",
    hint=[
        "the threshold moves with the most likely token: compute it per row",
        "work with probabilities, not logits, and compare each with min_p times its own row's largest",
        "-inf for the others, the kept logits unchanged; usual mistakes: a threshold on the logits themselves, "
        "one maximum for the whole batch",
    ],
)
def _min_p_cases() -> list[Case]:
    small, batch = _example_logits()

    def answer(logits: torch.Tensor, min_p: float) -> torch.Tensor:
        probs = torch.softmax(logits, dim=-1)
        return logits.masked_fill(probs < min_p * probs.amax(-1, keepdim=True), float("-inf"))

    flat_and_sharp = torch.tensor([[0.0, 0.0, 0.0, 0.0], [4.0, 0.0, -1.0, 2.0]])  # row maxima 0.25 and 0.86
    inputs = [
        ((small, 0.1), "min_p 0.1"),
        ((small, 0.5), "min_p 0.5"),
        ((batch, 0.2), "a batch of 3 rows"),
        ((flat_and_sharp, 0.5), "a flat row beside a sharp one: each row keeps its own most likely tokens"),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


@exercise(
    "repetition-penalty",
    hint=[
        "which logits and which previous lists did you try it on? Vary their signs, and repeat a token",
        "dividing a negative logit by 1.3 RAISES it: a negative logit must be multiplied by the penalty",
        "each distinct previous token is penalised once, however often it occurred (a set)",
    ],
)
def _penalty_cases() -> list[Case]:
    logits = torch.tensor([2.0, -1.0, 0.5, 3.0])
    return [
        Case((logits, [3], 2.0), "one positive logit", torch.tensor([2.0, -1.0, 0.5, 1.5])),
        Case((logits, [1, 2], 2.0), "a negative logit goes down", torch.tensor([2.0, -2.0, 0.25, 3.0])),
        Case((logits, [0, 0, 0], 2.0), "a token seen three times: once", torch.tensor([1.0, -1.0, 0.5, 3.0])),
        Case((logits.double(), [0, 1], 2.0), "float64 logits stay float64",
             torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)),
    ]  # fmt: skip


@exercise(
    "distinct-n",
    hint=[
        "list every run of n consecutive tokens; how many are there, and how many differ?",
        "the n-grams overlap: one starts at every position that leaves room for n tokens; a set counts the "
        "distinct ones",
        "the answer is len(set) / number of n-grams, a float",
    ],
)
def _distinct_cases() -> list[Case]:
    return [
        Case(([1, 2, 3, 4], 2), "no repetition", 1.0),
        Case(([5, 5, 5, 5], 1), "one token four times", 0.25),
        Case(([1, 2, 1, 2, 1], 2), "a two-token loop", 0.5),
        Case(([1, 2, 2, 1, 1, 2], 2), "overlapping bigrams: (1, 2) twice", 0.8),
    ]
