"""Tokenizers: text -> integer ids -> text.

Three tokenizers of increasing power, all with the same small interface
(``encode``, ``decode``, ``vocab_size``):

- :class:`CharTokenizer`: one id per character seen in the training text.
- :class:`WordTokenizer`: one id per word, with special tokens ``[PAD] [UNK] [BOS] [EOS]``.
- :class:`BPETokenizer`: byte-level byte-pair encoding, trained from scratch by
  :func:`train_bpe` (fast, incremental) or :func:`train_bpe_naive` (the textbook loop),
  or loaded with GPT-2's own merge ranks by :func:`gpt2_tokenizer`.

:func:`gpt2_encoding` gives tiktoken's GPT-2 encoding without a network connection, built from
the rank file that ships in ``course_lib/assets`` (see ``gpt2.tiktoken.LICENSE`` there).
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path

import regex

from .files import write_atomically

# GPT-2's pre-split pattern, character for character as tiktoken writes it: contractions,
# letters with an optional leading space, numbers, punctuation runs, and whitespace.
GPT2_SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = "<|endoftext|>"

# SmolLM2's pre-split (llama.cpp's "smollm"; Hugging Face's Digits(individual_digits=True) then
# ByteLevel): every digit is a chunk of its own, and GPT-2's pattern runs on the text between
# digits. One pattern does both: digits are excluded from the other alternatives, and a digit
# counts as the end of the text for the trailing-whitespace rule (so "a   12" splits as
# "a", "   ", "1", "2", exactly as running GPT-2's pattern on "a   " would).
SMOLLM_SPLIT_PATTERN = r"""\p{N}|'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?[^\s\p{L}\p{N}]++|\s++(?=\p{N}|$)|\s+(?!\S)|\s"""

GPT2_RANKS_FILE = "gpt2.tiktoken"
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_VOCAB_SIZE = 50257

BPE_FILE_HEADER = "course_lib-bpe v1"


class TokenizerFileError(ValueError):
    """A saved tokenizer file is corrupted, truncated or of an unknown version."""


# --------------------------------------------------------------------------------------
# Character and word tokenizers
# --------------------------------------------------------------------------------------


def _check_ids(ids: Iterable[int], vocab_size: int) -> list[int]:
    ids = [int(i) for i in ids]
    for i in ids:
        if not 0 <= i < vocab_size:
            raise ValueError(f"token id {i} is outside the vocabulary (valid ids are 0..{vocab_size - 1})")
    return ids


class CharTokenizer:
    """One token per character; the vocabulary is the sorted set of characters seen."""

    def __init__(self, chars: Sequence[str]):
        if len(set(chars)) != len(chars):
            raise ValueError("the character vocabulary contains duplicates")
        self.itos = list(chars)
        self.stoi = {ch: i for i, ch in enumerate(self.itos)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[ch] for ch in text]
        except KeyError as err:
            raise ValueError(
                f"character {err.args[0]!r} is not in the vocabulary; build the tokenizer from a text that contains it"
            ) from None

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.itos[i] for i in _check_ids(ids, self.vocab_size))


WORD_PATTERN = r"\w+|[^\w\s]"
"""Words are runs of letters/digits; every punctuation mark is a word of its own."""

PAD, UNK, BOS, EOS = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
WORD_SPECIALS = (PAD, UNK, BOS, EOS)


class WordTokenizer:
    """One token per word, plus special tokens; unknown words map to ``[UNK]`` if it exists."""

    def __init__(self, vocab: Sequence[str], unk_token: str | None = UNK):
        if len(set(vocab)) != len(vocab):
            raise ValueError("the word vocabulary contains duplicates")
        if unk_token is not None and unk_token not in vocab:
            raise ValueError(f"unk_token {unk_token!r} is not in the vocabulary")
        self.itos = list(vocab)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.unk_token = unk_token

    @staticmethod
    def split(text: str) -> list[str]:
        """``"Hello, world!"`` -> ``['Hello', ',', 'world', '!']``."""
        return regex.findall(WORD_PATTERN, text)

    @classmethod
    def from_text(
        cls,
        text: str,
        min_count: int = 1,
        max_size: int | None = None,
        specials: Sequence[str] = WORD_SPECIALS,
        unk_token: str | None = UNK,
    ) -> WordTokenizer:
        """Specials first, then words by decreasing frequency (ties alphabetically)."""
        counts = Counter(cls.split(text))
        words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        vocab = list(specials) + [w for w in words if w not in specials]
        if max_size is not None:
            vocab = vocab[:max_size]
        return cls(vocab, unk_token=unk_token if unk_token in vocab else None)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def token_id(self, token: str) -> int:
        if token not in self.stoi:
            raise ValueError(f"token {token!r} is not in the vocabulary")
        return self.stoi[token]

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = [self.token_id(BOS)] if add_bos else []
        for word in self.split(text):
            if word in self.stoi:
                ids.append(self.stoi[word])
            elif self.unk_token is not None:
                ids.append(self.stoi[self.unk_token])
            else:
                raise ValueError(
                    f"word {word!r} is not in the vocabulary and this tokenizer has no "
                    "unknown token; build it with unk_token='[UNK]'"
                )
        if add_eos:
            ids.append(self.token_id(EOS))
        return ids

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        words = [self.itos[i] for i in _check_ids(ids, self.vocab_size)]
        if skip_special:
            words = [w for w in words if w not in WORD_SPECIALS]
        # No space before punctuation: "world !" -> "world!".
        return regex.sub(r" ([^\w\s\[])", r"\1", " ".join(words))


# --------------------------------------------------------------------------------------
# Byte-pair encoding: the two pure functions everything else is built from
# --------------------------------------------------------------------------------------


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


def _pretokenize(text: str, pattern: str | None, special_tokens: Sequence[str] = ()) -> list[bytes]:
    """The chunks BPE works within. Special tokens are hard boundaries: the text is cut at
    each one and the token itself dropped, so no merge ever spans or learns part of one."""
    parts = [text]
    if special_tokens:
        parts = regex.split("|".join(regex.escape(s) for s in sorted(special_tokens, key=len, reverse=True)), text)
    chunks = [c for part in parts for c in ([part] if pattern is None else regex.findall(pattern, part))]
    return [c.encode("utf-8") for c in chunks if c]


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


# --------------------------------------------------------------------------------------
# The tokenizer
# --------------------------------------------------------------------------------------


class BPETokenizer:
    """A byte-level BPE tokenizer.

    State: ``vocab`` (id -> bytes), the ordered ``merges`` (pairs of ids; a merge's rank is
    its position in the list, not the id it creates), the pre-split ``pattern`` and the
    ``special_tokens`` (name -> id, any ids the vocabulary does not use). Encoding a chunk
    starts from its single bytes and repeatedly merges the adjacent pair of lowest rank until
    no adjacent pair is a merge. With GPT-2's ranks this gives tiktoken's ids exactly.

    Built by :func:`train_bpe` (:meth:`from_merges`), from a vocabulary and merges trained
    elsewhere (:meth:`from_vocab`; Hugging Face's ``vocab.json`` + ``merges.txt`` through
    :mod:`course_lib.tokenizer_files`) or from tiktoken-style ranks (:meth:`from_ranks`).
    """

    def __init__(
        self,
        vocab: Mapping[int, bytes],
        merges: Sequence[tuple[int, int]],
        special_tokens: Mapping[str, int] | None = None,
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ):
        self.vocab = dict(vocab)
        self.ids = {token: i for i, token in self.vocab.items()}  # bytes -> id
        if len(self.ids) != len(self.vocab):
            seen: dict[bytes, int] = {}
            for i, token in self.vocab.items():
                if token in seen:
                    raise ValueError(f"the BPE vocabulary contains {token!r} twice, with ids {seen[token]} and {i}")
                seen[token] = i
        # A byte-level vocabulary normally holds all 256 bytes; one trained elsewhere may lack a
        # few that never occurred (SmolLM2's lacks 9 control bytes): a text using one is refused.
        self.missing_bytes = [b for b in range(256) if bytes([b]) not in self.ids]
        if len(self.missing_bytes) > 128:
            raise ValueError(
                f"a byte-level BPE vocabulary must contain the single bytes; {len(self.missing_bytes)} of 256 "
                f"are missing ({self.missing_bytes[:5]} ...)"
            )
        self._byte_ids = [self.ids.get(bytes([b])) for b in range(256)]
        self.merges = [(int(a), int(b)) for a, b in merges]
        self._merge_to: dict[tuple[int, int], tuple[int, int]] = {}  # (a, b) -> (rank, merged id)
        for rank, (a, b) in enumerate(self.merges):
            if a not in self.vocab or b not in self.vocab:
                raise ValueError(f"merge {rank} ({a}, {b}) refers to an id that is not in the vocabulary")
            merged = self.ids.get(self.vocab[a] + self.vocab[b])
            if merged is None:
                raise ValueError(
                    f"merge {rank} ({self.vocab[a]!r} + {self.vocab[b]!r}) makes "
                    f"{self.vocab[a] + self.vocab[b]!r}, which is not in the vocabulary"
                )
            self._merge_to.setdefault((a, b), (rank, merged))
        self.pattern = pattern
        self._split = regex.compile(pattern) if pattern is not None else None
        self.special_tokens = dict(special_tokens or {})
        for name, i in self.special_tokens.items():
            if i in self.vocab or list(self.special_tokens.values()).count(i) > 1 or i < 0:
                raise ValueError(
                    f"special token {name!r} has id {i}, which is already used; a special token needs an id "
                    "of its own, not one of the vocabulary's or another special token's"
                )
            if name.encode("utf-8") in self.ids:
                raise ValueError(f"special token {name!r} is also an ordinary token (id {self.ids[name.encode()]})")
        self.inverse_special = {i: name for name, i in self.special_tokens.items()}
        self._special_split = (
            regex.compile("|".join(regex.escape(t) for t in sorted(self.special_tokens, key=len, reverse=True)))
            if self.special_tokens
            else None
        )
        self._cache: dict[bytes, list[int]] = {}

    @classmethod
    def from_merges(
        cls,
        merges: Sequence[tuple[int, int]],
        pattern: str | None = GPT2_SPLIT_PATTERN,
        special_tokens: dict[str, int] | None = None,
    ) -> BPETokenizer:
        """The course's own layout: bytes 0..255 are ids 0..255, merge ``k`` creates id ``256 + k``."""
        vocab = {b: bytes([b]) for b in range(256)}
        for k, (a, b) in enumerate(merges):
            if a not in vocab or b not in vocab:
                raise ValueError(f"merge {k} refers to ids ({a}, {b}) that do not exist yet")
            vocab[256 + k] = vocab[a] + vocab[b]
        return cls(vocab, merges, special_tokens, pattern)

    @classmethod
    def from_vocab(
        cls,
        vocab: Mapping[int, bytes],
        merges: Sequence[tuple[bytes, bytes]],
        special_tokens: Mapping[str, int] | None = None,
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ) -> BPETokenizer:
        """A tokenizer trained elsewhere: ``vocab`` (id -> bytes, any ids), ``merges`` as pairs of
        byte strings in rank order, special tokens with any ids the vocabulary leaves free."""
        ids = {token: i for i, token in vocab.items()}
        pairs = []
        for rank, (a, b) in enumerate(merges):
            for part in (a, b):
                if part not in ids:
                    raise ValueError(f"merge {rank} ({a!r}, {b!r}): {part!r} is not in the vocabulary")
            pairs.append((ids[a], ids[b]))
        return cls(vocab, pairs, special_tokens, pattern)

    @classmethod
    def from_ranks(
        cls,
        ranks: Mapping[bytes, int],
        special_tokens: Mapping[str, int] | None = None,
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ) -> BPETokenizer:
        """tiktoken's form (token -> rank = id, no merge list): each token's merge is recovered
        as the two pieces that BPE with only the lower ranks leaves of its bytes."""
        merges = []
        for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
            if len(token) == 1:
                continue
            parts = [token[i : i + 1] for i in range(len(token))]
            while len(parts) > 2:
                scores = [ranks.get(parts[i] + parts[i + 1], rank) for i in range(len(parts) - 1)]
                best = min(range(len(scores)), key=scores.__getitem__)
                if scores[best] >= rank:
                    break
                parts[best : best + 2] = [parts[best] + parts[best + 1]]
            if len(parts) != 2:
                raise ValueError(f"token {token!r} (rank {rank}) cannot be made by merging two lower-ranked tokens")
            merges.append((parts[0], parts[1]))
        return cls.from_vocab({i: t for t, i in ranks.items()}, merges, special_tokens, pattern)

    @property
    def vocab_size(self) -> int:
        """One more than the largest id: the rows a model's embedding needs."""
        return 1 + max(max(self.vocab), max(self.special_tokens.values(), default=-1))

    # -- encoding ------------------------------------------------------------------------

    def _encode_chunk(self, chunk: bytes) -> list[int]:
        cached = self._cache.get(chunk)
        if cached is not None:
            return cached
        ids = [self._byte_ids[b] for b in chunk]
        if None in ids:
            byte = chunk[ids.index(None)]
            raise ValueError(
                f"byte 0x{byte:02x} ({chr(byte)!r}) of the text is not in this tokenizer's vocabulary, which lacks "
                f"{len(self.missing_bytes)} of the 256 bytes; remove that character from the text"
            )
        merge_to = self._merge_to
        while len(ids) > 1:
            best, best_rank, best_id = -1, len(self.merges), -1
            for i in range(len(ids) - 1):
                found = merge_to.get((ids[i], ids[i + 1]))
                if found is not None and found[0] < best_rank:  # strict: the leftmost pair wins a tie
                    best, (best_rank, best_id) = i, found
            if best < 0:
                break
            ids[best : best + 2] = [best_id]
        if len(self._cache) < 100_000:
            self._cache[chunk] = ids
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode ``text`` treating special-token strings as plain text."""
        ids: list[int] = []
        for chunk in _pretokenize(text, self.pattern):
            ids.extend(self._encode_chunk(chunk))
        return ids

    def _allowed(self, allowed_special: Iterable[str] | str) -> set[str]:
        allowed = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self.special_tokens)
        if unknown:
            raise ValueError(f"not special tokens of this tokenizer: {sorted(unknown)}")
        return allowed

    @staticmethod
    def _disallowed(name: str) -> ValueError:
        return ValueError(
            f"the text contains the special token {name!r}. Pass "
            f"allowed_special={{{name!r}}} to encode it as a special token, or use "
            "encode_ordinary() to encode it as plain text"
        )

    def encode(self, text: str, allowed_special: Iterable[str] | str = ()) -> list[int]:
        """Encode ``text``; special tokens are recognised only if listed in ``allowed_special``.

        Like tiktoken, a special-token string in the text that is not allowed raises an
        error instead of being silently encoded as ordinary text.
        """
        allowed = self._allowed(allowed_special)
        for name in self.special_tokens:
            if name not in allowed and name in text:
                raise self._disallowed(name)
        if not allowed:
            return self.encode_ordinary(text)
        splitter = "(" + "|".join(regex.escape(s) for s in sorted(allowed, key=len, reverse=True)) + ")"
        ids: list[int] = []
        for k, part in enumerate(regex.split(splitter, text)):
            if k % 2:  # odd parts are the captured special tokens
                ids.append(self.special_tokens[part])
            else:
                ids.extend(self.encode_ordinary(part))
        return ids

    def encode_iterable(self, texts: Iterable[str], allowed_special: Iterable[str] | str = ()) -> Iterator[int]:
        """Yield the ids of the concatenated ``texts`` (lines of a file, chunks of a stream)
        lazily: the same ids as :meth:`encode` of the whole, in memory bounded by the longest
        pre-token rather than by the input.

        Only the unfinished tail is kept between pieces: the last two pre-tokens (a chunk can
        still grow or split when more text arrives: ``"it'"`` + ``"ll"``) and anything that
        could be the start of a special token cut by a piece boundary.
        """
        allowed = self._allowed(allowed_special)
        prefixes = {name[:k] for name in self.special_tokens for k in range(1, len(name))}
        longest = max(map(len, prefixes), default=0)
        buffer = ""
        for piece in texts:
            buffer += piece
            while self._special_split is not None and (found := self._special_split.search(buffer)):
                if found.group() not in allowed:
                    raise self._disallowed(found.group())
                yield from self.encode_ordinary(buffer[: found.start()])
                yield self.special_tokens[found.group()]
                buffer = buffer[found.end() :]
            held = max((k for k in range(1, min(longest, len(buffer)) + 1) if buffer[-k:] in prefixes), default=0)
            if self._split is None:
                continue  # without pre-splitting the whole text is one chunk: nothing is final
            final = list(self._split.finditer(buffer, 0, len(buffer) - held))[:-2]
            for match in final:
                yield from self._encode_chunk(match.group().encode("utf-8"))
            if final:
                buffer = buffer[final[-1].end() :]  # a pattern may skip text between chunks
        yield from self.encode(buffer, allowed)

    # -- decoding ------------------------------------------------------------------------

    def token_bytes(self, token_id: int) -> bytes:
        token = self.vocab.get(token_id)
        if token is not None:
            return token
        if token_id in self.inverse_special:
            return self.inverse_special[token_id].encode("utf-8")
        raise ValueError(f"token id {token_id} is outside the vocabulary (valid ids are 0..{self.vocab_size - 1})")

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join(self.token_bytes(int(i)) for i in ids)

    def decode(self, ids: Iterable[int]) -> str:
        """Bytes that do not form valid UTF-8 (half a character) become U+FFFD, like tiktoken."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def pieces(self, text: str, allowed_special: Iterable[str] | str = ()) -> list[str]:
        """The text of each token, for display: ``"hello world"`` -> ``['hello', ' world']``."""
        return [self.token_bytes(i).decode("utf-8", errors="replace") for i in self.encode(text, allowed_special)]

    # -- saving and loading --------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the pattern, special tokens and merges in a small versioned text format."""
        write_atomically(path, self.dumps())

    def dumps(self) -> str:
        """The text :meth:`save` writes (also stored inside model files)."""
        if (
            any(self.vocab.get(i) != (bytes([i]) if i < 256 else None) for i in range(256))
            or any(self.vocab.get(256 + k) != self.vocab[a] + self.vocab[b] for k, (a, b) in enumerate(self.merges))
            or len(self.vocab) != 256 + len(self.merges)
        ):
            raise ValueError(
                "this tokenizer's ids do not follow the course layout (bytes 0..255, then one id per merge); "
                "save it with tokenizer_files.save_gpt2_files() instead"
            )
        lines = [
            BPE_FILE_HEADER,
            "pattern " + json.dumps(self.pattern),
            f"special {len(self.special_tokens)}",
            *(f"{i} {json.dumps(name)}" for name, i in self.special_tokens.items()),
            f"merges {len(self.merges)}",
            *(f"{a} {b}" for a, b in self.merges),
        ]
        return "\n".join(lines) + "\n"

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        return cls.loads(Path(path).read_text(encoding="utf-8"), f"tokenizer file {str(path)!r}")

    @classmethod
    def loads(cls, text: str, where: str = "tokenizer text") -> BPETokenizer:
        """The tokenizer :meth:`dumps` described; ``where`` names the source in errors."""
        lines = text.splitlines()

        def fail(problem: str) -> TokenizerFileError:
            return TokenizerFileError(f"{where} is not a valid course_lib BPE file: {problem}")

        if not lines or lines[0] != BPE_FILE_HEADER:
            got = lines[0][:40] if lines else "an empty file"
            raise fail(f"expected first line {BPE_FILE_HEADER!r}, got {got!r}")
        try:
            key, value = lines[1].split(" ", 1)
            assert key == "pattern"
            pattern = json.loads(value)
            key, n_special = lines[2].split(" ")
            assert key == "special"
            n_special = int(n_special)
            special = {}
            for line in lines[3 : 3 + n_special]:
                i, name = line.split(" ", 1)
                special[json.loads(name)] = int(i)
            key, n_merges = lines[3 + n_special].split(" ")
            assert key == "merges"
            n_merges = int(n_merges)
            merge_lines = lines[4 + n_special :]
            merges = [tuple(int(x) for x in line.split(" ")) for line in merge_lines]
        except (AssertionError, IndexError, ValueError) as err:
            raise fail(f"malformed header or entry ({err.__class__.__name__}: {err})") from None
        if len(merges) != n_merges or any(len(m) != 2 for m in merges):
            raise fail(f"expected {n_merges} merges of two ids, found {len(merges)} lines (truncated?)")
        try:
            return cls.from_merges(merges, pattern, special)
        except ValueError as err:
            raise fail(str(err)) from None

    def __repr__(self) -> str:
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={self.special_tokens}, "
            f"pattern={'GPT-2' if self.pattern == GPT2_SPLIT_PATTERN else self.pattern!r})"
        )


# --------------------------------------------------------------------------------------
# GPT-2's encoding, offline
# --------------------------------------------------------------------------------------


def load_gpt2_ranks() -> dict[bytes, int]:
    """GPT-2's 50,256 mergeable tokens and their ranks (= ids), from the shipped file.

    The file is ``whisper/assets/gpt2.tiktoken`` from the ``openai-whisper`` source
    distribution (MIT licence); its SHA-256 is checked so a damaged copy fails loudly.
    """
    data = resources.files("course_lib").joinpath("assets", GPT2_RANKS_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != GPT2_RANKS_SHA256:
        raise TokenizerFileError(
            f"course_lib/assets/{GPT2_RANKS_FILE} has SHA-256 {digest}, expected "
            f"{GPT2_RANKS_SHA256}; reinstall course_lib to restore it"
        )
    ranks = {}
    for line in data.splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


def gpt2_encoding():
    """tiktoken's GPT-2 encoding (50,257 tokens), built from the shipped ranks.

    ``tiktoken.get_encoding("gpt2")`` downloads two files on first use; this gives the
    identical encoding without a network connection, every time.
    """
    import tiktoken

    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_SPLIT_PATTERN,
        mergeable_ranks=load_gpt2_ranks(),
        special_tokens={ENDOFTEXT: GPT2_VOCAB_SIZE - 1},
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )


def gpt2_tokenizer() -> BPETokenizer:
    """The course's own BPE encoder with GPT-2's vocabulary and merges (recovered from the
    shipped ranks): the same ids as tiktoken."""
    return BPETokenizer.from_ranks(load_gpt2_ranks(), {ENDOFTEXT: GPT2_VOCAB_SIZE - 1})


# --------------------------------------------------------------------------------------
# A tokenizer inside a model file
# --------------------------------------------------------------------------------------


def tokenizer_to_dict(tokenizer: BPETokenizer | CharTokenizer) -> dict:
    """The tokenizer as JSON-ready data, to store inside a model file."""
    if isinstance(tokenizer, CharTokenizer):
        return {"kind": "char", "chars": tokenizer.itos}
    return {"kind": "bpe", "text": tokenizer.dumps()}


def tokenizer_from_dict(data: dict) -> BPETokenizer | CharTokenizer:
    """The tokenizer :func:`tokenizer_to_dict` stored."""
    if data.get("kind") == "char":
        return CharTokenizer(data["chars"])
    if data.get("kind") == "bpe":
        return BPETokenizer.loads(data["text"], "the tokenizer stored in the model file")
    raise TokenizerFileError(f"unknown kind of stored tokenizer {data.get('kind')!r}; expected 'bpe' or 'char'")
