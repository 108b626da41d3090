"""Evaluating an assistant (chapter 11): the answer's form, exact match, multiple-choice
questions scored by log-likelihood, and a model as judge.

- :func:`has_expected_form` checks what can be checked without knowing the answer: a sentence,
  a name in backticks, one of the areas;
- :func:`option_scores` scores each option of a multiple-choice question by the log-probability
  the model gives its tokens after the question (summed, or per token so long options are not
  penalised): the model never has to *write* anything, so even a small model can be compared
  with a large one;
- :func:`judge_preference` asks a chat model which of two answers is better and reads the
  probabilities of "A" and "B" as its next token; asking again with the answers swapped shows
  its position bias.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .attention import KVCache
from .model import GPT
from .pretrained import apply_chat_template
from .runtime import evaluating, model_device
from .tasks import DOCSTRING_AREAS, Instruction

NAME_FORM = re.compile(r"`[A-Za-z_][\w.]*(\(\))?`")


def has_expected_form(example: Instruction, text: str) -> bool:
    """Whether an answer has the form its kind asks for (right or wrong): a sentence ending with
    a full stop (``describe``, ``explain``), a dotted name in backticks (``name``), one of the
    area names (``area``)."""
    kind, text = example.get("kind"), text.strip()
    if kind in ("describe", "explain"):
        return len(text.split()) >= 3 and text.endswith(".") and "###" not in text
    if kind == "name":
        return NAME_FORM.fullmatch(text) is not None
    if kind == "area":
        return text in DOCSTRING_AREAS
    raise ValueError(f"no expected form for examples of kind {kind!r}; known: describe, explain, name, area")


def exact_match(text: str, expected: str) -> bool:
    """The same answer, up to surrounding whitespace."""
    return text.strip() == expected.strip()


@torch.no_grad()
def option_scores(
    model: GPT,
    prompt_ids: Sequence[int],
    options: Sequence[Sequence[int]],
    per_token: bool = True,
    cache: KVCache | None = None,
) -> list[float]:
    """The log-probability of each option's tokens after ``prompt_ids``, summed over the option's
    tokens (``per_token=False``) or averaged (``per_token=True``). All options run as one batch.

    With a ``cache`` that already holds a shared prefix (few-shot examples), ``prompt_ids`` are the
    tokens after it; each option is then scored from the cached state, which is left as it was.
    """
    if not options or any(len(o) == 0 for o in options):
        raise ValueError("every option needs at least one token")
    if cache is not None:
        return _option_scores_after_cache(model, prompt_ids, options, per_token, cache)
    rows = [list(prompt_ids) + list(o) for o in options]
    if max(map(len, rows)) > model.config.context_length:
        raise ValueError(
            f"prompt + option is {max(map(len, rows))} tokens, longer than the context of {model.config.context_length}"
        )
    T = max(map(len, rows))
    ids = torch.zeros(len(rows), T, dtype=torch.long)  # (N, T), padded on the right (never read)
    for k, row in enumerate(rows):
        ids[k, : len(row)] = torch.tensor(row)
    with evaluating(model):
        logprobs = F.log_softmax(model(ids.to(model_device(model))).float(), dim=-1).cpu()  # (N, T, V)
    scores = []
    start = len(prompt_ids)
    for k, option in enumerate(options):
        positions = torch.arange(start - 1, start - 1 + len(option))  # the logits that predict the option
        total = logprobs[k, positions, torch.tensor(list(option))].sum().item()
        scores.append(total / len(option) if per_token else total)
    return scores


def _option_scores_after_cache(
    model: GPT, prompt_ids: Sequence[int], options: Sequence[Sequence[int]], per_token: bool, cache: KVCache
) -> list[float]:
    if not prompt_ids:
        raise ValueError("with a cache, prompt_ids must hold at least the token the first option follows")
    device = model_device(model)
    start = cache.length
    first = F.log_softmax(model(torch.tensor([list(prompt_ids)], device=device), cache=cache)[0, -1].float(), dim=-1)
    after_prompt = cache.length
    scores = []
    for option in options:
        total = first[option[0]].item()  # (V,) log-probabilities after the prompt
        if len(option) > 1:  # the option's own tokens predict its next ones
            logprobs = F.log_softmax(
                model(torch.tensor([list(option[:-1])], device=device), cache=cache)[0].float(), -1
            )
            total += logprobs[torch.arange(len(option) - 1), torch.tensor(list(option[1:]))].sum().item()
            cache.truncate(after_prompt)
        scores.append(total / len(option) if per_token else total)
    cache.truncate(start)
    return scores


def multiple_choice_right(
    model: GPT, tokenizer, questions: Sequence[dict], prompt_of: Callable[[str], str], per_token: bool = True
) -> list[int]:
    """Chapter 11's multiple choice, item by item: 1 where the option with the best
    :func:`option_scores` after ``prompt_of(question)`` is the right one, else 0 (questions as
    :func:`~course_lib.tasks.docs_multiple_choice` makes them). The list is what
    :func:`paired_difference` compares two models (or two formats of one) with."""
    right = []
    for question in questions:
        prompt = tokenizer.encode(prompt_of(question["question"]), allowed_special="all")
        scores = option_scores(model, prompt, [tokenizer.encode(o) for o in question["options"]], per_token)
        right.append(int(max(range(len(scores)), key=scores.__getitem__) == question["answer"]))
    return right


JUDGE_QUESTION = (
    "Here is a question about Python and two answers.\n\nQuestion: {question}\n\nAnswer A: {first}\n\n"
    "Answer B: {second}\n\nWhich answer is correct? Reply with the letter A or B only."
)


@torch.no_grad()
def judge_preference(model: GPT, tokenizer, chat_template: str, question: str, first: str, second: str) -> float:
    """P(the judge prefers the *first* answer shown): the probability of "A" as the first token of
    its reply, renormalised over "A" and "B"."""
    prompt = apply_chat_template(
        chat_template,
        [{"role": "user", "content": JUDGE_QUESTION.format(question=question, first=first, second=second)}],
    )
    ids = torch.tensor([tokenizer.encode(prompt, allowed_special="all")])
    logits = model(ids.to(model_device(model)))[0, -1].float()  # (V,)
    a, b = tokenizer.encode("A"), tokenizer.encode("B")
    if len(a) != 1 or len(b) != 1:
        raise ValueError("the judge's tokenizer must encode 'A' and 'B' as single tokens")
    pair = torch.softmax(torch.stack([logits[a[0]], logits[b[0]]]), dim=0)
    return pair[0].item()


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of an accuracy of ``correct`` out of ``n``: where the true
    rate plausibly lies. Unlike p ± 1.96·sqrt(p(1-p)/n) it stays within [0, 1] and is not of
    width 0 at 0 or n correct (Wilson, 1927).

    It is the interval of one accuracy. To compare two systems, do not ask whether their intervals
    overlap: two 95% intervals can overlap while the difference is clearly real. Compare them by
    their :func:`paired_difference` on the same items."""
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"need 0 <= correct <= n and n >= 1, got {correct} of {n}")
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy_text(correct: int, n: int) -> str:
    """``"0.708 [0.62, 0.78] (46/65)"``: an accuracy with its n and its 95% Wilson interval."""
    low, high = wilson_interval(correct, n)
    return f"{correct / n:.3f} [{low:.2f}, {high:.2f}] ({correct}/{n})"


def mean_interval(values: Sequence[float], z: float = 1.96) -> tuple[float, tuple[float, float]]:
    """``(mean, (low, high))``: the mean of per-item scores (e.g. each problem's share of right
    samples) and its 95% interval, mean ± z · standard error over the items (normal approximation;
    the items, not the samples within an item, are the independent draws)."""
    n = len(values)
    if n < 2:
        raise ValueError(f"an interval needs at least 2 values, got {n}")
    mean = sum(values) / n
    spread = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    return mean, (mean - z * spread, mean + z * spread)


def areas_named(text: str) -> list[str]:
    """The area names (:data:`DOCSTRING_AREAS`) a free-form answer mentions, case-insensitively and
    as whole words ("text" is not named in "context"): a chat model answers in sentences, so
    "names exactly the right area" is its exact match."""
    return [area for area in DOCSTRING_AREAS if re.search(rf"\b{re.escape(area)}\b", text, re.IGNORECASE)]


@dataclass(frozen=True)
class PairedDifference:
    """Two systems scored on the same items: the mean of their per-item differences (A − B), its
    95% interval, a two-sided p-value, and n. For right/wrong items also how many items only A got
    right (``a_only``) and only B (``b_only``): the items where they disagree, all that the
    difference is made of."""

    difference: float
    low: float
    high: float
    p_value: float
    n: int
    a_only: int | None = None
    b_only: int | None = None

    @property
    def a_better(self) -> bool:
        """The interval lies above 0 (and, for right/wrong items, McNemar's p is below 0.05: with few
        disagreements the normal interval is too narrow, and the exact test guards it)."""
        return self.low > 0 and (self.a_only is None or self.p_value < 0.05)

    @property
    def b_better(self) -> bool:
        return self.high < 0 and (self.a_only is None or self.p_value < 0.05)

    def __str__(self) -> str:
        return f"{self.difference:+.3f} [{self.low:+.3f}, {self.high:+.3f}], p = {self.p_value:.2g}, n = {self.n:,}"


def mcnemar_p(a_only: int, b_only: int) -> float:
    """McNemar's exact test: the two-sided p-value of ``a_only`` items right for A alone against
    ``b_only`` right for B alone, when each disagreement is a fair coin (no difference). Items both
    get right, or both wrong, say nothing about which is better and do not enter."""
    if a_only < 0 or b_only < 0:
        raise ValueError(f"counts of items must be 0 or more, got {a_only} and {b_only}")
    n = a_only + b_only
    tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_difference(a: Sequence[float], b: Sequence[float], z: float = 1.96) -> PairedDifference:
    """Compare systems A and B scored on the same items (``a[i]`` and ``b[i]`` are the scores of item
    i: 0 or 1 for right or wrong, or any number, such as an item's mean over several seeds).

    The difference is the mean of the per-item differences a[i] − b[i], its interval that mean
    ± z · standard error over the items. Pairing is what makes it sharp: an item that is easy (or
    hard) for both cancels out, so only the items where they disagree count. The p-value is
    McNemar's exact test for right/wrong scores, else the normal approximation of the same
    interval. Say "A is better" only when the interval excludes 0 (``a_better``; for right/wrong
    items McNemar's p must be below 0.05 too); otherwise these n items cannot tell the two apart."""
    if len(a) != len(b):
        raise ValueError(f"paired scores need one score of each system per item, got {len(a)} and {len(b)} scores")
    n = len(a)
    if n < 2:
        raise ValueError(f"a paired difference needs at least 2 items, got {n}")
    differences = [x - y for x, y in zip(a, b)]
    mean, (low, high) = mean_interval(differences, z)
    if all(x in (0, 1) for x in [*a, *b]):
        a_only = sum(1 for d in differences if d > 0)
        b_only = sum(1 for d in differences if d < 0)
        return PairedDifference(mean, low, high, mcnemar_p(a_only, b_only), n, a_only, b_only)
    spread = (high - low) / (2 * z)
    p = 1.0 if spread == 0 and mean == 0 else 0.0 if spread == 0 else math.erfc(abs(mean) / spread / math.sqrt(2))
    return PairedDifference(mean, low, high, p, n)


def per_item_mean(runs: Sequence[Sequence[float]]) -> list[float]:
    """The mean of each item over several runs (seeds) scored on the same items: one number per
    item, to compare two methods over their seeds with :func:`paired_difference`. The interval then
    counts the items as the random draws and averages the seeds within each item: it says how well
    these seeds' average is measured, not how far a new seed could fall."""
    if not runs or len({len(r) for r in runs}) != 1:
        raise ValueError(
            f"runs must be one or more score lists of the same length, got lengths {[len(r) for r in runs]}"
        )
    return [sum(item) / len(runs) for item in zip(*runs)]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment for several comparisons drawn from one table: with m tests at
    5% each, about one in twenty null differences looks real by chance. The smallest p-value is
    multiplied by m, the next by m − 1, and so on (kept monotone, capped at 1); a comparison is
    significant when its adjusted p is below 0.05. It controls the chance of any false claim."""
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted, running = [0.0] * m, 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[k]))
        adjusted[k] = running
    return adjusted
