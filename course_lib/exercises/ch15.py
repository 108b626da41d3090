"""The exercises of notebook 15, What the model learned.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch15`.
"""

from __future__ import annotations

import torch

from ..attention import causal_mask, softmax
from .core import Case, _seeded, exercise


def _attention_stack(seed: int, L: int, H: int, T: int) -> list[torch.Tensor]:
    """L causal attention tensors (1, H, T, T) with random rows: a case no pattern answers by luck."""
    g = _seeded(seed)
    mask = causal_mask(T)
    return [softmax(torch.randn(1, H, T, T, generator=g).masked_fill(~mask, float("-inf"))) for _ in range(L)]


def _duplicate_scores(attention: list[torch.Tensor], period: int) -> torch.Tensor:
    """The expected answers of "duplicate-token-scores", worked out position by position."""
    T = attention[0].shape[-1]
    rows = []
    for a in attention:  # (B, H, T, T)
        weights = [a[:, :, t, t - period] for t in range(T - period, T)]  # each (B, H)
        rows.append(torch.stack(weights).mean(dim=(0, 1)))  # (H,)
    return torch.stack(rows)  # (L, H)


@exercise(
    "uniform-previous-token-score",
    hint=[
        "at position t a uniform head gives each of the t + 1 positions it may see the same weight: how much "
        "lands on t - 1?",
        "the score is the mean of those weights over t = 1, ..., T - 1 (position 0 has no previous token): "
        "T - 1 numbers 1/2, 1/3, ..., 1/T",
        "usual mistakes: 1/T everywhere, position 0 counted (weight 1 on nothing), 1/t instead of 1/(t + 1)",
    ],
    prediction=True,
)
def _uniform_score_cases() -> list[Case]:
    def exact(T: int) -> float:
        return sum(1 / (t + 1) for t in range(1, T)) / (T - 1)

    return [
        Case((2,), "two tokens: one position with a previous token", 0.5),
        Case((3,), "three tokens", exact(3)),
        Case((64,), "the toy model's 64 tokens", exact(64)),
        Case((128,), "the course GPT's 128 tokens", exact(128)),
    ]


@exercise(
    "duplicate-token-scores",
    hint=[
        "which key does a duplicate-token head look at from query t: the earlier copy of the token at t, or "
        "the token after it?",
        "the second copy is the last `period` positions; from each query t there, which key holds the same "
        "token? Average that weight over the batch and those queries: (H,) per layer, stacked to (L, H)",
        "usual mistakes: t - period + 1 (that is the induction score), queries from the first copy too, the "
        "mean over heads",
    ],
)
def _duplicate_cases() -> list[Case]:
    one = torch.zeros(1, 1, 4, 4)  # tokens a b a b: position 2 looks at 0, position 3 at 1
    one[0, 0, 0, 0] = one[0, 0, 1, 0] = one[0, 0, 2, 0] = one[0, 0, 3, 1] = 1.0
    random = _attention_stack(151, 2, 3, 10)  # 2 tokens first, then a block of 4 twice
    bos = _attention_stack(152, 1, 2, 7)  # a first token, then a block of 3 twice
    return [
        Case(([one], 2), "one head that always looks at the earlier copy: 1", torch.ones(1, 1)),
        Case(([one.flip(-1).tril()], 2), "a head that never does: 0", torch.zeros(1, 1)),
        Case((random, 4), "two layers of three heads, random weights", _duplicate_scores(random, 4)),
        Case((bos, 3), "a first token before the two copies", _duplicate_scores(bos, 3)),
        Case(([one.double()], 2), "float64 weights: a float64 score", torch.ones(1, 1, dtype=torch.float64)),
    ]  # fmt: skip


def _mean_ablated(z: torch.Tensor, head: int) -> torch.Tensor:
    """The expected answers of "mean-ablate"."""
    out = z.clone()
    out[:, :, head] = z[:, :, head].mean(dim=(0, 1))  # (D,): one mean per dimension
    return out


@exercise(
    "mean-ablate",
    hint=[
        "how many numbers does z[:, :, head].mean() return, and how many should the head's mean have?",
        "the mean keeps the head's dimension D: average over the batch and the positions only, "
        "z[:, :, head].mean(dim=(0, 1)), shape (D,), which broadcasts over (B, T, D)",
        "usual mistakes: one number for all of D, the mean over the batch only (one per position), the "
        "other heads changed too",
    ],
)
def _mean_ablate_cases() -> list[Case]:
    g = _seeded(153)
    small = torch.arange(24.0).view(2, 2, 2, 3)  # (B=2, T=2, H=2, D=3)
    z, wide = torch.randn(3, 5, 4, 8, generator=g), torch.randn(1, 6, 2, 4, generator=g)
    return [
        Case((small, 0), "B = 2, T = 2, H = 2, D = 3: head 0", _mean_ablated(small, 0)),
        Case((small.clone(), 1), "the same z, head 1", _mean_ablated(small, 1)),
        Case((z, 2), "random z (3, 5, 4, 8), head 2", _mean_ablated(z, 2)),
        Case((wide, 1), "one sequence: the mean over its positions", _mean_ablated(wide, 1)),
        Case((small.double(), 1), "a float64 z: a float64 result", _mean_ablated(small.double(), 1)),
    ]


@exercise(
    "settled-fraction",
    hint=[
        "first decide, for each prompt and each layer, whether the answer is within the top k there; then: "
        "which layers count for a prompt that is in the top k early, drops out, and comes back?",
        "the answer's rank is how many logits are strictly larger than its own (gather it per prompt); a layer "
        "counts only if the answer stays within the top k from there to the last layer: an 'and' over the "
        "later layers, read from the last layer backwards",
        "then average over the prompts, not the layers; usual mistakes: every layer where the answer is in the "
        "top k counted, ties counted against the answer, a count instead of a fraction",
    ],
)
def _settled_cases() -> list[Case]:
    rises = torch.tensor([[3.0, 1.0, 0.0], [2.0, 1.5, 0.0], [0.0, 2.0, 1.0], [0.0, 3.0, 1.0]])  # (4 layers, V = 3)
    dips = torch.tensor([[0.0, 2.0, 1.0], [3.0, 1.0, 2.0], [0.0, 2.0, 1.0], [0.0, 2.0, 1.0]])
    return [
        Case((rises[None], torch.tensor([1]), 1), "one prompt, top from layer 2 on", torch.tensor([0.0, 0, 1, 1])),
        Case((rises[None], torch.tensor([1]), 2), "the same within the top 2: from layer 0", torch.ones(4)),
        Case((torch.stack([rises, dips, dips]), torch.tensor([1, 1, 0]), 1),
             "three prompts: one settles at 2, one is top at 0, lost at 1, top from 2; one never",
             torch.tensor([0.0, 0, 2 / 3, 2 / 3])),
        Case((torch.tensor([[[1.0, 1.0], [2.0, 2.0]]]), torch.tensor([1]), 1), "a tie counts for the answer",
             torch.ones(2)),
    ]  # fmt: skip
