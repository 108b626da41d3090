"""Every checker accepts the reference solution and rejects the usual mistakes."""

import pytest
import torch
import torch.nn.functional as F

from course_lib.exercises import EXERCISES, check


# -- correct solutions, written the way a student would -------------------------------------


def bigram_counts(ids, vocab_size):
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.long)
    for a, b in zip(ids, ids[1:]):
        counts[a, b] += 1
    return counts


def logsumexp(x):
    m = x.max(dim=-1, keepdim=True).values
    return (m + (x - m).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)


def pair_counts(ids):
    counts = {}
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i < len(ids) - 1 and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def sliding_windows(ids, context_length, stride):
    ids = torch.tensor(ids)
    starts = range(0, len(ids) - context_length, stride)
    x = torch.stack([ids[s : s + context_length] for s in starts])
    y = torch.stack([ids[s + 1 : s + context_length + 1] for s in starts])
    return x, y


def one_hot_embedding(ids, weight):
    return F.one_hot(ids, weight.shape[0]).float() @ weight


SOLUTIONS = {
    "bigram-counts": bigram_counts,
    "logsumexp": logsumexp,
    "pair-counts": pair_counts,
    "merge": merge,
    "sliding-windows": sliding_windows,
    "one-hot-embedding": one_hot_embedding,
}


# -- typical mistakes ---------------------------------------------------------------------------

MISTAKES = {
    "bigram-counts": [
        lambda ids, v: bigram_counts(ids, v).T,  # rows and columns swapped
        lambda ids, v: bigram_counts(ids, max(ids) + 1),  # vocabulary from the data
        lambda ids, v: bigram_counts(ids[:-1], v),  # drops the last pair
    ],
    "logsumexp": [
        lambda x: x.exp().sum(dim=-1).log(),  # overflows to inf
        lambda x: x.max(dim=-1).values,  # the max alone
        lambda x: (x.exp().sum(dim=-1) + 1e-9).log(),  # -inf for very negative x
    ],
    "pair-counts": [
        lambda ids: pair_counts(ids[::2]),
        lambda ids: {p: 1 for p in zip(ids, ids[1:])},  # presence, not counts
        lambda ids: pair_counts(list(zip(ids[::2], ids[1::2]))),  # non-overlapping only
    ],
    "merge": [
        lambda ids, pair, new: [new if i < len(ids) - 1 and (ids[i], ids[i + 1]) == pair else t for i, t in enumerate(ids)],
        lambda ids, pair, new: [t for t in ids if t not in pair] + [new],
        lambda ids, pair, new: list(ids),
    ],
    "sliding-windows": [
        lambda ids, c, s: (sliding_windows(ids, c, s)[0], sliding_windows(ids, c, s)[0]),  # target not shifted
        lambda ids, c, s: sliding_windows(ids, c, 1),  # ignores the stride
        lambda ids, c, s: tuple(t[:-1] for t in sliding_windows(ids, c, s)),  # drops the last window
    ],
    "one-hot-embedding": [
        lambda ids, w: w[:, ids].T,  # picks columns instead of rows
        lambda ids, w: w[: ids.numel()].reshape(*ids.shape, -1),  # rows in order, not by id
        lambda ids, w: F.one_hot(ids, w.shape[0]).float(),  # forgot the matmul
    ],
}


def test_every_exercise_has_a_solution_and_mistakes():
    assert set(SOLUTIONS) == set(EXERCISES) == set(MISTAKES)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_checker_accepts_a_correct_solution(name):
    result = check(name, SOLUTIONS[name])
    assert result, repr(result)
    assert repr(result).startswith(f"✅ {name}: all ")


@pytest.mark.parametrize("name, k", [(n, k) for n, ms in MISTAKES.items() for k in range(len(ms))])
def test_checker_rejects_typical_mistakes(name, k):
    result = check(name, MISTAKES[name][k])
    assert not result
    message = repr(result)
    assert message.startswith(f"❌ {name}: case ")
    for part in ("input:", "expected:", "got:", "hint:"):
        assert part in message


def test_exceptions_in_student_code_are_explained():
    def broken(ids):
        raise NotImplementedError("todo")

    message = repr(check("pair-counts", broken))
    assert "raised NotImplementedError: todo" in message and "case 1 of" in message


def test_unknown_exercise_lists_the_known_ones():
    with pytest.raises(KeyError, match="known exercises: bigram-counts"):
        check("no-such-exercise", lambda: None)
