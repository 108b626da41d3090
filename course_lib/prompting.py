"""Prompting and spending compute at inference (chapter 12).

- :func:`few_shot_prompt` writes k solved examples before the question (k = 0: zero-shot);
- :func:`classify_by_likelihood` answers each question with the most likely of a fixed set of
  labels, running the shared prompt once (a KV cache) so that many questions cost little;
- :func:`majority_vote` (self-consistency), :func:`best_of_n` and :func:`extract_number` are the
  pieces of the inference-time methods: sample several answers, then vote, or keep the best
  by a score.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Sequence

import torch

from .evaluation import option_scores
from .model import GPT
from .runtime import evaluating, model_device


def few_shot_prompt(
    examples: Sequence[tuple[str, str]],
    query: str,
    instruction: str = "",
    input_label: str = "Sentence",
    output_label: str = "Area",
) -> str:
    """``instruction``, then each example as ``Sentence: …\\nArea: …`` followed by a blank line, then
    the query ending in ``Area:`` for the model to complete. No examples: a zero-shot prompt."""
    parts = [instruction.strip() + "\n\n"] if instruction.strip() else []
    parts += [f"{input_label}: {text.strip()}\n{output_label}: {label.strip()}\n\n" for text, label in examples]
    return "".join(parts) + f"{input_label}: {query.strip()}\n{output_label}:"


@torch.no_grad()
def classify_by_likelihood(
    model: GPT, tokenizer, prefix: str, queries: Sequence[str], labels: Sequence[str], per_token: bool = True
) -> list[int]:
    """The index of the most likely label after ``prefix + query`` for each query. The prefix
    (instruction and examples, the same for every query) runs once into a KV cache; each query
    and each label then only adds its own tokens."""
    device = model_device(model)
    prefix_ids = tokenizer.encode(prefix, allowed_special="all")
    cache = model.new_cache(min(model.config.context_length, len(prefix_ids) + 1024))  # not SmolLM2's 8,192
    options = [tokenizer.encode(" " + label.strip()) for label in labels]
    choices = []
    with evaluating(model):
        if prefix_ids:
            model(torch.tensor([prefix_ids], device=device), cache=cache)
        for query in queries:
            query_ids = tokenizer.encode(query, allowed_special="all")
            scores = option_scores(model, query_ids, options, per_token, cache=cache)
            choices.append(max(range(len(scores)), key=scores.__getitem__))
    return choices


def majority_vote(answers: Sequence[Hashable | None]) -> Hashable | None:
    """The most common answer (self-consistency); a tie goes to the answer seen first; answers
    that could not be read (``None``) do not vote. ``None`` if no answer could be read."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)


def best_of_n(candidates: Sequence, scores: Sequence[float]):
    """The candidate with the highest score (the first of equals)."""
    if len(candidates) != len(scores) or not candidates:
        raise ValueError(f"need one score per candidate, got {len(candidates)} candidates and {len(scores)} scores")
    return candidates[max(range(len(scores)), key=scores.__getitem__)]


def extract_number(text: str) -> int | None:
    """The last whole number in ``text`` ("… so 23 + 58 = 81." -> 81), or None."""
    found = re.findall(r"-?\d+", text.replace(",", ""))
    return int(found[-1]) if found else None
