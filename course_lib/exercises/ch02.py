"""The exercises of notebook 02, Embeddings and training data.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch02`.
"""

from __future__ import annotations

import torch

from .core import Case, exercise


@exercise(
    "padded-windows",
    hint=[
        "how many windows does it take so that every token after the first is a target exactly once?",
        "window i starts at i * context_length; its targets are its inputs shifted by one; count the windows "
        "from the number of targets, len(ids) - 1, and let the last one come up short",
        "pad a short window on the RIGHT: inputs with pad_id, targets with -100 (cross-entropy skips -100); "
        "usual mistakes: the short window dropped, targets padded with pad_id",
    ],
)
def _padded_window_cases() -> list[Case]:
    return [
        Case(([1, 2, 3, 4, 5], 2, 0), "an exact fit: two windows",
             (torch.tensor([[1, 2], [3, 4]]), torch.tensor([[2, 3], [4, 5]]))),
        Case((list(range(10)), 4, 99), "one short window at the end",
             (torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 99, 99]]),
              torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, -100, -100, -100]]))),
        Case(([7, 8], 3, 0), "fewer tokens than the context",
             (torch.tensor([[7, 8, 0]]), torch.tensor([[8, -100, -100]]))),
    ]  # fmt: skip


@exercise(
    "embedding-grad",
    hint=[
        "what is the gradient of x ** 2 for one looked-up row, and what happens when a row is looked up twice?",
        "a row looked up n times gets n times the gradient of one lookup; a row never looked up gets 0",
        "the gradient of (row ** 2).sum() with respect to the row is 2 * row; count how often each id occurs "
        "(every id of the vocabulary, seen or not)",
    ],
    bans=("torch.Tensor.backward", "torch.autograd.backward", "torch.autograd.grad"),
    prediction=True,
)
def _embedding_grad_cases() -> list[Case]:
    w = torch.arange(6.0).view(3, 2)  # rows [0, 1], [2, 3], [4, 5]
    return [
        Case((w, torch.tensor([1])), "one lookup", torch.tensor([[0.0, 0.0], [4.0, 6.0], [0.0, 0.0]])),
        Case((w, torch.tensor([2, 0, 2])), "row 2 twice", torch.tensor([[0.0, 2.0], [0.0, 0.0], [16.0, 20.0]])),
        Case((w, torch.tensor([[1, 1], [1, 2]])), "a (2, 2) batch of ids",
             torch.tensor([[0.0, 0.0], [12.0, 18.0], [8.0, 10.0]])),
    ]  # fmt: skip


def _windows(start: int, count: int, step: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of consecutive integers: the expected answer of a split of torch.arange."""
    starts = torch.arange(count) * step + start  # (N,)
    x = starts[:, None] + torch.arange(context)  # (N, T)
    return x, x + 1


@exercise(
    "split-windows",
    hint=[
        "with stride 2 and context 4, take one validation window: are its tokens inside some training window?",
        "a random split of overlapping windows puts the same tokens on both sides; what could be split before "
        "any window is cut?",
        "each part's windows start at 0, stride, 2 * stride ... while c + 1 tokens fit; a part too short "
        "for one window gives tensors of shape (0, context_length)",
    ],
)
def _split_window_cases() -> list[Case]:
    return [
        Case((torch.arange(20), 4, 2, 0.25), "stride 2: the random split leaks",
             (*_windows(0, 6, 2, 4), *_windows(15, 1, 2, 4))),
        Case((torch.arange(30), 3, 3, 0.2), "stride = context",
             (*_windows(0, 7, 3, 3), *_windows(24, 1, 3, 3))),
        Case((torch.arange(12), 4, 1, 0.25), "validation too short for one window",
             (*_windows(0, 5, 1, 4), torch.zeros(0, 4, dtype=torch.long), torch.zeros(0, 4, dtype=torch.long))),
    ]  # fmt: skip


@exercise(
    "nearest-tokens",
    hint=[
        "cosine similarity compares directions, not lengths: normalise the rows first",
        "normalise every row to length 1; then one matrix-vector product gives every cosine at once; take the "
        "k largest, leaving token itself out",
        "usual mistakes: token itself first in the list, a plain dot product (long rows win), the k least similar",
    ],
)
def _nearest_cases() -> list[Case]:
    w = torch.tensor([[1.0, 0.0], [10.0, 10.0], [0.0, 1.0], [-1.0, 0.0], [0.9, 0.1]])
    return [
        Case((w, 0, 2), "direction, not length: row 1 is long but 45 degrees away", [4, 1]),
        Case((w, 2, 1), "the closest direction to (0, 1)", [1]),
        Case((w, 3, 4), "every other row, most similar first", [2, 1, 4, 0]),
    ]
