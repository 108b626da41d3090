"""The byte-level BPE tokenizer: text -> bytes -> merged tokens, with tiktoken's ids.

:class:`BPETokenizer` holds a vocabulary (id -> bytes), ranked merges, a pre-split pattern and
special tokens. It is trained by :mod:`course_lib.tokenization.bpe_training`, built from GPT-2's
ranks by :mod:`course_lib.tokenization.gpt2`, or read from files trained elsewhere by
:mod:`course_lib.tokenization.tokenizer_files`; it saves itself in a small versioned text format.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import regex

from ..files import write_atomically

# GPT-2's pre-split pattern, character for character as tiktoken writes it: contractions,
# letters with an optional leading space, numbers, punctuation runs, and whitespace.
GPT2_SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

# SmolLM2's pre-split (llama.cpp's "smollm"; Hugging Face's Digits(individual_digits=True) then
# ByteLevel): every digit is a chunk of its own, and GPT-2's pattern runs on the text between
# digits. One pattern does both: digits are excluded from the other alternatives, and a digit
# counts as the end of the text for the trailing-whitespace rule (so "a   12" splits as
# "a", "   ", "1", "2", exactly as running GPT-2's pattern on "a   " would).
SMOLLM_SPLIT_PATTERN = r"""\p{N}|'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?[^\s\p{L}\p{N}]++|\s++(?=\p{N}|$)|\s+(?!\S)|\s"""

BPE_FILE_HEADER = "course_lib-bpe v1"


class TokenizerFileError(ValueError):
    """A saved tokenizer file is corrupted, truncated or of an unknown version."""


def _pretokenize(text: str, pattern: str | None, special_tokens: Sequence[str] = ()) -> list[bytes]:
    """The chunks BPE works within. Special tokens are hard boundaries: the text is cut at
    each one and the token itself dropped, so no merge ever spans or learns part of one."""
    parts = [text]
    if special_tokens:
        parts = regex.split("|".join(regex.escape(s) for s in sorted(special_tokens, key=len, reverse=True)), text)
    chunks = [c for part in parts for c in ([part] if pattern is None else regex.findall(pattern, part))]
    return [c.encode("utf-8") for c in chunks if c]


class BPETokenizer:
    """A byte-level BPE tokenizer.

    State: ``vocab`` (id -> bytes), the ordered ``merges`` (pairs of ids; a merge's rank is
    its position in the list, not the id it creates), the pre-split ``pattern`` and the
    ``special_tokens`` (name -> id, any ids the vocabulary does not use). Encoding a chunk
    starts from its single bytes and repeatedly merges the adjacent pair of lowest rank until
    no adjacent pair is a merge. With GPT-2's ranks this gives tiktoken's ids exactly.

    Built by :func:`train_bpe` (:meth:`from_merges`), from a vocabulary and merges trained
    elsewhere (:meth:`from_vocab`; Hugging Face's ``vocab.json`` + ``merges.txt`` through
    :mod:`course_lib.tokenization.tokenizer_files`) or from tiktoken-style ranks (:meth:`from_ranks`).
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
