"""Turning a language model into a writer: predict, pick a token, append, repeat.

- :func:`filter_logits` keeps the ``top_k`` most likely tokens and/or the smallest set whose
  probability reaches ``top_p`` (nucleus sampling), setting the rest to ``-inf``;
- :func:`sample_next` turns last-position logits into the next token: greedy, or a draw at a
  temperature after filtering;
- :func:`stream` yields tokens one at a time as they are produced, stopping at an end-of-text
  id; :func:`generate` collects them; :func:`stream_text` yields decoded text pieces.

For a :class:`~course_lib.model.GPT` the loop uses a KV cache: the prompt is run once, then
each new token is fed alone and attends to the cached keys and values. Past the context
length the window slides, and the cache is refilled from the last ``context_length`` tokens,
so the tokens are exactly those of recomputing from scratch (tested).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn as nn

from .model import GPT
from .runtime import evaluating, model_device


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """(B, V) logits with everything outside the top-k / top-p set replaced by ``-inf``.

    top-p keeps the most likely tokens until their probabilities sum to at least ``top_p``
    (always at least one token).
    """
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be a positive number of tokens, got {top_k}")
        if top_k < logits.shape[-1]:
            kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (B, 1): the k-th largest logit
            logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)  # (B, V)
        # drop a token when the ones before it already reach top_p (the first always stays)
        drop_sorted = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """(B, V) last-position logits -> (B, 1) next token ids."""
    if greedy:
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1)
    if temperature <= 0:
        raise ValueError(f"temperature must be positive (or use greedy=True), got {temperature}")
    probs = torch.softmax(filter_logits(logits / temperature, top_k, top_p), dim=-1)  # (B, V)
    if generator is not None and generator.device != probs.device:
        # draw where the generator lives (a seeded CPU generator for a model on a GPU): the
        # same seed then gives the same tokens on every device
        return torch.multinomial(probs.to(generator.device), 1, generator=generator).to(probs.device)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)


@torch.no_grad()
def next_token_probs(
    model: nn.Module, idx: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """(V,) probabilities of the token after the 1-D prompt ``idx``, as sampling would use them."""
    with evaluating(model):
        logits = model(idx[None, -_context(model) :].to(model_device(model)))[0, -1]  # (V,): after the last token
    return torch.softmax(filter_logits(logits[None] / temperature, top_k, top_p)[0], dim=-1)


def _context(model: nn.Module) -> int:
    if not isinstance(model, GPT):
        raise ValueError("pass context_length: only a GPT knows its own")
    return model.config.context_length


@torch.no_grad()
def stream(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    context_length: int | None = None,
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    *,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | None = None,
    use_cache: bool | None = None,
) -> Iterator[torch.Tensor]:
    """Yield the (B, 1) next tokens of each row of ``idx`` (B, T), one step at a time.

    ``context_length`` defaults to the model's. ``eos_id`` stops a row once it produced that
    token (finished rows repeat it until all rows are done). ``use_cache`` defaults to True for
    a GPT and must be False for models without a cache.
    """
    if context_length is None:
        context_length = _context(model)
    if use_cache is None:
        use_cache = isinstance(model, GPT)
    if use_cache and not isinstance(model, GPT):
        raise ValueError(f"use_cache=True needs a course_lib GPT, got {type(model).__name__}")
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be positive (or use greedy=True), got {temperature}")
    if idx.ndim != 2 or idx.shape[1] == 0:
        raise ValueError(f"idx must be a (batch, tokens) tensor with at least one token, got shape {tuple(idx.shape)}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be 0 or more, got {max_new_tokens}")
    idx = idx.to(model_device(model))  # the prompt follows the model (a list made on the CPU, a model on the GPU)
    cache = model.new_cache(context_length) if use_cache else None
    with evaluating(model):
        window = idx[:, -context_length:]  # (B, T <= context)
        logits = model(window, cache=cache) if use_cache else model(window)  # (B, T, V)
        finished = torch.zeros(idx.shape[0], 1, dtype=torch.bool, device=idx.device)
        for _ in range(max_new_tokens):
            next_id = sample_next(logits[:, -1, :], temperature, top_k, top_p, greedy, generator)  # (B, 1)
            if eos_id is not None:
                next_id = next_id.masked_fill(finished, eos_id)
                finished |= next_id == eos_id
            yield next_id
            if eos_id is not None and bool(finished.all()):
                return
            idx = torch.cat([idx, next_id], dim=1)  # (B, T + 1)
            if not use_cache:
                logits = model(idx[:, -context_length:])  # recompute every position
            elif cache.length < context_length:
                logits = model(next_id, cache=cache)  # (B, 1, V): one new position
            else:  # the window slides: refill the cache from the last context_length tokens
                cache.reset()
                logits = model(idx[:, -context_length:], cache=cache)


def generate(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, *args, **options) -> torch.Tensor:
    """``idx`` (B, T) extended by up to ``max_new_tokens`` tokens (fewer if all rows hit ``eos_id``),
    on the model's device: :func:`stream`'s tokens collected. Arguments as in :func:`stream`
    (``context_length``, ``temperature``, ``greedy``, ``generator``, ``top_k``, ``top_p``,
    ``eos_id``, ``use_cache``)."""
    new = list(stream(model, idx, max_new_tokens, *args, **options))
    return torch.cat([idx.to(model_device(model)), *new], dim=1)  # (B, T + new)


def stream_text(
    model: nn.Module,
    encode: Callable[[str], Sequence[int]],
    decode: Callable[[Sequence[int]], str],
    prompt: str,
    max_new_tokens: int,
    **options,
) -> Iterator[str]:
    """Yield the continuation of ``prompt`` as text, piece by piece, while it is generated.

    A byte-level token can end in the middle of a character; such a piece waits until the
    character is complete. The end-of-text token itself is not shown.
    """
    idx = torch.tensor([list(encode(prompt))], dtype=torch.long)  # (1, T); stream moves it to the model
    ids: list[int] = []
    shown = ""
    for next_id in stream(model, idx, max_new_tokens, **options):
        token = int(next_id)
        if token == options.get("eos_id"):
            break
        ids.append(token)
        text = decode(ids)
        if not text.endswith("\ufffd"):  # an incomplete UTF-8 character decodes as U+FFFD
            yield text[len(shown) :]
            shown = text
    rest = decode(ids)[len(shown) :]
    if rest:
        yield rest
