"""Tokenizers in files: those written by others, read into (and written from) the course's BPE, and
a tokenizer stored inside a course model file.

GPT-2 and Hugging Face store a byte-level BPE as ``vocab.json`` (token text -> id) and
``merges.txt`` (one merge per line, in rank order), with every byte written as a printable
character (GPT-2's byte-to-text table: ``"Ġworld"`` is ``b" world"``). GGUF files keep the same
text form in their ``tokenizer.ggml.*`` fields. This module translates that form; the tokenizer
itself (:class:`~course_lib.tokenization.bpe.BPETokenizer`) knows nothing of it, as minbpe keeps its
GPT-4 compatibility in a file of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..files import write_atomically
from .bpe import GPT2_SPLIT_PATTERN, BPETokenizer, TokenizerFileError
from .simple import CharTokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from bytes to printable characters, used to write tokens as text in
    ``vocab.json`` / ``merges.txt``: printable Latin-1 bytes stand for themselves, the other
    68 (controls, space, soft hyphen...) are shifted to U+0100 onwards in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = (b for b in range(256) if b not in printable)
    table = {b: chr(b) for b in printable}
    table.update({b: chr(256 + n) for n, b in enumerate(shifted)})
    return dict(sorted(table.items()))


BYTE_TO_UNICODE = _bytes_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}


def _from_gpt2_text(text: str, where: str, strict: bool = True) -> bytes | None:
    try:
        return bytes(UNICODE_TO_BYTE[c] for c in text)
    except KeyError:
        if not strict:
            return None
        raise TokenizerFileError(f"{where}: {text!r} is not a token written with GPT-2's byte-to-text table") from None


def save_gpt2_files(tokenizer: BPETokenizer, folder: str | Path) -> tuple[Path, Path]:
    """Write GPT-2-style ``vocab.json`` (token text -> id, special tokens included) and
    ``merges.txt`` (one merge per line, in rank order), as Hugging Face tokenizers read them."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    show = lambda token: "".join(BYTE_TO_UNICODE[b] for b in token)  # noqa: E731
    vocab = {show(token): i for i, token in sorted(tokenizer.vocab.items())} | tokenizer.special_tokens
    merges = [f"{show(tokenizer.vocab[a])} {show(tokenizer.vocab[b])}" for a, b in tokenizer.merges]
    vocab_path, merges_path = folder / "vocab.json", folder / "merges.txt"
    write_atomically(vocab_path, json.dumps(vocab, ensure_ascii=False) + "\n")
    write_atomically(merges_path, "#version: 0.2\n" + "".join(m + "\n" for m in merges))
    return vocab_path, merges_path


def load_gpt2_files(
    vocab_path: str | Path, merges_path: str | Path, pattern: str | None = GPT2_SPLIT_PATTERN
) -> BPETokenizer:
    """Read GPT-2-style ``vocab.json`` + ``merges.txt``. An entry of the vocabulary that is
    neither a single byte nor made by a merge is a special token (GPT-2's ``<|endoftext|>``)."""
    entries = json.loads(Path(vocab_path).read_text(encoding="utf-8"))
    shared = (
        sorted({i for i in entries.values() if list(entries.values()).count(i) > 1})
        if len(set(entries.values())) != len(entries)
        else []
    )
    if shared:
        raise TokenizerFileError(f"{vocab_path}: ids {', '.join(map(str, shared[:5]))} are used by more than one token")
    lines = Path(merges_path).read_text(encoding="utf-8").splitlines()
    return from_gpt2_text(entries, lines, pattern, str(vocab_path), str(merges_path))


def from_gpt2_text(
    entries: Mapping[str, int],
    merges: Iterable[str],
    pattern: str | None = GPT2_SPLIT_PATTERN,
    vocab_source: str = "the vocabulary",
    merges_source: str = "the merges",
) -> BPETokenizer:
    """A tokenizer from tokens written as text with GPT-2's byte-to-text table (``"Ġworld"``
    is ``b" world"``) and merges as ``"Ġ world"`` lines, in rank order: the contents of
    ``vocab.json`` / ``merges.txt``, or of a GGUF file's ``tokenizer.ggml.*`` fields. An entry
    that is neither a single byte nor made by a merge is a special token."""
    pairs = []
    for number, line in enumerate(merges, 1):
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise TokenizerFileError(
                f"{merges_source}, line {number}: expected two tokens separated by a space, got {line!r}"
            )
        pairs.append(tuple(_from_gpt2_text(part, f"{merges_source}, line {number}") for part in parts))
    made = {a + b for a, b in pairs}
    vocab, special = {}, {}
    for text, i in entries.items():
        token = _from_gpt2_text(text, vocab_source, strict=False)
        if token is not None and (len(token) == 1 or token in made):
            vocab[i] = token
        else:
            special[text] = i
    return BPETokenizer.from_vocab(vocab, pairs, special, pattern)


# == a tokenizer inside a course model file =================================================


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
