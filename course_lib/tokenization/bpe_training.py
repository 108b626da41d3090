"""BPE training: the two pure functions everything is built from (:func:`get_pair_counts`,
:func:`merge_pair`), the textbook loop (:func:`train_bpe_naive`) and the fast one (:func:`train_bpe`),
which learn the same merges.

Training never looks across a pre-split chunk (GPT-2's pattern by default) or a special token, and
breaks ties between equally frequent pairs by the smallest ids, so the merges do not depend on the
order of the text's chunks.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence

from .bpe import GPT2_SPLIT_PATTERN, BPETokenizer, _pretokenize


def get_pair_counts(ids: Sequence[int], counts: Counter | None = None) -> Counter:
    """Count adjacent pairs: ``[1, 2, 3, 1, 2]`` -> ``{(1, 2): 2, (2, 3): 1, (3, 1): 1}``."""
    counts = Counter() if counts is None else counts
    counts.update(zip(ids, ids[1:]))
    return counts


def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace each non-overlapping occurrence of ``pair``, left to right, by ``new_id``.

    ``merge_pair([5, 6, 6, 7, 6, 6], (6, 6), 99)`` -> ``[5, 99, 7, 99]``.
    """
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _num_merges(vocab_size: int, special_tokens: Sequence[str]) -> int:
    n_special = len(special_tokens)
    if vocab_size < 256 + n_special:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: a byte-level BPE needs the 256 byte tokens"
            f" plus {n_special} special token(s), so at least {256 + n_special}"
        )
    return vocab_size - 256 - n_special


def _training_chunks(text: str, pattern: str | None, special_tokens: Sequence[str]) -> list[bytes]:
    chunks = _pretokenize(text, pattern, special_tokens)
    if not chunks:
        raise ValueError("there is no text to train on: the training text is empty (or holds only special tokens)")
    return chunks


def _best_pair(counts: Counter, vocab: list[bytes], known: set[bytes]) -> tuple[int, int] | None:
    """Most frequent pair; ties go to the smallest ids, so training is order-independent.

    A pair whose concatenation is already a token is never merged again (it would add a
    duplicate entry to the vocabulary).
    """
    candidates = [p for p, c in counts.items() if c > 0 and vocab[p[0]] + vocab[p[1]] not in known]
    if not candidates:
        return None
    return max(candidates, key=lambda p: (counts[p], -p[0], -p[1]))


def train_bpe_naive(
    text: str,
    vocab_size: int,
    pattern: str | None = GPT2_SPLIT_PATTERN,
    special_tokens: Sequence[str] = (),
) -> BPETokenizer:
    """The textbook loop: count every pair, merge the most frequent one, repeat.

    Clear but slow: each merge recounts the whole corpus. :func:`train_bpe` learns the same
    merges by updating only the counts a merge changes.
    """
    num_merges = _num_merges(vocab_size, special_tokens)
    chunks = [list(c) for c in _training_chunks(text, pattern, special_tokens)]
    vocab = [bytes([b]) for b in range(256)]
    known = set(vocab)
    merges: list[tuple[int, int]] = []
    for _ in range(num_merges):
        counts = Counter()
        for ids in chunks:
            get_pair_counts(ids, counts)
        pair = _best_pair(counts, vocab, known)
        if pair is None:
            break  # every chunk is a single token: nothing left to merge
        new_id = len(vocab)
        chunks = [merge_pair(ids, pair, new_id) for ids in chunks]
        merges.append(pair)
        vocab.append(vocab[pair[0]] + vocab[pair[1]])
        known.add(vocab[-1])
    return _trained(merges, pattern, special_tokens)


def train_bpe(
    text: str,
    vocab_size: int,
    pattern: str | None = GPT2_SPLIT_PATTERN,
    special_tokens: Sequence[str] = (),
) -> BPETokenizer:
    """Learn BPE merges from ``text``; same merges as :func:`train_bpe_naive`, much faster.

    Three ideas make it fast: identical chunks are processed once (weighted by their count);
    an index remembers which chunks contain each pair, so a merge touches only those; and a
    heap with lazy deletion finds the most frequent pair without scanning all of them.
    """
    num_merges = _num_merges(vocab_size, special_tokens)
    chunk_counts = Counter(_training_chunks(text, pattern, special_tokens))
    words = [list(chunk) for chunk in chunk_counts]
    freqs = list(chunk_counts.values())

    counts: Counter = Counter()
    where: dict[tuple[int, int], set[int]] = {}
    for w, ids in enumerate(words):
        for pair in zip(ids, ids[1:]):
            counts[pair] += freqs[w]
            where.setdefault(pair, set()).add(w)
    heap = [(-c, a, b) for (a, b), c in counts.items()]
    heapq.heapify(heap)

    vocab = [bytes([b]) for b in range(256)]
    known = set(vocab)
    merges: list[tuple[int, int]] = []
    while len(merges) < num_merges and heap:
        neg, a, b = heapq.heappop(heap)
        pair = (a, b)
        if counts.get(pair, 0) != -neg or -neg <= 0:
            continue  # stale entry: the count changed after it was pushed
        merged = vocab[a] + vocab[b]
        if merged in known:
            continue  # see _best_pair: never merge into an existing token
        new_id = len(vocab)
        changed: set[tuple[int, int]] = set()
        for w in sorted(where.pop(pair)):
            ids, f = words[w], freqs[w]
            old_pairs = list(zip(ids, ids[1:]))
            if pair not in old_pairs:
                continue
            for p in old_pairs:
                counts[p] -= f
                changed.add(p)
            ids = words[w] = merge_pair(ids, pair, new_id)
            for p in zip(ids, ids[1:]):
                counts[p] += f
                changed.add(p)
                where.setdefault(p, set()).add(w)
        for p in changed:
            if counts[p] > 0:
                heapq.heappush(heap, (-counts[p], p[0], p[1]))
            else:
                del counts[p]
        merges.append(pair)
        vocab.append(merged)
        known.add(merged)
    return _trained(merges, pattern, special_tokens)


def _trained(merges: list[tuple[int, int]], pattern: str | None, special_tokens: Sequence[str]) -> BPETokenizer:
    """Special tokens get the ids right after the learned tokens."""
    first = 256 + len(merges)
    return BPETokenizer.from_merges(merges, pattern, {s: first + k for k, s in enumerate(special_tokens)})
