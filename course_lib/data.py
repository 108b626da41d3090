"""Training data: corpora, splits, and input/target windows.

The default corpus needs no network: it is the reference documentation that ships inside
every Python installation (``pydoc_data.topics``, about 465,000 characters of English
prose and code). Public corpora such as Tiny Shakespeare are one argument away: they are
downloaded once into a cache folder, checked against a SHA-256, and written atomically.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from .tokenization import ENDOFTEXT, BPETokenizer, CharTokenizer, train_bpe

DEFAULT_CORPUS = "stdlib-docs"
CACHE_ENV = "COURSE_DATA_DIR"


class DatasetUnavailableError(RuntimeError):
    """A corpus could not be downloaded or did not match its checksum."""


@dataclass(frozen=True)
class RemoteCorpus:
    """A public text file: where it lives, what it must hash to, and what it is."""

    url: str
    sha256: str
    filename: str
    description: str


CORPORA: dict[str, RemoteCorpus] = {
    "tiny-shakespeare": RemoteCorpus(
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        filename="tiny-shakespeare.txt",
        description="40,000 lines of Shakespeare's plays (1.1 MB), from Karpathy's char-rnn",
    ),
}


def stdlib_docs() -> list[str]:
    """The Python reference topics (``help('assert')`` and friends) in sorted order."""
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def stdlib_docs_text() -> str:
    """The topics of :func:`stdlib_docs` joined by blank lines."""
    return "\n\n".join(stdlib_docs())


def stdlib_docs_sha256() -> str:
    """SHA-256 of the default corpus as this Python ships it. It changes between Python
    versions (465,984 characters on 3.11, 498,510 on 3.12), so results that depend on the
    exact text (stored notebook outputs, the shipped model's card) record it."""
    return hashlib.sha256(ENDOFTEXT.join(stdlib_docs()).encode("utf-8")).hexdigest()


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "course_lib"))


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, path: str | Path, sha256: str | None, timeout: float = 30.0) -> Path:
    """Download ``url`` to ``path`` unless a verified copy is already there.

    The bytes go to a temporary file in the same folder and are renamed into place only
    after the checksum matches, so an interrupted or corrupted download never leaves a
    file that looks complete. ``sha256=None`` (for files whose publisher gives no checksum)
    skips the check but keeps the atomic write.
    """
    path = Path(path)
    if path.exists() and (sha256 is None or sha256_file(path) == sha256):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".part")
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            for block in iter(lambda: response.read(1 << 16), b""):
                digest.update(block)
                out.write(block)
        if sha256 is not None and digest.hexdigest() != sha256:
            raise DatasetUnavailableError(
                f"the file downloaded from {url} has SHA-256 {digest.hexdigest()}, expected "
                f"{sha256}; it was discarded. The source may have changed: download it by "
                f"hand, check it, and place it at {path}"
            )
        os.replace(tmp, path)
    except (urllib.error.URLError, OSError) as err:
        raise DatasetUnavailableError(
            f"could not download {url} ({err}). Are you offline? Place the file at {path} by "
            f"hand, or use the offline corpus load_corpus({DEFAULT_CORPUS!r})"
        ) from err
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def load_corpus(name: str = DEFAULT_CORPUS, cache_dir: str | Path | None = None) -> str:
    """Return a corpus as one string: ``"stdlib-docs"`` offline, or a name in ``CORPORA``."""
    if name == DEFAULT_CORPUS:
        return stdlib_docs_text()
    if name not in CORPORA:
        known = ", ".join([DEFAULT_CORPUS, *CORPORA])
        raise ValueError(f"unknown corpus {name!r}; known corpora: {known}")
    corpus = CORPORA[name]
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = download(corpus.url, folder / corpus.filename, corpus.sha256)
    return path.read_text(encoding="utf-8")


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
    cut = int(len(text) * (1 - val_fraction))
    if ENDOFTEXT in text:  # split between documents, never inside the end-of-text marker
        cut = text.find(ENDOFTEXT, cut) if ENDOFTEXT in text[cut:] else cut
    train_text, val_text = text[:cut], text[cut:]
    if tokenizer == "char":
        tok = CharTokenizer.from_text(text)
        encode, eos_id = tok.encode, None
    else:
        tok = train_bpe(train_text, vocab_size, special_tokens=[ENDOFTEXT])  # never merges across a document end
        encode, eos_id = (lambda t: tok.encode(t, allowed_special="all")), tok.special_tokens[ENDOFTEXT]
    train_ids, val_ids = (torch.tensor(encode(t), dtype=torch.long) for t in (train_text, val_text))
    return Prepared(tok, train_ids, val_ids, eos_id)


# --------------------------------------------------------------------------------------
# Labelled texts for classification (chapter 10)
# --------------------------------------------------------------------------------------

DOCSTRING_AREAS: dict[str, tuple[str, ...]] = {
    "files and the OS": (
        "os", "shutil", "pathlib", "glob", "tempfile", "io", "stat", "fnmatch", "filecmp", "zipfile",
        "tarfile", "gzip", "bz2", "lzma", "subprocess", "posixpath", "fileinput", "mmap",
    ),
    "networking": (
        "socket", "ssl", "http.client", "http.server", "http.cookiejar", "urllib.request", "urllib.parse",
        "smtplib", "ftplib", "imaplib", "poplib", "ipaddress", "email.message", "email.utils",
        "xmlrpc.client", "socketserver", "selectors",
    ),
    "numbers and maths": ("math", "cmath", "decimal", "fractions", "random", "statistics", "numbers"),
    "data structures": (
        "collections", "heapq", "bisect", "array", "queue", "copy", "dataclasses", "enum", "weakref",
        "graphlib", "types", "contextlib",
    ),
    "text": (
        "string", "re", "textwrap", "difflib", "unicodedata", "html", "html.parser", "codecs", "csv", "json",
        "json.decoder", "shlex", "gettext", "locale",
    ),
    "dates and time": ("datetime", "time", "calendar", "zoneinfo", "sched", "_strptime", "_pydatetime"),
}  # fmt: skip
"""Which area of the standard library each module belongs to (modules a Python lacks are skipped)."""

SPLITS = ("train", "val", "test")


@dataclass
class LabelledTexts:
    """Texts with integer labels, split into train / validation / test."""

    label_names: list[str]
    train: list[tuple[str, int]]
    val: list[tuple[str, int]]
    test: list[tuple[str, int]]

    def counts(self) -> dict[str, list[int]]:
        """Examples per label in each split."""
        return {
            split: [sum(1 for _, y in getattr(self, split) if y == k) for k in range(len(self.label_names))]
            for split in SPLITS
        }


def split_of(text: str, val_percent: int = 10, test_percent: int = 10) -> str:
    """``"train"``, ``"val"`` or ``"test"`` from a hash of the text alone: the same text lands in
    the same split whatever order the examples were found in, on every machine."""
    bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % 100
    return "test" if bucket < test_percent else "val" if bucket < test_percent + val_percent else "train"


def _split(examples: list[tuple[str, int]], label_names: list[str]) -> LabelledTexts:
    parts: dict[str, list[tuple[str, int]]] = {split: [] for split in SPLITS}
    for text, label in sorted(examples):
        parts[split_of(text)].append((text, label))
    return LabelledTexts(label_names, parts["train"], parts["val"], parts["test"])


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    import inspect

    paragraph = " ".join(re.split(r"\n\s*\n", inspect.cleandoc(doc).strip())[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    return match.group(1) if match else paragraph


def _public_objects(module) -> list:
    """Public functions and classes defined in ``module`` (not re-exported from elsewhere:
    ``statistics.reduce`` is ``functools.reduce``), and the public methods of those classes."""
    import inspect

    found = []
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
            continue
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        found.append(obj)
        if inspect.isclass(obj):
            found += [
                member
                for member_name, member in sorted(vars(obj).items())
                if not member_name.startswith("_")
                and (inspect.isfunction(member) or inspect.ismethoddescriptor(member))
            ]
    return found


def _docstring_facts() -> list[tuple[str, str, int]]:
    """``(qualified name, first sentence, area)`` for every public function, class and method of
    the modules in :data:`DOCSTRING_AREAS` whose docstring starts with a real sentence (fragments
    of fewer than four words and bare signatures are dropped)."""
    import importlib

    facts = []
    for label, modules in enumerate(DOCSTRING_AREAS.values()):
        for module_name in modules:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            for obj in _public_objects(module):
                doc = obj.__doc__ if isinstance(obj, type) else getattr(obj, "__doc__", None)
                if not isinstance(doc, str) or not doc.strip():
                    continue
                sentence = first_sentence(doc)
                if len(sentence.split()) < 4 or len(sentence) > 300 or re.match(r"^[\w.]+\(.*\)\s*(->|$)", sentence):
                    continue
                qualname = getattr(obj, "__qualname__", obj.__name__)
                name = f"{module_name}.{obj.__name__ if '<locals>' in qualname else qualname}"
                facts.append((name if isinstance(obj, type) else name + "()", sentence, label))
    return facts


def docstring_areas() -> LabelledTexts:
    """Which area of the standard library a docstring comes from, generated from this Python.

    Each example is the first sentence of the docstring of a public function, class or method
    of a module in :data:`DOCSTRING_AREAS`, labelled with the module's area. Fragments (fewer
    than four words, bare signatures) are dropped, and so is a sentence found in two areas;
    a sentence found twice in one area is kept once. Docstrings change between Python
    versions: count what you get rather than expecting a number.
    """
    areas: dict[str, set[int]] = {}
    for _, sentence, label in _docstring_facts():
        areas.setdefault(sentence, set()).add(label)
    examples = [(text, next(iter(labels))) for text, labels in areas.items() if len(labels) == 1]
    return _split(examples, list(DOCSTRING_AREAS))


SMS_SPAM = RemoteCorpus(
    url="https://archive.ics.uci.edu/static/public/228/sms+spam+collection.zip",
    sha256="1587ea43e58e82b14ff1f5425c88e17f8496bfcdb67a583dbff9eefaf9963ce3",
    filename="sms-spam-collection.zip",
    description="5,574 SMS messages labelled ham or spam (UCI, CC BY 4.0)",
)
SMS_SPAM_MEMBER = "SMSSpamCollection"
SMS_SPAM_MEMBER_SHA256 = "7d039a24a6083ed9ef0f806ebad56bbb976e3aeb8de05669173bfdc4996c239d"


def extract_member(archive: str | Path, member: str, path: str | Path, sha256: str) -> Path:
    """Extract one file of a zip archive to ``path``, checked against ``sha256`` and renamed
    into place only when complete (as :func:`download` does)."""
    import zipfile

    path = Path(path)
    if path.exists() and sha256_file(path) == sha256:
        return path
    with zipfile.ZipFile(archive) as z:
        try:
            data = z.read(member)
        except KeyError:
            raise DatasetUnavailableError(f"{archive} has no file {member!r}; it holds {z.namelist()[:10]}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise DatasetUnavailableError(
            f"{member} in {archive} has SHA-256 {digest}, expected {sha256}; nothing was extracted"
        )
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def sms_spam(cache_dir: str | Path | None = None, source: RemoteCorpus = SMS_SPAM) -> LabelledTexts:
    """The SMS Spam Collection (ham = 0, spam = 1), downloaded once into the cache folder,
    checked, and split by hash like :func:`docstring_areas`. Needs the network the first time."""
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    archive = download(source.url, folder / source.filename, source.sha256)
    table = extract_member(archive, SMS_SPAM_MEMBER, folder / "SMSSpamCollection.tsv", SMS_SPAM_MEMBER_SHA256)
    label_names = ["ham", "spam"]
    examples = {}
    for number, line in enumerate(table.read_text(encoding="utf-8").splitlines(), 1):
        label, _, text = line.partition("\t")
        if label not in label_names or not text:
            raise DatasetUnavailableError(f"{table}, line {number}: expected 'ham' or 'spam', a tab, and a message")
        examples[text] = label_names.index(label)  # a few messages occur twice: keep one
    return _split(list(examples.items()), label_names)


# --------------------------------------------------------------------------------------
# Instructions (chapter 11): a "Python docs assistant" generated from this Python
# --------------------------------------------------------------------------------------

Instruction = dict[str, str]
"""Alpaca form: ``instruction``, ``input`` (may be empty), ``output``; generated examples add
``kind`` (``describe``, ``name``, ``area``, ``explain``)."""

AREA_INSTRUCTION = "Which area of the standard library is this about: " + ", ".join(DOCSTRING_AREAS) + "?"


@dataclass
class InstructionSet:
    train: list[Instruction]
    val: list[Instruction]
    test: list[Instruction]

    def kinds(self) -> dict[str, list[int]]:
        """Examples of each kind in train / val / test."""
        kinds = sorted({e.get("kind", "") for split in SPLITS for e in getattr(self, split)})
        return {k: [sum(e.get("kind", "") == k for e in getattr(self, split)) for split in SPLITS] for k in kinds}


def reference_sections() -> list[tuple[str, str]]:
    """``(heading, first sentence)`` of each section of the language reference topics
    (``help("with")`` and friends), skipping the grammar lines (``with_stmt ::= ...``) and code."""
    sections = []
    for topic in stdlib_docs():
        lines = topic.splitlines()
        for k in range(len(lines) - 1):
            heading, rule = lines[k].strip(), lines[k + 1].strip()
            if not heading or len(rule) < 3 or set(rule) not in ({"*"}, {"="}, {"-"}):
                continue
            prose = []
            for line in lines[k + 2 :]:
                if set(line.strip()) in ({"*"}, {"="}, {"-"}) and len(line.strip()) >= 3:
                    break  # the next heading's rule: this section had no prose
                if not line.strip():
                    if prose:
                        break
                    continue
                if line.startswith(" ") or "::=" in line:  # code, grammar
                    if prose:
                        break
                    continue
                prose.append(line.strip())
            sentence = first_sentence(" ".join(prose)) if prose else ""
            if len(sentence.split()) >= 5 and len(sentence) <= 250 and sentence.endswith("."):
                sections.append((heading.replace('"', "`"), sentence.replace('"', "`")))
    return sorted(set(sections))


def docs_instructions() -> InstructionSet:
    """A "Python docs assistant" instruction set generated from this Python's own documentation.

    - ``describe``: "What does `math.sqrt()` do?" -> the first sentence of its docstring;
    - ``name``: the reverse, a sentence -> the name of what it documents;
    - ``area``: chapter 10's task as an instruction -> the area's name (exact match is checkable);
    - ``explain``: "Explain `with` statement in one sentence." -> the reference section's first
      sentence (grammar lines left out).

    Only sentences that document exactly one object are used. Examples are split by a hash of
    the *fact* (the sentence, or the section heading), so a held-out sentence is never trained
    on in any of its forms; the area examples fall in the same splits as chapter 10's.
    """
    facts = _docstring_facts()
    owners: dict[str, set[str]] = {}
    for name, sentence, _ in facts:
        owners.setdefault(sentence, set()).add(name)
    areas = list(DOCSTRING_AREAS)
    parts: dict[str, list[Instruction]] = {split: [] for split in SPLITS}
    for name, sentence, label in sorted(set(facts)):
        if len(owners[sentence]) != 1:
            continue  # "Return self==value." documents dozens of methods
        split = parts[split_of(sentence)]
        split.append({"instruction": f"What does `{name}` do?", "input": "", "output": sentence, "kind": "describe"})
        split.append(
            {
                "instruction": "Which function, class or method of the standard library does this describe?",
                "input": sentence,
                "output": f"`{name}`",
                "kind": "name",
            }
        )
        split.append({"instruction": AREA_INSTRUCTION, "input": sentence, "output": areas[label], "kind": "area"})
    for heading, sentence in reference_sections():
        parts[split_of(heading)].append(
            {"instruction": f"Explain {heading} in one sentence.", "input": "", "output": sentence, "kind": "explain"}
        )
    return InstructionSet(parts["train"], parts["val"], parts["test"])


ALPACA_DATA = RemoteCorpus(
    url="https://raw.githubusercontent.com/rasbt/LLMs-from-scratch/4ac480c9ae56ead3ba3bf71060ecbcd783bb8dc6/"
    "ch07/01_main-chapter-code/instruction-data.json",
    sha256="7e09a9af353722ca15c18bc580f093f9c39d3178335a75177319cb1e1d163944",
    filename="llms-from-scratch-instruction-data.json",
    description="1,100 Alpaca-style instructions of Build a Large Language Model (From Scratch), ch. 7 (Apache-2.0)",
)


def book_instructions(cache_dir: str | Path | None = None, source: RemoteCorpus = ALPACA_DATA) -> InstructionSet:
    """The instruction set of *Build a Large Language Model (From Scratch)* (1,100 examples),
    downloaded once and checked, split by a hash of each instruction. Needs the network the first time."""
    import json

    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = download(source.url, folder / source.filename, source.sha256)
    entries = json.loads(path.read_text(encoding="utf-8"))
    parts: dict[str, list[Instruction]] = {split: [] for split in SPLITS}
    for k, entry in enumerate(entries):
        if not {"instruction", "input", "output"} <= set(entry):
            raise DatasetUnavailableError(f"{path}, entry {k}: expected the keys instruction, input and output")
        parts[split_of(entry["instruction"] + entry["input"])].append(
            {key: entry[key] for key in ("instruction", "input", "output")}
        )
    return InstructionSet(parts["train"], parts["val"], parts["test"])


def docs_multiple_choice(examples: list[Instruction], n_options: int = 4, seed: int = 0) -> list[dict]:
    """Multiple-choice questions from ``describe`` examples: "What does `x` do?" with its own
    sentence among ``n_options - 1`` sentences of other objects, in a shuffled order.
    Each question is ``{"question", "options", "answer"}`` (``answer``: the right option's index)."""
    import random

    describe = [e for e in examples if e.get("kind") == "describe"]
    if len(describe) < n_options:
        raise ValueError(f"need at least {n_options} describe examples to make questions, got {len(describe)}")
    rng = random.Random(seed)
    questions = []
    for k, example in enumerate(describe):
        others = [e["output"] for j, e in enumerate(describe) if j != k and e["output"] != example["output"]]
        options = rng.sample(others, n_options - 1) + [example["output"]]
        rng.shuffle(options)
        questions.append(
            {"question": example["instruction"], "options": options, "answer": options.index(example["output"])}
        )
    return questions
