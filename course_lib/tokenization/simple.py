"""The first tokenizers of the course: one id per character, or one per word.

Both keep the vocabulary as a list (id -> token) and a dict (token -> id) and share the interface
every tokenizer of the course has (``encode``, ``decode``, ``vocab_size``). A character tokenizer
has a small vocabulary but makes long sequences, and refuses a character its training text lacked;
a word tokenizer makes short sequences from a large vocabulary, with ``[UNK]`` for every word it
never saw. Byte-level BPE (:mod:`course_lib.tokenization.bpe`) sits between the two.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import regex


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
