"""The data sets of the fine-tuning chapters, one small function per task.

Each task is a list of examples split into train / validation / test by a hash of the text
(:func:`split_of`), so an example lands in the same split on every machine and in every order:

- chapter 10, classification: :func:`docstring_areas` (offline), :func:`sms_spam` (downloaded);
- chapter 11, instructions: :func:`docs_instructions` (offline), :func:`book_instructions`
  (downloaded);
- chapters 11 and 12, multiple choice: :func:`docs_multiple_choice`;
- chapter 13, a task a program checks: :func:`addition_problems`, with its checkers
  :func:`addition_reward` (strict) and :func:`loose_addition_reward` (one a policy can game).

The offline tasks are generated from the standard library's own docstrings and reference
documentation; downloads go through :mod:`course_lib.files` (cached, checked, atomic).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .data import python_docs, stdlib_docs
from .files import DatasetUnavailableError, RemoteFile, cache_folder, extract_member, fetch

SPLITS = ("train", "val", "test")


def split_of(text: str, val_percent: int = 10, test_percent: int = 10) -> str:
    """``"train"``, ``"val"`` or ``"test"`` from a hash of the text alone: the same text lands in
    the same split whatever order the examples were found in, on every machine."""
    bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % 100
    return "test" if bucket < test_percent else "val" if bucket < test_percent + val_percent else "train"


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


def _split(examples: list[tuple[str, int]], label_names: list[str]) -> LabelledTexts:
    parts: dict[str, list[tuple[str, int]]] = {split: [] for split in SPLITS}
    for text, label in sorted(examples):
        parts[split_of(text)].append((text, label))
    return LabelledTexts(label_names, parts["train"], parts["val"], parts["test"])


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    paragraph = " ".join(re.split(r"\n\s*\n", inspect.cleandoc(doc).strip())[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    return match.group(1) if match else paragraph


def docstring_facts() -> list[tuple[str, str, int]]:
    """``(qualified name, first sentence, area)`` for every public function, class and method of
    the modules in :data:`DOCSTRING_AREAS` whose docstring starts with a real sentence, as
    Python 3.11 ships them (read from the course's asset, see :func:`data.python_docs`)."""
    return [(name, sentence, label) for name, sentence, label in python_docs()["docstrings"]]


def module_of(name: str) -> str:
    """The module of :data:`DOCSTRING_AREAS` a qualified name belongs to, the longest that
    prefixes it: ``"http.client.HTTPConnection.close()"`` is in ``http.client``, not ``http``."""
    modules = [m for area in DOCSTRING_AREAS.values() for m in area if name == m or name.startswith(m + ".")]
    if not modules:
        raise ValueError(f"{name!r} is in none of the modules of DOCSTRING_AREAS")
    return max(modules, key=len)


def docstring_modules() -> dict[str, str]:
    """Each docstring sentence of :func:`docstring_facts` and the module it comes from (the first
    in sorted order, for a sentence several objects of one area share). The texts of chapters 10
    to 12 come in modules, up to a few dozen each, and the texts of one module are right or wrong
    together more often than texts drawn one by one: the module is the unit to cluster them by
    (:func:`~course_lib.evaluation.clustered_difference`)."""
    modules: dict[str, str] = {}
    for name, sentence, _ in sorted(docstring_facts()):
        modules.setdefault(sentence, module_of(name))
    return modules


def docstring_areas() -> LabelledTexts:
    """Which area of the standard library a docstring comes from, generated from this Python.

    Each example is the first sentence of the docstring of a public function, class or method
    of a module in :data:`DOCSTRING_AREAS`, labelled with the module's area. Fragments (fewer
    than four words, bare signatures) are dropped, and so is a sentence found in two areas;
    a sentence found twice in one area is kept once. The docstrings are Python 3.11's, shipped
    with course_lib, so the task is the same on every Python.
    """
    areas: dict[str, set[int]] = {}
    for _, sentence, label in docstring_facts():
        areas.setdefault(sentence, set()).add(label)
    examples = [(text, next(iter(labels))) for text, labels in areas.items() if len(labels) == 1]
    return _split(examples, list(DOCSTRING_AREAS))


SMS_SPAM = RemoteFile(
    url="https://archive.ics.uci.edu/static/public/228/sms+spam+collection.zip",
    sha256="1587ea43e58e82b14ff1f5425c88e17f8496bfcdb67a583dbff9eefaf9963ce3",
    filename="sms-spam-collection.zip",
    description="5,574 SMS messages labelled ham or spam (UCI, CC BY 4.0)",
)
SMS_SPAM_MEMBER = "SMSSpamCollection"
SMS_SPAM_MEMBER_SHA256 = "7d039a24a6083ed9ef0f806ebad56bbb976e3aeb8de05669173bfdc4996c239d"


def sms_spam(cache_dir: str | Path | None = None, source: RemoteFile = SMS_SPAM) -> LabelledTexts:
    """The SMS Spam Collection (ham = 0, spam = 1), downloaded once into the cache folder,
    checked, and split by hash like :func:`docstring_areas`. Needs the network the first time."""
    archive = fetch(source, cache_dir)
    table = extract_member(
        archive, SMS_SPAM_MEMBER, cache_folder(cache_dir) / "SMSSpamCollection.tsv", SMS_SPAM_MEMBER_SHA256
    )
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
    facts = docstring_facts()
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


ALPACA_DATA = RemoteFile(
    url="https://raw.githubusercontent.com/rasbt/LLMs-from-scratch/4ac480c9ae56ead3ba3bf71060ecbcd783bb8dc6/"
    "ch07/01_main-chapter-code/instruction-data.json",
    sha256="7e09a9af353722ca15c18bc580f093f9c39d3178335a75177319cb1e1d163944",
    filename="llms-from-scratch-instruction-data.json",
    description="1,100 Alpaca-style instructions of Build a Large Language Model (From Scratch), ch. 7 (Apache-2.0)",
)


def book_instructions(cache_dir: str | Path | None = None, source: RemoteFile = ALPACA_DATA) -> InstructionSet:
    """The instruction set of *Build a Large Language Model (From Scratch)* (1,100 examples),
    downloaded once and checked, split by a hash of each instruction. Needs the network the first time."""
    path = fetch(source, cache_dir)
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


# --------------------------------------------------------------------------------------
# A task a program checks (chapter 13): addition, the answer's digits reversed
# --------------------------------------------------------------------------------------

ADDITION_CHARACTERS = "0123456789+=\n"
"""The whole vocabulary of the addition task: digits, the two signs, and the newline that ends an answer."""

_ADDITION_PROMPT = re.compile(r"(\d+)\+(\d+)=")


@dataclass
class AdditionProblems:
    """Addition prompts (``"37+45="``) split into train / validation / test by a hash of the prompt."""

    train: list[str]
    val: list[str]
    test: list[str]


def addition_problems(max_operand: int = 99, val_percent: int = 5, test_percent: int = 15) -> AdditionProblems:
    """Every sum ``a+b=`` with 0 <= a, b <= ``max_operand``, each prompt placed in one split by a
    hash of its text (:func:`split_of`): a problem is held out or not whatever else is generated, so
    no held-out prompt is ever a training prompt."""
    if max_operand < 9:
        raise ValueError(f"max_operand must be at least 9 (at least the one-digit sums), got {max_operand}")
    parts: dict[str, list[str]] = {split: [] for split in SPLITS}
    for a in range(max_operand + 1):
        for b in range(max_operand + 1):
            prompt = f"{a}+{b}="
            parts[split_of(prompt, val_percent, test_percent)].append(prompt)
    return AdditionProblems(parts["train"], parts["val"], parts["test"])


def addition_answer(prompt: str) -> str:
    """The answer the checker expects: the sum's digits in reverse order (``"37+45="`` -> ``"28"``,
    82 written units first). Written this way, each digit depends on the two digits of the same
    place and on the carry of the digit just written: the order a person adds in. Written the
    usual way, the first digit would depend on a carry from digits not written yet."""
    match = _ADDITION_PROMPT.fullmatch(prompt)
    if match is None:
        raise ValueError(f"an addition prompt looks like '37+45=', got {prompt!r:.40}")
    return str(int(match.group(1)) + int(match.group(2)))[::-1]


def addition_example(prompt: str, encode: Callable[[str], list[int]]) -> tuple[list[int], int]:
    """A labelled example for supervised training: the ids of the prompt, its answer and the newline
    that ends it, and the prompt's length in ids (the part the loss masks)."""
    return encode(prompt + addition_answer(prompt) + "\n"), len(encode(prompt))


def addition_reward(prompt: str, answer: str) -> float:
    """The strict checker: 1.0 when the answer is exactly the reversed sum (surrounding
    whitespace aside), else 0.0."""
    return 1.0 if answer.strip() == addition_answer(prompt) else 0.0


def loose_addition_reward(prompt: str, answer: str) -> float:
    """A loose checker: 1.0 when the reversed sum appears anywhere in the answer. It pays an answer
    that writes several guesses in a row as much as a right one: a policy can learn to hedge."""
    return 1.0 if addition_answer(prompt) in answer else 0.0
