"""Evaluating an assistant (chapter 11): the answer's form, exact match, multiple-choice
questions scored by log-likelihood, and a model as judge; and comparing systems (every chapter).

- :func:`has_expected_form` checks what can be checked without knowing the answer: a sentence,
  a name in backticks, one of the areas;
- :func:`option_scores` scores each option of a multiple-choice question by the log-probability
  the model gives its tokens after the question (summed, or per token so long options are not
  penalised): the model never has to *write* anything, so even a small model can be compared
  with a large one;
- :func:`judge_preference` asks a chat model which of two answers is better and reads the
  probabilities of "A" and "B" as its next token; asking again with the answers swapped shows
  its position bias.

And the statistics every chapter compares with, built so that the obvious call is the right one:

- one accuracy: :func:`wilson_interval`; a mean over items: :func:`mean_interval` (t interval);
- two systems on the same items: :func:`paired_difference` (a score interval and McNemar's exact
  p for right/wrong items, a t interval for numbers), :func:`clustered_difference` when items come
  in groups (tokens in windows);
- whether a gain differs between two groups: :func:`contrast`, one interval, not two tests;
- several systems: :func:`compare_family`, a family declared before looking, Holm-adjusted;
- recipes rather than runs: :func:`recipe_difference` over seeds (the seeds counted as drawn),
  :func:`compare_recipes` for a family of them, :func:`seeds_power`, :func:`outside_range_probability`;
- how many items a difference needs: :func:`items_needed` (the exact test's power,
  :func:`mcnemar_power`), planned from the smallest difference worth finding.

Every verdict (``a_better``, ``b_better``, ``Family.above``) at ``level`` is a test at 1 − level,
and none is given from an interval of width 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from statistics import NormalDist

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
    """``"0.708 [0.59, 0.80] (46/65)"``: an accuracy with its n and its 95% Wilson interval."""
    low, high = wilson_interval(correct, n)
    return f"{correct / n:.3f} [{low:.2f}, {high:.2f}] ({correct}/{n})"


def areas_named(text: str) -> list[str]:
    """The area names (:data:`DOCSTRING_AREAS`) a free-form answer mentions, case-insensitively and
    as whole words ("text" is not named in "context"): a chat model answers in sentences, so
    "names exactly the right area" is its exact match."""
    return [area for area in DOCSTRING_AREAS if re.search(rf"\b{re.escape(area)}\b", text, re.IGNORECASE)]


# -- statistics: one accuracy, two systems, families, recipes ------------------------------------------


def _normal_quantile(level: float) -> float:
    """The z of a two-sided interval at ``level`` (1.96 at 0.95)."""
    _check_level(level)
    return NormalDist().inv_cdf(0.5 + level / 2)


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"a confidence level lies between 0 and 1, got {level}")


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (modified
    Lentz): Student's t distribution without depending on scipy."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast only below the mean: use symmetry
        return 1.0 - _incomplete_beta(1.0 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            numerator = 1.0
        elif i % 2 == 0:
            numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            numerator = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + numerator * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + numerator / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return front * (f - 1.0)


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom (the p of a t test)."""
    if df <= 0:
        raise ValueError(f"a t distribution needs df > 0, got {df}")
    if math.isinf(t):
        return 0.0
    return _incomplete_beta(df / (df + t * t), df / 2, 0.5)


def t_quantile(level: float, df: float) -> float:
    """The t of a two-sided interval at ``level`` with ``df`` degrees of freedom (2.365 for 95% and
    7 df, where the normal z is 1.96: with few units the interval must be wider)."""
    _check_level(level)
    if df <= 0:
        raise ValueError(f"a t distribution needs df > 0, got {df}")
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > 1 - level:
        high *= 2
    for _ in range(200):  # bisection: p falls as t grows, until the floats between run out
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if t_two_sided_p(middle, df) > 1 - level else (low, middle)
    return (low + high) / 2


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """``(mean, (low, high))``: the mean of per-item scores (e.g. each problem's share of right
    samples) and its interval, mean ± t · standard error, with Student's t at n − 1 degrees of
    freedom (the items, not the samples within an item, are the independent draws). With 8 items t
    is 2.36, not 1.96: few units give a wide interval, and the normal one would be too narrow."""
    n = len(values)
    if n < 2:
        raise ValueError(f"an interval needs at least 2 values, got {n}")
    mean = sum(values) / n
    error = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)  # the standard error
    half = t_quantile(level, n - 1) * error
    return mean, (mean - half, mean + half)


@dataclass(frozen=True)
class PairedDifference:
    """Two systems scored on the same items: the mean of their per-item differences (A − B), its
    interval at ``level`` (95% unless asked otherwise), a two-sided p-value, and n. ``interval``
    names the method. For right/wrong items also how many items only A got right (``a_only``) and
    only B (``b_only``): the items where they disagree, all that the difference is made of."""

    difference: float
    low: float
    high: float
    p_value: float
    n: int
    a_only: int | None = None
    b_only: int | None = None
    interval: str = ""
    level: float = 0.95

    @property
    def a_better(self) -> bool:
        """The interval lies above 0 and the p-value is below 1 − level (for right/wrong items the
        score interval and McNemar's exact test can disagree at the edge, and both must say it).
        An interval of width 0 gives no verdict: it measured no noise, not the absence of it."""
        return self.low > 0 and self._told_apart()

    @property
    def b_better(self) -> bool:
        return self.high < 0 and self._told_apart()

    def _told_apart(self) -> bool:
        return self.high > self.low and self.p_value < 1 - self.level

    def __str__(self) -> str:
        text = f"{self.difference:+.3f} [{self.low:+.3f}, {self.high:+.3f}] ({self.interval}), p = {self.p_value:.2g}"
        if self.a_only is None:
            return f"{text}, n = {self.n:,}"
        return f"{text}; n = {self.n:,}, only A right {self.a_only}, only B {self.b_only}"


def mcnemar_p(a_only: int, b_only: int) -> float:
    """McNemar's exact test: the two-sided p-value of ``a_only`` items right for A alone against
    ``b_only`` right for B alone, when each disagreement is a fair coin (no difference). Items both
    get right, or both wrong, say nothing about which is better and do not enter."""
    if a_only < 0 or b_only < 0:
        raise ValueError(f"counts of items must be 0 or more, got {a_only} and {b_only}")
    n = a_only + b_only
    tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1)) / 2**n
    return min(1.0, 2 * tail)


def newcombe_interval(both: int, a_only: int, b_only: int, neither: int, level: float = 0.95) -> tuple[float, float]:
    """The score interval of a paired difference of proportions, (a_only − b_only) / n: Newcombe's
    (1998) method 10, built from the Wilson intervals of the two accuracies and their correlation.
    Unlike mean ± z · standard error it is never of width 0 (with 0 or 1 disagreements the normal
    interval is [0, 0] or nearly) and stays within [−1, 1]."""
    counts = (both, a_only, b_only, neither)
    if any(c < 0 for c in counts) or sum(counts) < 1:
        raise ValueError(f"need four counts of 0 or more and at least one item, got {counts}")
    n, z = sum(counts), _normal_quantile(level)
    p1, p2 = (both + a_only) / n, (both + b_only) / n  # A's accuracy, B's
    l1, u1 = wilson_interval(both + a_only, n, z)
    l2, u2 = wilson_interval(both + b_only, n, z)
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    agreement = both * neither - a_only * b_only
    if agreement > 0:  # method 10: a continuity-corrected correlation
        agreement = max(agreement - n / 2, 0)
    phi = agreement / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    below = math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    above = math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    return max(-1.0, d - below), min(1.0, d + above)


def _check_pairs(a: Sequence[float], b: Sequence[float]) -> None:
    if len(a) != len(b):
        raise ValueError(f"paired scores need one score of each system per item, got {len(a)} and {len(b)} scores")
    if len(a) < 2:
        raise ValueError(f"a paired difference needs at least 2 items, got {len(a)}")


def _t_result(mean: float, error: float, df: float, n: int, level: float, interval: str, **counts) -> PairedDifference:
    """A mean with its standard error as a t interval and the p of the t test. With a standard
    error of 0 (every difference the same) the data hold no estimate of their noise: the interval
    has width 0 and p is 1, no verdict, whatever the mean."""
    half = t_quantile(level, df) * error
    p = 1.0 if error == 0 else t_two_sided_p(mean / error, df)
    return PairedDifference(mean, mean - half, mean + half, p, n, interval=interval, level=level, **counts)


def paired_difference(
    a: Sequence[float], b: Sequence[float], clusters: Sequence | None = None, level: float = 0.95
) -> PairedDifference:
    """Compare systems A and B scored on the same items (``a[i]`` and ``b[i]`` are the scores of item
    i: 0 or 1 for wrong or right, or any number, such as an item's mean over several seeds).

    The difference is the mean of the per-item differences a[i] − b[i]. Pairing is what makes it
    sharp: an item easy (or hard) for both cancels out, so only the items where they disagree
    count. The interval is chosen for the data:

    - right/wrong items: Newcombe's score interval (:func:`newcombe_interval`) and McNemar's exact
      p (:func:`mcnemar_p`), both valid with few disagreements; the counts are printed;
    - numbers: a t interval with n − 1 degrees of freedom, and the t test's p (8 windows give
      t = 2.36, not 1.96);
    - ``clusters`` (one label per item): the items were drawn in groups (tokens within windows,
      questions within topics) and items of one group move together; see
      :func:`clustered_difference`.

    Say "A is better" only when the interval excludes 0 (``a_better``); otherwise these n items
    cannot tell the two apart. This compares two *runs*; whether two *recipes* differ needs several
    seeds of each (:func:`recipe_difference`)."""
    _check_pairs(a, b)
    n = len(a)
    differences = [x - y for x, y in zip(a, b)]
    counts = {}
    if all(x in (0, 1) for x in [*a, *b]):
        counts = {"a_only": sum(d > 0 for d in differences), "b_only": sum(d < 0 for d in differences)}
    if clusters is not None:
        return _clustered(differences, clusters, level, counts)
    if counts:
        both = sum(x == y == 1 for x, y in zip(a, b))
        low, high = newcombe_interval(both, counts["a_only"], counts["b_only"], n - both - sum(counts.values()), level)
        p = mcnemar_p(counts["a_only"], counts["b_only"])
        return PairedDifference(sum(differences) / n, low, high, p, n, interval="Newcombe score", level=level, **counts)
    mean = sum(differences) / n
    error = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1) / n)
    return _t_result(mean, error, n - 1, n, level, f"t, {n - 1} df")


def _clustered(differences: list[float], clusters: Sequence, level: float, counts: dict) -> PairedDifference:
    n = len(differences)
    if len(clusters) != n:
        raise ValueError(f"clusters needs one label per item, got {len(clusters)} labels for {n} items")
    sums: dict = {}
    mean = sum(differences) / n
    for d, g in zip(differences, clusters):
        sums[g] = sums.get(g, 0.0) + (d - mean)  # each cluster's summed residual
    G = len(sums)
    if G < 2:
        raise ValueError(f"clustered standard errors need at least 2 clusters, got {G}")
    error = math.sqrt(G / (G - 1) * sum(s * s for s in sums.values())) / n  # CR1 sandwich
    return _t_result(mean, error, G - 1, n, level, f"t over {G} clusters, {G - 1} df", **counts)


def clustered_difference(
    a: Sequence[float], b: Sequence[float], clusters: Sequence, level: float = 0.95
) -> PairedDifference:
    """:func:`paired_difference` for items drawn in groups: ``clusters[i]`` names the unit item i
    came with (the window a token is in, the module a text comes from). Items of one unit are not
    independent draws, so the standard error is clustered by unit (the CR1 sandwich, as in Miller,
    "Adding Error Bars to Evals", 2024) and the interval uses t with (units − 1) degrees of freedom:
    2,048 tokens in 8 windows are closer to 8 draws than to 2,048.

    With few units of unequal size CR1 with t(units − 1) is still a little narrow: in simulations
    its 95% intervals cover about 91–93% of the time at 3 to 8 units. Where there are that few,
    say so beside the interval."""
    _check_pairs(a, b)
    return paired_difference(a, b, clusters=clusters, level=level)


def contrast(
    first: tuple[Sequence[float], Sequence[float]],
    second: tuple[Sequence[float], Sequence[float]],
    same_items: bool = False,
    level: float = 0.95,
) -> PairedDifference:
    """Whether A's gain over B differs between two groups: (A − B on the first group) − (A − B on
    the second), as one interval and one p. "Significant in the first group, not in the second" is
    not this test: two separate tests can fall on either side of 0.05 for the same gain.

    ``first`` and ``second`` are each ``(a, b)``, the two systems' scores per item. Two disjoint
    groups of items (positions of one kind against another) give a Welch t interval; with
    ``same_items=True`` (two conditions scored on the same items, as two context lengths on the
    same windows) the per-item gains are paired and the interval is a paired t."""
    for a, b in (first, second):
        _check_pairs(a, b)
    gain1 = [x - y for x, y in zip(*first)]
    gain2 = [x - y for x, y in zip(*second)]
    if same_items:
        if len(gain1) != len(gain2):
            raise ValueError(f"same_items needs the same items in both groups, got {len(gain1)} and {len(gain2)}")
        n = len(gain1)
        d = [x - y for x, y in zip(gain1, gain2)]
        mean = sum(d) / n
        error = math.sqrt(sum((v - mean) ** 2 for v in d) / (n - 1) / n)
        return _t_result(mean, error, n - 1, n, level, f"paired t, {n - 1} df")
    return _welch(gain1, gain2, level)


def _welch(x: Sequence[float], y: Sequence[float], level: float, name: str = "Welch t") -> PairedDifference:
    """mean(x) − mean(y) for two independent samples, with Welch's t interval."""
    (mx, vx), (my, vy) = _mean_variance(x), _mean_variance(y)
    ex, ey = vx / len(x), vy / len(y)  # squared standard errors
    error = math.sqrt(ex + ey)
    df = (ex + ey) ** 2 / (ex**2 / (len(x) - 1) + ey**2 / (len(y) - 1)) if error else len(x) + len(y) - 2
    return _t_result(mx - my, error, df, len(x) + len(y), level, f"{name}, {df:.0f} df")


def _mean_variance(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        raise ValueError(f"a spread needs at least 2 values, got {len(values)}")
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment for several comparisons drawn from one table: with m tests at
    5% each, about one in twenty null differences looks real by chance. The smallest p-value is
    multiplied by m, the next by m − 1, and so on (kept monotone, capped at 1); a comparison is
    significant at 95% when its adjusted p is below 0.05. It controls the chance of any false claim, if
    the family was declared before looking (:func:`compare_family`)."""
    if any(not 0 <= p <= 1 for p in p_values):
        raise ValueError(f"p-values lie between 0 and 1, got {list(p_values)}")
    m = len(p_values)
    order = sorted(range(m), key=lambda k: p_values[k])
    adjusted, running = [0.0] * m, 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[k]))
        adjusted[k] = running
    return adjusted


@dataclass(frozen=True)
class Family:
    """A family of paired comparisons declared before looking, each with its Holm-adjusted p.
    ``differences[a, b]`` is A − B; the intervals are each at ``level``, *not* adjusted for the
    family."""

    differences: dict[tuple[str, str], PairedDifference]
    adjusted: dict[tuple[str, str], float]
    declared: str
    level: float = 0.95

    def above(self, a: str, b: str) -> bool:
        """Whether the family shows A's scores above B's: Holm-adjusted p below 1 − level, the
        difference of that sign, and an interval of nonzero width."""
        if (a, b) in self.differences:
            d, sign = self.differences[a, b], 1
        elif (b, a) in self.differences:
            d, sign, a, b = self.differences[b, a], -1, b, a
        else:
            raise KeyError(f"{a} against {b} is not in this family ({self.declared})")
        return self.adjusted[a, b] < 1 - self.level and sign * d.difference > 0 and d.high > d.low

    def __str__(self) -> str:
        width = max(len(f"{a} - {b}") for a, b in self.differences)
        m = len(self.differences)
        lines = [f"{self.declared} (A - B): {m} comparisons, {self.level:.0%} intervals unadjusted, p Holm-adjusted"]
        for (a, b), d in self.differences.items():
            counts = "" if d.a_only is None else f", only A {d.a_only}, only B {d.b_only}"
            lines.append(
                f"  {a + ' - ' + b:<{width}} {d.difference:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
                f"  Holm p {self.adjusted[a, b]:.2g}{counts}"
            )
        return "\n".join(lines)


def compare_family(
    scores: dict[str, Sequence[float]],
    baseline: str | None = None,
    clusters: Sequence | None = None,
    level: float = 0.95,
) -> Family:
    """Compare several systems scored on the same items as one family, declared before looking:
    every pair (``baseline=None``), or each system against a ``baseline`` named in advance (the
    method a chapter set out to beat, never the one that came out best or worst: choosing the
    comparator from the results raises the chance of a false claim above the 5% Holm promises).
    Each comparison is a :func:`paired_difference`; the p-values are adjusted by :func:`holm`."""
    pairs, declared = _declared_pairs(list(scores), baseline)
    differences = {(a, b): paired_difference(scores[a], scores[b], clusters, level) for a, b in pairs}
    return _family(differences, declared, level)


def _declared_pairs(names: list[str], baseline: str | None) -> tuple[list[tuple[str, str]], str]:
    if len(names) < 2:
        raise ValueError(f"a family needs at least 2 systems, got {names}")
    if baseline is None:
        return list(combinations(names, 2)), "all pairs"
    if baseline not in names:
        raise ValueError(f"the baseline {baseline!r} is not among the systems {names}")
    return [(name, baseline) for name in names if name != baseline], f"each against {baseline}"


def _family(differences: dict[tuple[str, str], PairedDifference], declared: str, level: float) -> Family:
    adjusted = dict(zip(differences, holm([d.p_value for d in differences.values()])))
    return Family(differences, adjusted, declared, level)


# -- recipes: several seeds of each ------------------------------------------------------------------


def per_item_mean(runs: Sequence[Sequence[float]]) -> list[float]:
    """The mean of each item over several runs (seeds) scored on the same items: one number per
    item, to compare two methods over their seeds with :func:`paired_difference`. The interval then
    counts the items as the random draws and treats the seeds as fixed: it says how well these
    seeds' average is measured, not whether the recipes differ (:func:`recipe_difference`)."""
    if not runs or len({len(r) for r in runs}) != 1:
        raise ValueError(
            f"runs must be one or more score lists of the same length, got lengths {[len(r) for r in runs]}"
        )
    return [sum(item) / len(runs) for item in zip(*runs)]


def outside_range_probability(n: int) -> float:
    """The chance that one more run falls outside the range (lowest to highest) of ``n`` earlier
    runs of the same recipe, when runs are exchangeable and never tie: 2/(n + 1). With 3 seeds a
    fourth lands outside half the time; a range of a few seeds is not where the next one will be.
    Accuracies on a few hundred items take few values and can tie (a tie counts as inside), so
    there the chance is a little lower (about 0.45 for 3 runs on 135 items)."""
    if n < 1:
        raise ValueError(f"need at least one earlier run, got {n}")
    return 2 / (n + 1)


@dataclass(frozen=True)
class RecipeDifference:
    """Two recipes, each run with several seeds on the same items, compared two ways.

    - ``recipes``, the verdict (``a_better``, ``b_better``): each run's mean score is one draw of
      its recipe, and the two recipes' run means are compared by Welch's t. A seed that lands a
      whole run higher is in its variance, so it answers "do the recipes differ, on these items?"
      With 3 seeds each it has about 4 degrees of freedom: only large differences show
      (:func:`seeds_power`), and for two identical recipes it claims a winner a little less
      often than 5% (Welch's t is conservative with so few runs). It holds the items fixed.
    - ``these_runs``: each item's mean over the seeds, paired over the items (clustered when the
      items come in groups): the items are the draw and these seeds are fixed, so it says whether
      *these runs* differ on such items. Its interval is narrower and is not the recipes'
      uncertainty: for two identical recipes it declares a winner far more often than 5%.

    ``seeds_a`` and ``seeds_b`` are each run's mean score."""

    recipes: PairedDifference
    these_runs: PairedDifference
    seeds_a: tuple[float, ...]
    seeds_b: tuple[float, ...]

    @property
    def a_better(self) -> bool:
        """Recipe A is better: the t test on run means, at its level."""
        return self.recipes.a_better

    @property
    def b_better(self) -> bool:
        return self.recipes.b_better

    def __str__(self) -> str:
        def spread(runs: tuple[float, ...]) -> str:
            return f"{min(runs):.3f} to {max(runs):.3f}" if len(runs) > 1 else f"{runs[0]:.3f}"

        return (
            f"recipes (seeds drawn): {self.recipes}\n"
            f"these runs (items drawn, seeds fixed): {self.these_runs}\n"
            f"  one run each: A {spread(self.seeds_a)} ({len(self.seeds_a)} seeds), "
            f"B {spread(self.seeds_b)} ({len(self.seeds_b)} seeds)"
        )


def recipe_difference(
    runs_a: Sequence[Sequence[float]],
    runs_b: Sequence[Sequence[float]],
    clusters: Sequence | None = None,
    level: float = 0.95,
) -> RecipeDifference:
    """Compare two *recipes* (methods, starts, settings), each run with at least 2 seeds and scored
    on the same items: Welch's t on the runs' mean scores is the verdict about the recipes; the
    per-item means over each recipe's seeds (:func:`per_item_mean`), compared by
    :func:`paired_difference` (by module, cluster, ... with ``clusters``), say how these runs
    differ (:class:`RecipeDifference`). One run per recipe says only whether those two runs differ.

    One side may be a single *fixed* model rather than a recipe: the checkpoint every run of the
    other started from is the same model whatever the seed. Against it the verdict is a one-sample
    t on the other recipe's run means minus its score (seeds − 1 df)."""
    seeds_a = tuple(sum(r) / len(r) for r in runs_a)
    seeds_b = tuple(sum(r) / len(r) for r in runs_b)
    these_runs = paired_difference(per_item_mean(runs_a), per_item_mean(runs_b), clusters, level)
    if max(len(seeds_a), len(seeds_b)) < 2 or min(len(seeds_a), len(seeds_b)) < 1:
        raise ValueError(f"a recipe comparison needs at least 2 seeds of one, got {len(seeds_a)} and {len(seeds_b)}")
    if min(len(seeds_a), len(seeds_b)) == 1:  # one side is one fixed model
        shifts = [a - b for a in seeds_a for b in seeds_b]
        mean, variance = _mean_variance(shifts)
        k = len(shifts)
        recipes = _t_result(
            mean, math.sqrt(variance / k), k - 1, k + 1, level, f"t on run means against one model, {k - 1} df"
        )
    else:
        recipes = _welch(seeds_a, seeds_b, level, "Welch t on run means")
    return RecipeDifference(recipes, these_runs, seeds_a, seeds_b)


def compare_recipes(
    runs: dict[str, Sequence[Sequence[float]]], baseline: str | None = None, level: float = 0.95
) -> Family:
    """:func:`compare_family` for recipes: ``runs[name]`` holds each seed's scores of that recipe
    on the same items, and each comparison is the recipe verdict of :func:`recipe_difference`
    (Welch's t on run means, the seeds counted as drawn), Holm-adjusted over the declared family
    (every pair, or each against a ``baseline`` named in advance)."""
    pairs, declared = _declared_pairs(list(runs), baseline)
    differences = {(a, b): recipe_difference(runs[a], runs[b], level=level).recipes for a, b in pairs}
    return _family(differences, f"{declared} of recipes, seeds drawn", level)


def _chi_square_mean(f: Callable[[float], float], df: int, steps: int = 2000) -> float:
    """E[f(V)] for V chi-square with ``df`` degrees of freedom, by Simpson's rule over u = sqrt(V),
    whose density u^(df − 1) e^(−u²/2) is smooth, up to where it is below 1e-25."""
    top = math.sqrt(df) + 11
    h = top / steps
    log_norm = (df / 2 - 1) * math.log(2) + math.lgamma(df / 2)

    def density(u: float) -> float:  # of u = sqrt(V)
        return 0.0 if u == 0 else math.exp((df - 1) * math.log(u) - u * u / 2 - log_norm)

    weights = (1 if k in (0, steps) else 4 if k % 2 else 2 for k in range(steps + 1))
    return sum(w * density(k * h) * f((k * h) ** 2) for k, w in zip(range(steps + 1), weights)) * h / 3


def seeds_power(difference: float, spread: float, seeds: int, level: float = 0.95) -> float:
    """The chance that ``seeds`` runs of each of two recipes show a true ``difference`` between
    them, when one run's mean score scatters around its recipe's by a standard deviation
    ``spread``: the power of the two-sample t test on run means (Student's, 2·seeds − 2 df, by
    exact integration over the noncentral t; Welch's, which ``recipe_difference`` uses, has a
    little less). With 3 seeds each a difference must be about 3 spreads to be found 4 times in 5."""
    if seeds < 2 or spread <= 0:
        raise ValueError(f"need at least 2 seeds of each and a positive spread, got {seeds} and {spread}")
    df = 2 * seeds - 2
    shift = abs(difference) / (spread * math.sqrt(2 / seeds))  # the noncentrality
    critical, normal = t_quantile(level, df), NormalDist()

    def rejects(v: float) -> float:  # P(|Z + shift| > critical * sqrt(v / df))
        bound = critical * math.sqrt(v / df)
        return normal.cdf(shift - bound) + normal.cdf(-shift - bound)

    return _chi_square_mean(rejects, df)


# -- power ------------------------------------------------------------------------------------------


def _binomial_log_pmf(k: int, n: int, p: float) -> float:
    if p in (0.0, 1.0):
        return 0.0 if k == n * p else -math.inf
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)


def _check_effect(difference: float, disagreement_rate: float, alpha: float, power: float = 0.5) -> None:
    if not 0 < disagreement_rate <= 1:
        raise ValueError(f"the disagreement rate is a share of the items in (0, 1], got {disagreement_rate}")
    if not 0 < abs(difference) <= disagreement_rate:
        raise ValueError(
            f"the difference must be nonzero and at most the disagreement rate {disagreement_rate} "
            f"(it is made of the disagreeing items), got {difference}"
        )
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power lie between 0 and 1, got {alpha} and {power}")


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(K <= k) for K ~ Binomial(n, p), through the incomplete beta function."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return _incomplete_beta(1 - p, n - k, k + 1)


def _rejection_chances(n: int, difference: float, disagreement_rate: float, alpha: float) -> list[float]:
    """For d = 0..n disagreeing items: the chance that McNemar's exact p is below ``alpha``."""
    favour = (1 + difference / disagreement_rate) / 2  # of the disagreements, the share A alone gets right
    chances, c = [], -1  # c: the largest count of the smaller side that still rejects (-1: none)
    for d in range(n + 1):
        while c + 1 < d / 2 and 2 * _binomial_cdf(c + 1, d, 0.5) < alpha:
            c += 1
        chances.append(_binomial_cdf(c, d, favour) + _binomial_cdf(c, d, 1 - favour) if c >= 0 else 0.0)
    return chances


def _power_from(chances: list[float], n: int, disagreement_rate: float) -> float:
    """Σ over d of P(d disagreements among n items) · P(reject | d), over the d that matter."""
    centre, width = n * disagreement_rate, 12 * math.sqrt(n * disagreement_rate * (1 - disagreement_rate)) + 12
    d_range = range(max(0, math.floor(centre - width)), min(n, math.ceil(centre + width)) + 1)
    return sum(math.exp(_binomial_log_pmf(d, n, disagreement_rate)) * chances[d] for d in d_range)


def mcnemar_power(n: int, difference: float, disagreement_rate: float, alpha: float = 0.05) -> float:
    """The exact power of McNemar's exact test (:func:`mcnemar_p`, two-sided, p < ``alpha``) on
    ``n`` paired items, when a share ``disagreement_rate`` of items is right for one system only
    and A's accuracy exceeds B's by ``difference``: the number of disagreements is binomial, and
    how they split is binomial given it."""
    _check_effect(difference, disagreement_rate, alpha)
    return _power_from(_rejection_chances(n, difference, disagreement_rate, alpha), n, disagreement_rate)


def items_needed(smallest_effect: float, disagreement_rate: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """How many paired right/wrong items McNemar's exact test needs to find a difference in
    accuracy of ``smallest_effect`` (A − B) with probability ``power`` at level ``alpha``, when a
    share ``disagreement_rate`` of the items are right for one system only: the smallest n whose
    exact power (:func:`mcnemar_power`) reaches ``power``, searched from half Connor's (1987) normal
    approximation, which falls a few percent short. Exact power saw-tooths as n grows, so a
    few n just above may fall a point below.

    ``smallest_effect`` is the smallest difference worth finding, declared before the
    experiment. Planned from an observed difference instead, the answer only restates that
    difference's p-value: a gain that just missed always "needs a few more items"."""
    _check_effect(smallest_effect, disagreement_rate, alpha, power)
    z_alpha, z_power = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    root = z_alpha * math.sqrt(disagreement_rate) + z_power * math.sqrt(disagreement_rate - smallest_effect**2)
    connor = math.ceil(root**2 / smallest_effect**2)
    top = 2 * connor + 50
    chances = _rejection_chances(top, smallest_effect, disagreement_rate, alpha)
    for n in range(max(1, connor // 2), top + 1):
        if _power_from(chances, n, disagreement_rate) >= power:
            return n
    raise ValueError(f"no n up to {top} reaches power {power}")  # pragma: no cover - power < 1 is reached
