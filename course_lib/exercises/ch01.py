"""The exercises of notebook 01, Tokenization.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch01`.
"""

from __future__ import annotations

from .core import Case, exercise


@exercise(
    "chunk-pair-counts",
    hint=[
        "work inside each chunk only, then weigh by how often the chunk occurs: merge_pair a chunk by hand "
        "for one of its pairs and count the tokens that disappear",
        "merging goes left to right and a merged token is not merged again: (7, 7, 7) becomes (new, 7), one "
        "token fewer, though get_pair_counts finds (7, 7) twice; a chunk that occurs n times saves n times that",
        "usual mistakes: overlapping occurrences counted, each chunk once instead of n times, pairs across "
        "chunk boundaries (the end of one chunk never pairs with the start of the next)",
    ],
)
def _chunk_pair_cases() -> list[Case]:
    return [
        Case(({(1, 2, 3): 1, (1, 2): 2},), "a chunk counted twice", {(1, 2): 3, (2, 3): 1}),
        Case(({(7, 7, 7): 5},), "a run of three merges once, five times", {(7, 7): 5}),
        Case(({(4,): 3, (5, 6): 1},), "a one-token chunk has no pair", {(5, 6): 1}),
        Case(({(1, 2): 1, (3, 4): 1},), "no pair across two chunks: (2, 3) is not one", {(1, 2): 1, (3, 4): 1}),
        Case(({(7, 7, 7, 7): 1, (1, 7, 7, 1): 2},), "a run of four merges twice", {(7, 7): 4, (1, 7): 2, (7, 1): 2}),
    ]


@exercise(
    "encode-with-special",
    hint=[
        "try the buggy function on 'a<|endoftext|>b' and count the special ids in what it returns",
        "text.split(marker) gives one piece more than there are markers: a marker goes BETWEEN two pieces, "
        "not after every piece",
        "empty pieces (a marker at the start, at the end, two in a row) add no bytes but keep their markers",
    ],
)
def _special_cases() -> list[Case]:
    eot = 1000
    return [
        Case(("a<|endoftext|>b", eot), "one marker between two texts", [97, eot, 98]),
        Case(("hi", eot), "no marker", [104, 105]),
        Case(("<|endoftext|>", eot), "only a marker", [eot]),
        Case(("é<|endoftext|>", eot), "a two-byte character, then a marker at the end", [195, 169, eot]),
    ]


@exercise(
    "longest-match",
    hint=[
        "stand at position i: which vocabulary entries does text[i:] start with? Take the longest",
        "try the lengths from the longest possible down to 1: the first piece in vocab wins; with no entry at "
        "all, take one character; then move on past what you took",
        "usual mistakes: the shortest match, the first entry of the set that matches, restarting too early",
    ],
)
def _longest_match_cases() -> list[Case]:
    return [
        Case(("hello", {"he", "hell", "ll", "o"}), "the longest entry first", ["hell", "o"]),
        Case(("abc", {"ab", "bc"}), "greedy: 'ab' is taken, 'c' is left alone", ["ab", "c"]),
        Case(("xyz", set()), "an empty vocabulary: characters", ["x", "y", "z"]),
        Case(("aaaa", {"aa", "aaa"}), "the longest first, then what is left", ["aaa", "a"]),
        Case(("the cat", {"the", " ", "ca", "cat"}), "the longest entry ends the text", ["the", " ", "cat"], hint=1),
    ]


@exercise(
    "unk-rate",
    hint=[
        "first the vocabulary (which words are kept?), then the share of validation words outside it",
        "a word is kept when it occurs at least min_count times in train_words; the rate counts validation "
        "words with their repetitions",
        "usual mistakes: > min_count instead of >=, distinct validation words instead of occurrences",
    ],
)
def _unk_rate_cases() -> list[Case]:
    train = ["the", "cat", "the", "mat", "sat", "the", "cat"]
    return [
        Case((train, ["the", "dog"], 1), "min_count 1: every training word", 0.5),
        Case((train, ["cat", "mat", "cat", "the"], 2), "min_count 2: 'mat' is out", 0.25),
        Case((train, ["the", "the", "sat", "hat"], 3), "repeated validation words count each time", 0.5),
        Case((train, ["dog"], 1), "nothing known", 1.0),
    ]
