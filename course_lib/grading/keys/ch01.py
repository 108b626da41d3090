"""The instructors' key to notebook 01, Tokenization.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch01`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

from collections import Counter

import torch

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- chunk-pair-counts -----------------------------------------------------------------------------


@solution("chunk-pair-counts")
def chunk_pair_counts(chunks: dict[tuple[int, ...], int]) -> dict[tuple[int, int], int]:
    saved: dict[tuple[int, int], int] = {}
    for chunk, n in chunks.items():
        for pair in dict.fromkeys(zip(chunk, chunk[1:])):  # each pair of the chunk once
            merges, i = 0, 0
            while i + 1 < len(chunk):  # left to right, as merge_pair does: (7, 7, 7) merges once
                if (chunk[i], chunk[i + 1]) == pair:
                    merges, i = merges + 1, i + 2
                else:
                    i += 1
            saved[pair] = saved.get(pair, 0) + n * merges  # one token fewer per merge, n copies
    return saved


def overlapping_pair_counts(chunks):  # train_bpe's count: (7, 7, 7) holds (7, 7) twice, but merges once
    counts = Counter()
    for chunk, n in chunks.items():
        for pair in zip(chunk, chunk[1:]):
            counts[pair] += n
    return dict(counts)


@hidden("chunk-pair-counts")
def _chunk_pairs(seed: int) -> list[Case]:
    g = _seeded(seed + 2)
    words = {
        tuple(torch.randint(97, 101, (int(n),), generator=g).tolist()): int(c)
        for n, c in zip(torch.randint(1, 8, (40,), generator=g), torch.randint(1, 50, (40,), generator=g))
    }
    return [
        Case(({},), "no chunks: no pairs"),
        Case(({(3,): 9},), "only a one-token chunk"),
        Case(({(1, 1, 1, 1, 1): 2},), "a run of five, twice: (1, 1) merged twice in each"),
        Case(({(1, 2): 4, (2, 1): 3, (1, 2, 1): 1},), "the same pair from several chunks"),
        Case(({tuple("héllo".encode()): 3, tuple(" wörld".encode()): 2},), "UTF-8 bytes of two words"),
        Case((words,), "up to 40 random chunks with random counts"),
    ]  # fmt: skip


MISTAKES["chunk-pair-counts"] = [
    lambda chunks: chunk_pair_counts(dict.fromkeys(chunks, 1)),  # each chunk once
    lambda chunks: chunk_pair_counts({sum(chunks, ()): 1}),  # one stream: pairs across chunks
    lambda chunks: {p: n for c, n in chunks.items() for p in zip(c[::2], c[1::2])},  # even positions, no sum
    overlapping_pair_counts,
]


# -- encode-with-special ---------------------------------------------------------------------------


@solution("encode-with-special")
def encode_with_special(text: str, special_id: int) -> list[int]:
    ids: list[int] = []
    for k, piece in enumerate(text.split("<|endoftext|>")):
        if k > 0:
            ids.append(special_id)  # one marker between two pieces
        ids += list(piece.encode("utf-8"))
    return ids


@hidden("encode-with-special")
def _special(seed: int) -> list[Case]:
    return [
        Case(("", 50256), "an empty text"),
        Case(("<|endoftext|>x", 7), "a marker at the start"),
        Case(("a<|endoftext|><|endoftext|>b", 300), "two markers in a row"),
        Case(("<|endoftext|>" * 3, 256), "three markers and nothing else"),
        Case(("one<|endoftext|>two<|endoftext|>three 🎉", 50256), "three documents, one with an emoji"),
        Case(("<|endoftext|", 1), "an unfinished marker is ordinary text"),
    ]


def buggy_encode_with_special(text, special_id):  # the function the exercise shows
    ids = []
    for piece in text.split("<|endoftext|>"):
        ids += list(piece.encode("utf-8")) + [special_id]
    return ids


MISTAKES["encode-with-special"] = [
    buggy_encode_with_special,
    lambda text, sid: buggy_encode_with_special(text, sid)[:-1] if text.endswith("<|endoftext|>") else [],
    lambda text, sid: [sid if t == "" else b for t in text.split("<|endoftext|>") for b in t.encode()],
    lambda text, sid: [ord(c) for c in text.replace("<|endoftext|>", chr(sid))],  # characters, not bytes
]


# -- longest-match ---------------------------------------------------------------------------------


@solution("longest-match")
def longest_match(text: str, vocab: set[str]) -> list[str]:
    tokens, i = [], 0
    while i < len(text):
        length = next((n for n in range(len(text) - i, 0, -1) if text[i : i + n] in vocab), 1)
        tokens.append(text[i : i + length])
        i += length
    return tokens


@hidden("longest-match")
def _longest(seed: int) -> list[Case]:
    return [
        Case(("", {"a"}), "an empty text"),
        Case(("a", {"a", "ab"}), "one character"),
        Case(("abcd", {"a", "abc", "bcd", "d"}), "greedy takes 'abc', though 'a' + 'bcd' also covers it"),
        Case(("the cat", {"the", " ", "ca", "cat", "t"}), "a space as its own entry"),
        Case(("aaaaaaa", {"a", "aa", "aaa"}), "a run of seven"),
        Case(("héllo wörld", {"hé", "llo", " w", "ö", "rld"}), "accented characters"),
        Case(("banana", {"ban", "ana", "nan", "b"}), "overlapping entries"),
    ]


def shortest_match(text, vocab):
    tokens, i = [], 0
    while i < len(text):
        n = next((n for n in range(1, len(text) - i + 1) if text[i : i + n] in vocab), 1)
        tokens.append(text[i : i + n])
        i += n
    return tokens


def longest_match_short_of_the_end(text, vocab):  # never tries an entry that ends at the last character
    tokens, i = [], 0
    while i < len(text):
        best = text[i]
        for j in range(len(text) - 1, i, -1):  # should start at len(text)
            if text[i:j] in vocab:
                best = text[i:j]
                break
        tokens.append(best)
        i += len(best)
    return tokens


MISTAKES["longest-match"] = [
    shortest_match,
    lambda text, vocab: list(text),  # characters only
    lambda text, vocab: [t for t in sorted(vocab, key=len, reverse=True) if t in text][:1] or list(text),
    longest_match_short_of_the_end,
]


# -- unk-rate --------------------------------------------------------------------------------------


@solution("unk-rate")
def unk_rate(train_words: list[str], val_words: list[str], min_count: int) -> float:
    counts = Counter(train_words)
    vocab = {w for w, n in counts.items() if n >= min_count}
    return sum(w not in vocab for w in val_words) / len(val_words)


@hidden("unk-rate")
def _unk_rate(seed: int) -> list[Case]:
    g = _seeded(seed + 3)
    train = [f"w{int(i)}" for i in torch.randint(0, 60, (800,), generator=g)]
    val = [f"w{int(i)}" for i in torch.randint(0, 80, (300,), generator=g)]
    return [
        Case((["a"], ["a"], 1), "one word, known"),
        Case((["a", "a"], ["a", "b"], 3), "min_count above every count: nothing known"),
        Case((["x", "y", "x"], ["x", "x", "x", "y"], 2), "the same known word three times"),
        Case((train, val, 1), "random words, min_count 1"),
        Case((train, val, 12), "random words, min_count 12"),
        Case(([], ["a", "b"], 1), "no training words: every word unknown"),
    ]


MISTAKES["unk-rate"] = [
    lambda tr, va, m: unk_rate(tr, va, m + 1),  # > min_count
    lambda tr, va, m: unk_rate(tr, sorted(set(va)), m),  # distinct validation words
    lambda tr, va, m: 1 - unk_rate(tr, va, m),  # the known share
]
