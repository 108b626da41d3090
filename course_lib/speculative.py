"""Speculative decoding: a cheap draft guesses k tokens, the target checks them in one forward pass.

Decoding at batch 1 is limited by reading the weights, not by arithmetic, so the target can score
k + 1 positions for about the price of one. If the draft guessed right, one pass of the target
yields several tokens (Leviathan et al., 2023; Chen et al., 2023).

- Greedy: the target keeps the draft's tokens while they are its own argmax, then adds its own
  next token; the output is the target's greedy output, token for token.
- Sampling: :func:`accept_draft` accepts draft token x with probability min(1, p(x) / q(x)) and, at
  the first rejection, draws from :func:`residual_distribution`, norm(max(0, p - q)). Every token
  then follows the target's distribution exactly, whatever the draft proposes.

Drafts (anything with ``propose(ids, k)`` and ``forget(ids)``): :class:`ModelDraft`, a smaller model
on the same tokenizer with its own KV cache; :class:`PromptLookupDraft`, the tokens that followed
the last earlier occurrence of the text's final n-gram (:func:`prompt_lookup`), which costs no model
at all and pays where answers copy their prompt. :func:`predicted_speedup` is the formula the
measured speed-up is compared with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .generation import cached_pass, filter_logits
from .model import GPT
from .runtime import evaluating, model_device, seconds_per_call


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(..., V) target and draft probabilities -> norm(max(0, p - q)): what to draw from after a
    rejection. It holds the probability the target gives beyond the draft; where the draft equals
    the target there is nothing left, and the target itself is returned (never reached then)."""
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {tuple(p.shape)} and {tuple(q.shape)}")
    left = (p - q).clamp_min(0)  # (..., V)
    total = left.sum(dim=-1, keepdim=True)  # (..., 1)
    return torch.where(total > 0, left / total.clamp_min(torch.finfo(p.dtype).tiny), p)


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from the (V,) distribution, drawn on the generator's device."""
    where = generator.device if generator is not None else probs.device
    return int(torch.multinomial(probs.to(where), 1, generator=generator))


def _uniform(device: torch.device, generator: torch.Generator | None) -> float:
    where = generator.device if generator is not None else device
    return float(torch.rand((), device=where, generator=generator))


def accept_draft(
    p: torch.Tensor, q: torch.Tensor, draft: Sequence[int], generator: torch.Generator | None = None
) -> tuple[int, int]:
    """The acceptance rule that keeps the target's distribution: ``(accepted, next_token)``.

    ``p`` (k + 1, V): the target's probabilities at each draft position and after the last one;
    ``q`` (k, V): the draft's (a one-hot row for a draft that proposes without sampling); ``draft``:
    the k proposed tokens. Token i is accepted with probability min(1, p_i(x) / q_i(x)); at the first
    rejection the next token is drawn from norm(max(0, p_i - q_i)); if all k are accepted it is drawn
    from p_k, so every pass of the target yields at least one token.
    """
    k = len(draft)
    if p.ndim != 2 or p.shape[0] != k + 1 or q.shape != (k, p.shape[1]):
        raise ValueError(
            f"for {k} draft tokens p must be (k + 1, V) and q (k, V); got {tuple(p.shape)} and {tuple(q.shape)}"
        )
    for i, token in enumerate(draft):
        ratio = p[i, token] / q[i, token] if q[i, token] > 0 else torch.tensor(0.0)
        if _uniform(p.device, generator) < min(1.0, float(ratio)):
            continue
        return i, _draw(residual_distribution(p[i], q[i]), generator)
    return k, _draw(p[k], generator)


def prompt_lookup(ids: Sequence[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to ``k`` tokens guessed by copying: find the last earlier place where the text's final
    n tokens occur (the longest n from ``max_ngram`` down to ``min_ngram`` that occurs) and return
    the tokens that followed it there. Nothing when no n-gram repeats (Saxena, 2023)."""
    if k < 0 or min_ngram < 1 or max_ngram < min_ngram:
        raise ValueError(f"need k >= 0 and 1 <= min_ngram <= max_ngram, got k={k}, {min_ngram}..{max_ngram}")
    ids = list(ids)
    for n in range(min(max_ngram, len(ids) - 1), min_ngram - 1, -1):
        suffix = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):  # the most recent occurrence first
            if ids[start : start + n] == suffix:
                return ids[start + n : start + n + k]
    return []


# --------------------------------------------------------------------------------------
# Drafts
# --------------------------------------------------------------------------------------


class PromptLookupDraft:
    """Proposes the continuation of the last repeated n-gram (:func:`prompt_lookup`): no model, no
    cost, and no probabilities (its guesses count as certain, a one-hot q)."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, ids: Sequence[int], k: int, sampling: dict) -> tuple[list[int], torch.Tensor | None]:
        return prompt_lookup(ids, k, self.max_ngram, self.min_ngram), None

    def forget(self, ids: Sequence[int]) -> None:
        """Nothing is cached."""


class ModelDraft:
    """A smaller GPT on the target's tokenizer, decoding k tokens ahead with a KV cache of its own.
    It proposes greedily when the target decodes greedily, else samples with the same temperature
    and filters and returns its probabilities (q) for :func:`accept_draft`."""

    def __init__(self, model: GPT):
        if not isinstance(model, GPT):
            raise TypeError(f"a model draft must be a course_lib GPT (it keeps a KV cache), got {type(model).__name__}")
        self.model = model
        self.cache = model.new_cache()
        self.cached: list[int] = []  # the tokens whose keys and values the cache holds
        self.calls = 0  # forward passes of the draft model

    def forget(self, ids: Sequence[int]) -> None:
        """Keep only the cached tokens that are still a prefix of ``ids`` (drop rejected guesses)."""
        keep = 0
        for a, b in zip(self.cached, ids):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(ids) - 1)  # the last token runs again: its logits are needed
        self.cache.truncate(min(keep, self.cache.length))
        self.cached = self.cached[: self.cache.length]

    @torch.no_grad()
    def propose(self, ids: Sequence[int], k: int, sampling: dict) -> tuple[list[int], torch.Tensor | None]:
        device = model_device(self.model)
        self.forget(ids)
        tokens, probs = [], []
        feed = list(ids[len(self.cached) :])
        with evaluating(self.model):
            for _ in range(k):
                logits = self.model(torch.tensor([feed], device=device), cache=self.cache)[0, -1]  # (V,)
                self.calls += 1
                self.cached += feed
                if sampling["greedy"]:
                    token = int(logits.argmax())
                else:
                    q = _probabilities(logits[None], sampling)[0]  # (V,)
                    token = _draw(q, sampling["generator"])
                    probs.append(q)
                tokens.append(token)
                feed = [token]
        return tokens, (torch.stack(probs) if probs else None)


# --------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------


@dataclass
class SpeculativeStats:
    """What a run of :func:`speculative_generate` did: target passes, draft tokens proposed, how
    many the target examined (those before the first rejection, and that one) and accepted."""

    passes: int = 0
    proposed: int = 0
    examined: int = 0
    accepted: int = 0
    new_tokens: int = 0
    per_pass: list[int] = field(default_factory=list)  # tokens each target pass produced

    @property
    def acceptance_rate(self) -> float:
        """Accepted / examined: the chance that the target accepts a draft token it looks at."""
        return self.accepted / self.examined if self.examined else 0.0

    @property
    def tokens_per_pass(self) -> float:
        return self.new_tokens / self.passes if self.passes else 0.0


def expected_tokens_per_pass(acceptance_rate: float, k: int) -> float:
    """Tokens one target pass yields when each of k draft tokens is accepted with probability a
    independently: 1 + a + a² + ... + a^k = (1 - a^(k+1)) / (1 - a)."""
    if not 0 <= acceptance_rate <= 1 or k < 0:
        raise ValueError(f"need 0 <= acceptance_rate <= 1 and k >= 0, got {acceptance_rate} and {k}")
    return float(sum(acceptance_rate**i for i in range(k + 1)))


def predicted_speedup(acceptance_rate: float, k: int, draft_cost: float, verify_cost: float = 1.0) -> float:
    """Leviathan et al.'s speed-up over decoding with the target alone: the tokens per pass divided
    by the cost of a pass, k draft steps (each ``draft_cost`` of a target step) plus the target's
    check of k + 1 positions (``verify_cost`` of a step: about 1 while reading the weights dominates)."""
    return expected_tokens_per_pass(acceptance_rate, k) / (k * draft_cost + verify_cost)


@torch.no_grad()
def step_costs(target: GPT, draft: GPT | None, prompt: Sequence[int], k: int) -> tuple[float, float]:
    """``(draft_cost, verify_cost)`` in units of one decoding step of the target, after ``prompt``
    is cached: a draft step (0 without a draft model, as for prompt lookup) and the target's pass over
    k + 1 tokens. Timed with :func:`~course_lib.runtime.seconds_per_call`: numbers to print and to
    put into :func:`predicted_speedup`, never to assert."""
    with evaluating(target):
        step = seconds_per_call(cached_pass(target, prompt, 1), timings=5)
        verify = seconds_per_call(cached_pass(target, prompt, k + 1), timings=5)
    if draft is None:
        return 0.0, verify / step
    with evaluating(draft):
        return seconds_per_call(cached_pass(draft, prompt, 1), timings=5) / step, verify / step


def _probabilities(logits: torch.Tensor, sampling: dict) -> torch.Tensor:
    """(N, V) logits -> (N, V) probabilities as sampling uses them (temperature, top-k, top-p)."""
    scaled = logits.float() / sampling["temperature"]
    return torch.softmax(filter_logits(scaled, sampling["top_k"], sampling["top_p"]), dim=-1)


@torch.no_grad()
def speculative_generate(
    target: GPT,
    draft,
    prompt: Sequence[int],
    max_new_tokens: int,
    k: int = 4,
    *,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
) -> tuple[list[int], SpeculativeStats]:
    """``(new_tokens, stats)``: up to ``max_new_tokens`` tokens after ``prompt`` (token ids), the
    draft proposing ``k`` at a time and the target checking them in one pass over its KV cache.

    Greedy: exactly the target's greedy tokens. Sampling (``temperature``, ``top_k``, ``top_p``, a
    ``generator``): tokens distributed exactly as the target's own sampling would give them. The
    list ends after ``eos_id`` (kept) or at ``max_new_tokens``. The window does not slide: the
    prompt, the new tokens and k guesses must fit in both models' contexts.
    """
    if not isinstance(target, GPT):
        raise TypeError(
            f"the target must be a course_lib GPT (it verifies over a KV cache), got {type(target).__name__}"
        )
    prompt = prompt.tolist() if isinstance(prompt, torch.Tensor) else [int(t) for t in prompt]
    if not prompt:
        raise ValueError("the prompt is empty: a model needs at least one token to predict from")
    if k < 1 or max_new_tokens < 0:
        raise ValueError(f"need k >= 1 draft tokens and max_new_tokens >= 0, got k={k}, {max_new_tokens}")
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be positive (or use greedy=True), got {temperature}")
    contexts = [target.config.context_length] + ([draft.model.config.context_length] if hasattr(draft, "model") else [])
    if len(prompt) + max_new_tokens + k > min(contexts):
        raise ValueError(
            f"prompt ({len(prompt)}) + max_new_tokens ({max_new_tokens}) + k ({k}) exceed the context of "
            f"{min(contexts)} tokens: speculative decoding here does not slide the window; shorten one of them"
        )
    sampling = dict(greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
    device = model_device(target)
    cache = target.new_cache()
    ids, stats = list(prompt), SpeculativeStats()
    new = 0
    with evaluating(target):
        while new < max_new_tokens:
            guesses, q = draft.propose(ids, min(k, max_new_tokens - new - 1), sampling)
            feed = ids[cache.length :] + guesses  # the uncached tokens, then the guesses
            logits = target(torch.tensor([feed], device=device), cache=cache)[0, -len(guesses) - 1 :]  # (g + 1, V)
            stats.passes += 1
            stats.proposed += len(guesses)
            if greedy:
                best = logits.argmax(dim=-1).tolist()  # (g + 1,): the target's own choice at each position
                accepted = next((i for i, (a, b) in enumerate(zip(guesses, best)) if a != b), len(guesses))
                following = best[accepted]
            else:
                p = _probabilities(logits, sampling)  # (g + 1, V)
                if q is None:  # a draft without probabilities: its guesses count as certain
                    q = torch.zeros(len(guesses), p.shape[1], device=p.device)
                    q[torch.arange(len(guesses)), torch.tensor(guesses, dtype=torch.long)] = 1.0
                accepted, following = accept_draft(p, q.to(p.device), guesses, generator)
            stats.examined += min(accepted + 1, len(guesses))
            stats.accepted += accepted
            produced = guesses[:accepted] + [following]
            if eos_id is not None and eos_id in produced:
                produced = produced[: produced.index(eos_id) + 1]
            produced = produced[: max_new_tokens - new]
            cache.truncate(len(ids) + accepted)  # keep what was fed and accepted; the rest is forgotten
            ids += produced
            new += len(produced)
            stats.per_pass.append(len(produced))
            draft.forget(ids)
            if eos_id is not None and produced[-1] == eos_id:
                break
    stats.new_tokens = new
    return ids[len(prompt) :], stats
