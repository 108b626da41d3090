"""Training data: corpora, splits, and input/target windows.

The default corpus needs no network: it is the Python language reference (the text of
``pydoc_data.topics``, 465,984 characters of English prose and code) as Python 3.11 ships it,
kept in ``assets/python_docs.json.gz`` so that it is the same text on every Python. Public
corpora such as Tiny Shakespeare are one argument away: they are downloaded once into a cache
folder and checked against a SHA-256 (see :mod:`course_lib.files`). The labelled and
instruction data sets of the fine-tuning chapters live in :mod:`course_lib.tasks`.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from .files import RemoteFile, fetch
from .tokenization import ENDOFTEXT, BPETokenizer, CharTokenizer, train_bpe

DEFAULT_CORPUS = "stdlib-docs"


CORPORA: dict[str, RemoteFile] = {
    "tiny-shakespeare": RemoteFile(
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        filename="tiny-shakespeare.txt",
        description="40,000 lines of Shakespeare's plays (1.1 MB), from Karpathy's char-rnn",
    ),
}


PYTHON_DOCS = Path(__file__).parent / "assets" / "python_docs.json.gz"
"""The text of Python 3.11.7's reference topics and standard-library docstrings (PSF licence),
made by ``scripts/make_data_assets.py``: the same corpus and tasks on every Python."""


@functools.cache
def python_docs() -> dict:
    """The shipped documentation: ``python`` (the version it was read from), ``topics``
    (``[topic, text]`` pairs in sorted order) and ``docstrings`` (``[name, sentence, area]``)."""
    with gzip.open(PYTHON_DOCS, "rt", encoding="utf-8") as f:
        return json.load(f)


def stdlib_docs() -> list[str]:
    """The Python reference topics (``help('assert')`` and friends) in sorted order, as
    Python 3.11 ships them (the same text whichever Python runs the course)."""
    return [text for _, text in python_docs()["topics"]]


def stdlib_docs_text() -> str:
    """The topics of :func:`stdlib_docs` joined by blank lines."""
    return "\n\n".join(stdlib_docs())


def stdlib_docs_sha256() -> str:
    """SHA-256 of the default corpus (its topics joined by end-of-text): the shipped model's
    card records the corpus it was trained on."""
    return hashlib.sha256(ENDOFTEXT.join(stdlib_docs()).encode("utf-8")).hexdigest()


def load_corpus(name: str = DEFAULT_CORPUS, cache_dir: str | Path | None = None) -> str:
    """Return a corpus as one string: ``"stdlib-docs"`` offline, or a name in ``CORPORA``."""
    if name == DEFAULT_CORPUS:
        return stdlib_docs_text()
    if name not in CORPORA:
        known = ", ".join([DEFAULT_CORPUS, *CORPORA])
        raise ValueError(f"unknown corpus {name!r}; known corpora: {known}")
    return fetch(CORPORA[name], cache_dir).read_text(encoding="utf-8")


def train_val_split(ids: torch.Tensor, val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a token sequence by position: the last ``val_fraction`` is validation.

    A contiguous split (not a random one) keeps validation text unseen: random windows
    would overlap the training windows almost everywhere.
    """
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    n_train = int(len(ids) * (1 - val_fraction))
    return ids[:n_train], ids[n_train:]


class SlidingWindowDataset(Dataset):
    """Input/target pairs cut from one long token sequence.

    Window ``i`` starts at ``i * stride``; the target is the input shifted by one token, so
    one window of ``context_length + 1`` tokens holds ``context_length`` training examples:
    predict token ``t + 1`` from tokens ``0..t`` for every ``t``.
    """

    def __init__(self, ids: Sequence[int] | torch.Tensor, context_length: int, stride: int | None = None):
        self.ids = torch.as_tensor(ids, dtype=torch.long)
        self.context_length = int(context_length)
        self.stride = self.context_length if stride is None else int(stride)
        if self.context_length < 1:
            raise ValueError(f"context_length must be at least 1, got {context_length}")
        if self.stride <= 0:
            raise ValueError(f"stride must be a positive number of tokens, got {stride}")
        if len(self.ids) < self.context_length + 1:
            raise ValueError(
                f"a window needs context_length + 1 = {self.context_length + 1} tokens, but the "
                f"data has only {len(self.ids)}; use a shorter context or more text"
            )

    def __len__(self) -> int:
        return (len(self.ids) - self.context_length - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"window {i} out of range for {len(self)} windows")
        start = (i % len(self)) * self.stride
        chunk = self.ids[start : start + self.context_length + 1]  # (T + 1,)
        return chunk[:-1], chunk[1:]  # (T,), (T,)


def make_dataloader(
    ids: Sequence[int] | torch.Tensor,
    context_length: int,
    batch_size: int,
    stride: int | None = None,
    shuffle: bool = True,
    drop_last: bool = True,
    seed: int = 0,
    num_workers: int = 0,
) -> DataLoader:
    """Batches of shape ``(B, T)``: inputs and targets for next-token prediction.

    The shuffle order comes from its own generator, so it does not depend on what other
    code drew from torch's global generator.
    """
    dataset = SlidingWindowDataset(ids, context_length, stride)
    if drop_last and len(dataset) < batch_size:
        raise ValueError(
            f"only {len(dataset)} windows for a batch of {batch_size} with drop_last=True; "
            "use a smaller batch_size, a smaller stride, or more data"
        )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(seed),
    )


# --------------------------------------------------------------------------------------
# A corpus made ready for training a language model
# --------------------------------------------------------------------------------------

TOKENIZERS = ("bpe", "char")


@dataclass
class Prepared:
    """A corpus made ready for training: its tokenizer and the two token streams."""

    tokenizer: BPETokenizer | CharTokenizer
    train_ids: torch.Tensor  # (N_train,)
    val_ids: torch.Tensor  # (N_val,)
    eos_id: int | None  # the end-of-text token between documents, if the tokenizer has one


def split_text(text: str, val_fraction: float = 0.1) -> tuple[str, str]:
    """``(train, validation)``: the last ``val_fraction`` of the text is validation, cut at the next
    document boundary (an end-of-text marker) when there is one, never inside it. The course model
    never trained on the validation part of the default corpus (``ENDOFTEXT.join(stdlib_docs())``),
    which chapter 14 also uses as held-out text for SmolLM2."""
    cut = int(len(text) * (1 - val_fraction))
    if ENDOFTEXT in text:  # split between documents, never inside the end-of-text marker
        cut = text.find(ENDOFTEXT, cut) if ENDOFTEXT in text[cut:] else cut
    return text[:cut], text[cut:]


def prepare_data(
    corpus: str = "stdlib-docs", tokenizer: str = "bpe", vocab_size: int = 1024, val_fraction: float = 0.1
) -> Prepared:
    """Corpus -> tokenizer trained on the training text only -> train and validation ids.

    The last ``val_fraction`` of the text is validation. With BPE, the offline corpus's
    documents are separated by an end-of-text token, so a model learns where a topic ends.
    """
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; choose one of {', '.join(TOKENIZERS)}")
    if tokenizer == "bpe" and corpus == DEFAULT_CORPUS:
        text = ENDOFTEXT.join(stdlib_docs())
    else:
        text = load_corpus(corpus)
    train_text, val_text = split_text(text, val_fraction)
    if tokenizer == "char":
        tok = CharTokenizer.from_text(text)
        encode, eos_id = tok.encode, None
    else:
        tok = train_bpe(train_text, vocab_size, special_tokens=[ENDOFTEXT])  # never merges across a document end
        encode, eos_id = (lambda t: tok.encode(t, allowed_special="all")), tok.special_tokens[ENDOFTEXT]
    train_ids, val_ids = (torch.tensor(encode(t), dtype=torch.long) for t in (train_text, val_text))
    return Prepared(tok, train_ids, val_ids, eos_id)
