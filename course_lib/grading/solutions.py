"""Reference solutions for instructors: one plain solution per exercise, written as a student would.

``python3 course.py solutions`` lists the exercises, ``python3 course.py solutions NAME...`` prints
the solutions of those (``python -m course_lib.grading.solutions``). The checker does not use this file:
an exercise is answered by its cases' expected values or by a tested course_lib function
(:mod:`course_lib.exercises`), so a course handed to a graded class may leave this file out, as it
may ``hidden_cases.py``. The demo set of hidden cases answers its cases with these solutions where an
exercise has no course_lib reference; ``tests/test_exercises.py`` checks each one with the checker.

An exercise without a solution here (one added later) is shown by its reference, when it has one.
"""

from __future__ import annotations

import inspect
import sys
from collections import Counter
from collections.abc import Callable

import torch

SOLUTIONS: dict[str, Callable] = {}  # exercise name -> a correct solution, in the course's order


def solution(name: str) -> Callable[[Callable], Callable]:
    """Register the solution of exercise ``name``."""

    def register(fn: Callable) -> Callable:
        if name in SOLUTIONS:
            raise ValueError(f"the solution of {name!r} is defined twice")
        SOLUTIONS[name] = fn
        return fn

    return register


# == 00 · Language models and PyTorch ======================================================


@solution("trigram-counts")
def trigram_counts(ids: list[int], vocab_size: int) -> torch.Tensor:
    counts = torch.zeros(vocab_size, vocab_size, vocab_size, dtype=torch.long)  # (V, V, V)
    for a, b, c in zip(ids, ids[1:], ids[2:]):
        counts[a, b, c] += 1
    return counts


@solution("interpolated-bigram")
def interpolated_bigram(counts: torch.Tensor, lam: float) -> torch.Tensor:
    counts = counts.double()
    rows = counts.sum(dim=1, keepdim=True)  # (V, 1): how often each token came first
    unigram = counts.sum(dim=0) / counts.sum()  # (V,): how often each token came second
    bigram = torch.where(rows > 0, counts / rows.clamp_min(1), unigram)  # (V, V): unseen rows, the unigram
    return (lam * bigram + (1 - lam) * unigram).float()  # (V, V)


@solution("accumulated-grad")
def accumulated_grad(x: float, times: int) -> float:
    return times * (2 * x + 3)  # backward() adds to .grad: without zero_grad() the gradients pile up


@solution("logsumexp")
def logsumexp(x: torch.Tensor) -> torch.Tensor:
    m = x.max(dim=-1, keepdim=True).values  # (..., 1): each row's own maximum, not the whole tensor's
    return (m + (x - m).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)


# == 01 · Tokenization =====================================================================


@solution("chunk-pair-counts")
def chunk_pair_counts(chunks: dict[tuple[int, ...], int]) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for chunk, n in chunks.items():
        for pair in zip(chunk, chunk[1:]):  # pairs inside the chunk only, overlapping
            counts[pair] = counts.get(pair, 0) + n
    return counts


@solution("encode-with-special")
def encode_with_special(text: str, special_id: int) -> list[int]:
    ids: list[int] = []
    for k, piece in enumerate(text.split("<|endoftext|>")):
        if k > 0:
            ids.append(special_id)  # one marker between two pieces
        ids += list(piece.encode("utf-8"))
    return ids


@solution("longest-match")
def longest_match(text: str, vocab: set[str]) -> list[str]:
    tokens, i = [], 0
    while i < len(text):
        length = next((n for n in range(len(text) - i, 0, -1) if text[i : i + n] in vocab), 1)
        tokens.append(text[i : i + length])
        i += length
    return tokens


@solution("unk-rate")
def unk_rate(train_words: list[str], val_words: list[str], min_count: int) -> float:
    counts = Counter(train_words)
    vocab = {w for w, n in counts.items() if n >= min_count}
    return sum(w not in vocab for w in val_words) / len(val_words)


# == 15 · What the model learned ===========================================================


@solution("uniform-previous-token-score")
def uniform_previous_token_score(T: int) -> float:
    return sum(1 / (t + 1) for t in range(1, T)) / (T - 1)  # weight 1/(t + 1) on t - 1, for t = 1 .. T - 1


@solution("duplicate-token-scores")
def duplicate_token_scores(attention: list[torch.Tensor], period: int) -> torch.Tensor:
    T = attention[0].shape[-1]
    queries = torch.arange(T - period, T)  # the second copy
    return torch.stack([a[:, :, queries, queries - period].mean(dim=(0, 2)) for a in attention])  # (L, H)


@solution("mean-ablate")
def mean_ablate(z: torch.Tensor, head: int) -> torch.Tensor:
    out = z.clone()
    out[:, :, head] = z[:, :, head].mean(dim=(0, 1))  # (D,): over the batch and the positions
    return out


@solution("settles-at")
def settles_at(lens: torch.Tensor, answer: int, k: int) -> int | None:
    ranks = (lens > lens[:, answer : answer + 1]).sum(dim=1)  # (L + 1,): logits strictly above the answer's
    layer = None
    for at in range(len(ranks) - 1, -1, -1):
        if ranks[at] >= k:
            break
        layer = at
    return layer


def show(name: str) -> str:
    """The source of ``name``'s solution, else of its reference, as an instructor reads it."""
    from course_lib.exercises import EXERCISES

    if name not in EXERCISES:
        raise KeyError(f"no exercise named {name!r}; known exercises: {', '.join(EXERCISES)}")
    if name in SOLUTIONS:
        return inspect.getsource(SOLUTIONS[name])
    reference = EXERCISES[name].reference
    text = f"# no solution written out; the reference that answers its cases:\n{inspect.getsource(reference)}"
    module = sys.modules[reference.__module__]
    for called in reference.__code__.co_names:  # the course_lib functions it calls, in full
        fn = getattr(module, called, None)
        if inspect.isfunction(fn) and fn.__module__.startswith("course_lib"):
            text += f"\n# {fn.__module__}.{called}:\n{inspect.getsource(fn)}"
    return text


def main(argv: list[str]) -> int:
    from course_lib.exercises import EXERCISES

    if not argv:
        print("exercises (python3 course.py solutions NAME... prints their solutions):")
        print("\n".join(f"  {name}" for name in EXERCISES))
        return 0
    for name in argv:
        print(f"# == {name} ==\n{show(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
