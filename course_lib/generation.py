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

Beside that teaching path:

- :func:`generate_batch` answers many prompts of different lengths at once: left-padded into
  one batch with a :class:`~course_lib.attention.StaticKVCache`, each row at its own positions
  and stopping at its own end-of-text, every row getting the tokens it gets alone (tested);
- :func:`decode_step` is one step of it with fixed shapes, and :func:`compiled_step` the same
  step through ``torch.compile`` (a GPU then replays it as a CUDA graph with
  ``mode="reduce-overhead"``; :func:`compile_unavailable` says where inductor cannot run);
  :func:`static_pass` is one such step to time or profile;
- :class:`Session` is one growing sequence and its cache: feed a prompt, a tool's result or a
  user's turn, sample one token at a time, take tokens back (the calculator and the chat).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn as nn

from .attention import StaticKVCache
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


# --------------------------------------------------------------------------------------
# Many prompts at once: left padding, a static cache, a step that can be compiled
# --------------------------------------------------------------------------------------


def cached_pass(model: GPT, prompt: Sequence[int], n: int = 1) -> Callable[[], None]:
    """A run of the model over ``n`` more tokens after ``prompt`` (token ids, cached here, once),
    which forgets them again after each call: what a decoding step (n = 1) or a speculative check
    (n = k + 1) costs, to time. Which tokens does not matter; the last prompt token is repeated.
    Call it in eval mode and under ``torch.no_grad()``."""
    device = model_device(model)
    cache = model.new_cache()
    model(torch.tensor([list(prompt)], device=device), cache=cache)  # (1, T): the prompt, cached
    length = cache.length
    ids = torch.full((1, n), int(prompt[-1]), device=device)  # (1, n)

    def run() -> None:
        model(ids, cache=cache)  # (1, n, V)
        cache.truncate(length)  # back to the prompt for the next call

    return run


def decode_step(model: GPT, cache: StaticKVCache, ids: torch.Tensor) -> torch.Tensor:
    """(B, 1) next tokens of every row -> (B, V) logits of the token after them. The shapes
    are the same at every step (the cache's slot is a tensor), which is what lets
    ``torch.compile`` compile it once."""
    return model(ids, cache=cache)[:, -1]  # (B, V)


@functools.cache
def compiled_step(backend: str = "inductor", mode: str | None = None) -> Callable:
    """:func:`decode_step` through ``torch.compile`` (made once per backend and mode, then
    reused). ``backend="inductor"`` generates fused kernels (C++ on a CPU, Triton on a GPU);
    ``mode="reduce-overhead"`` on a GPU also captures the step in a CUDA graph, so that one
    launch replaces hundreds; ``"aot_eager"`` traces without generating code (a quick check).
    The whole step is one graph (``fullgraph=True``): the model's layers, quantized ones included
    (chapter 14's int8 and int4 kernels are called from inside it), and the static cache's writes.
    Ask :func:`compile_unavailable` first where inductor may lack its compiler."""
    return torch.compile(decode_step, backend=backend, mode=mode, fullgraph=True)


def compile_unavailable(backend: str = "inductor", device: torch.device | str = "cpu") -> str | None:
    """Why ``torch.compile(backend=...)`` cannot generate code for ``device`` here, in words; None
    when it can. inductor writes C++ for a CPU, so it needs a C++ compiler (g++ or clang++; MSVC's
    ``cl`` on Windows, which a student's Windows often lacks), and Triton for a GPU. Other backends
    (``aot_eager``) generate no code."""
    if backend != "inductor":
        return None
    if torch.device(device).type in ("cuda", "xpu"):
        if importlib.util.find_spec("triton") is None:  # torch's CUDA wheels bring it; asked, not imported
            return "inductor compiles a GPU's kernels with Triton, which is not installed"
        return None
    from torch._inductor import cpp_builder

    try:
        cpp_builder.get_cpp_compiler()
    except Exception as error:  # noqa: BLE001 - each platform's search raises its own error
        return f"inductor compiles a CPU's kernels with a C++ compiler and finds none here ({error})"
    return None


def static_pass(
    model: GPT, prompt: Sequence[int], step: Callable = decode_step, slots: int | None = None
) -> Callable[[], None]:
    """:func:`cached_pass` for the fast path: one decoding step through ``step``
    (:func:`decode_step`, or :func:`compiled_step`'s) over a :class:`~course_lib.attention.StaticKVCache`
    holding ``prompt``, forgotten again after each call (its slot moved back). What a step of
    :func:`generate_batch` at batch 1 costs, to time or to profile. ``slots``: the cache's size
    (default: the prompt and one step); a step compiled for ``generate_batch(model, [prompt], new)``
    is reused as it is with ``slots=len(prompt) + new - 1`` (another size is another shape: a
    recompilation). Call it under ``torch.no_grad()``, the model in eval mode."""
    device = model_device(model)
    slots = len(prompt) + 1 if slots is None else slots
    cache = model.new_static_cache(torch.zeros(1, dtype=torch.long, device=device), slots)
    model(torch.tensor([list(prompt)], device=device), cache=cache)  # (1, T): the prompt, cached
    ids = torch.full((1, 1), int(prompt[-1]), device=device)  # (1, 1)

    def run() -> None:
        step(model, cache, ids)  # (1, V)
        cache.slot -= 1  # in place: the same tensor, one slot back

    return run


def _check_prompts(prompts: Sequence[Sequence[int]], context_length: int) -> list[list[int]]:
    if isinstance(prompts, torch.Tensor) or not isinstance(prompts, Sequence) or isinstance(prompts, str):
        raise TypeError(f"prompts must be a list of token-id lists, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError("prompts is empty: give at least one prompt (a list of token ids)")
    rows = []
    for k, prompt in enumerate(prompts):
        if isinstance(prompt, torch.Tensor):
            prompt = prompt.tolist()
        if isinstance(prompt, str) or not isinstance(prompt, Sequence) or not all(isinstance(t, int) for t in prompt):
            raise TypeError(f"prompt {k} must be a list of token ids (int), got {prompt!r:.60}")
        if len(prompt) == 0:
            raise ValueError(f"prompt {k} is empty: a model needs at least one token to predict from")
        if len(prompt) > context_length:
            raise ValueError(
                f"prompt {k} has {len(prompt)} tokens, more than the context of {context_length}: "
                f"keep its last tokens (prompt[-{context_length}:]) or shorten it"
            )
        rows.append(list(prompt))
    return rows


def _sample_rows(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    greedy: bool,
    generator: torch.Generator | Sequence[torch.Generator] | None,
) -> torch.Tensor:
    """(B, V) -> (B, 1): one generator for the batch (as :func:`generate` draws), or one per row
    (each row then draws what it draws alone)."""
    if generator is None or isinstance(generator, torch.Generator) or greedy:
        return sample_next(logits, temperature, top_k, top_p, greedy, generator)  # (B, 1)
    rows = [sample_next(logits[b : b + 1], temperature, top_k, top_p, False, g) for b, g in enumerate(generator)]
    return torch.cat(rows)  # (B, 1)


@torch.no_grad()
def generate_batch(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | None = None,
    step: Callable[[GPT, StaticKVCache, torch.Tensor], torch.Tensor] = decode_step,
    check_every: int | None = None,
) -> list[list[int]]:
    """The new tokens of each prompt (a list of token-id lists, any lengths), generated as one
    batch; each row's list ends after its own ``eos_id`` (kept), or after ``max_new_tokens``.

    Each row gets the tokens :func:`generate` gives it alone: greedy, or sampled with one
    generator per row (``generator=[g0, g1, ...]``); a single generator draws for the batch as
    a whole, like :func:`generate` on a batch. How: the prompts are padded on the left, so that
    they all end at the same slot of a :class:`~course_lib.attention.StaticKVCache`; each row
    counts its positions from its own first token and never attends to padding. A row whose
    length reaches the context is recomputed from its last ``context_length`` tokens at every
    step, as :func:`generate` slides its window. ``step`` computes a decoding step: pass
    ``compiled_step()`` for the compiled one.

    Whether every row has finished is a question the host asks the device (a synchronisation: on
    a GPU the loop waits there for the step to end before it can launch the next). It is asked
    every ``check_every`` tokens (default: every token on a CPU, where asking costs nothing and a
    step after the end costs a step; every 8 elsewhere), and no other per-token work waits for the
    device: with a compiled step on a GPU the host runs ahead and queues the next steps. A row that
    finished writes ``eos_id`` until the others do, so the tokens do not depend on ``check_every``.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"generate_batch needs a course_lib GPT (it builds a static cache), got {type(model).__name__}")
    context = model.config.context_length
    rows = _check_prompts(prompts, context)
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be 0 or more, got {max_new_tokens}")
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be positive (or use greedy=True), got {temperature}")
    if check_every is not None and check_every < 1:
        raise ValueError(f"check_every must be a positive number of tokens, got {check_every}")
    if not (generator is None or isinstance(generator, torch.Generator)) and len(generator) != len(rows):
        raise ValueError(f"give one generator per prompt: {len(rows)} prompts, {len(generator)} generators")
    B, device = len(rows), model_device(model)
    if check_every is None:
        check_every = 1 if device.type == "cpu" else 8
    lengths = [len(r) for r in rows]
    T = max(lengths)
    if max_new_tokens == 0:
        return [[] for _ in rows]
    ids = torch.zeros(B, T + max_new_tokens, dtype=torch.long)  # (B, T + new): every token so far
    for b, row in enumerate(rows):
        ids[b, T - len(row) : T] = torch.tensor(row)  # left padding (id 0, never attended to)
    ids = ids.to(device)  # one transfer for the whole batch
    pad = torch.tensor([T - n for n in lengths], device=device)  # (B,)
    cache = model.new_static_cache(pad, T + max_new_tokens - 1)  # the last new token is never fed
    finished = torch.zeros(B, 1, dtype=torch.bool, device=device)
    with evaluating(model):
        logits = model(ids[:, :T], cache=cache)[:, -1]  # (B, V): prefill every prompt at once
        for s in range(max_new_tokens):
            next_id = _sample_rows(logits, temperature, top_k, top_p, greedy, generator)  # (B, 1)
            if eos_id is not None:
                next_id = next_id.masked_fill(finished, eos_id)
                finished |= next_id == eos_id
            ids[:, T + s] = next_id[:, 0]
            if s == max_new_tokens - 1 or (eos_id is not None and s % check_every == 0 and bool(finished.all())):
                break
            total = [n + s + 1 for n in lengths]  # each row's length with the new token
            past = [b for b in range(B) if total[b] > context]  # rows whose window slides
            if len(past) < B:
                logits = step(model, cache, next_id)  # (B, V)
            if past:  # every row ends at column T + s, so their windows are the same slice
                which = torch.tensor(past, device=device)  # (P,)
                window = ids.index_select(0, which)[:, T + s + 1 - context : T + s + 1]  # (P, context)
                recomputed = model(window)[:, -1]  # (P, V), as generate() refills its cache
                logits = recomputed if len(past) == B else logits.index_copy(0, which, recomputed)
    new = ids[:, T:].tolist()
    out = []
    for row in new:
        row = row[: s + 1]
        out.append(row[: row.index(eos_id) + 1] if eos_id is not None and eos_id in row else row)
    return out


# --------------------------------------------------------------------------------------
# One sequence that grows and is edited: prompts, tools' results, turns of a chat
# --------------------------------------------------------------------------------------


class Session:
    """One token sequence and its KV cache, for loops that do more than append samples: a tool
    writes its result into the sequence, a chat adds the user's next turn, a rejected piece is
    taken back. :meth:`extend` adds tokens (run lazily, all at once, when logits are next
    needed), :meth:`sample` draws the next token and appends it, :meth:`truncate` forgets
    tokens (the cache keeps what precedes them).

    Past the context the window slides as in :func:`stream`, so sampling token after token
    gives exactly :func:`generate`'s tokens (tested). ``use_cache=False`` (or a model that is
    not a course GPT, with ``context_length`` given) recomputes the window at every step.
    """

    def __init__(
        self,
        model: nn.Module,
        ids: Sequence[int] = (),
        context_length: int | None = None,
        use_cache: bool | None = None,
    ):
        self.model = model
        self.context_length = _context(model) if context_length is None else context_length
        self.use_cache = isinstance(model, GPT) if use_cache is None else use_cache
        if self.use_cache and not isinstance(model, GPT):
            raise ValueError(f"use_cache=True needs a course_lib GPT, got {type(model).__name__}")
        self.device = model_device(model)
        self.cache = model.new_cache(self.context_length) if self.use_cache else None
        self.ids: list[int] = []
        self._prefix = True  # the cache holds ids[:cache.length] (False: a window that slid past the start)
        self._logits: torch.Tensor | None = None  # (1, V) after ids[-1], while nothing was added or removed
        self.extend(ids)

    def extend(self, ids: Sequence[int]) -> None:
        """Append tokens; the model reads them when the next logits are asked for."""
        ids = [int(t) for t in ids]
        if ids:
            self.ids += ids
            self._logits = None

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` tokens and forget the rest (the cache too)."""
        if not 0 <= length <= len(self.ids):
            raise ValueError(f"cannot truncate a session of {len(self.ids)} tokens to {length}")
        if length < len(self.ids):
            self.ids = self.ids[:length]
            self._logits = None
        if self.cache is not None and self._prefix and self.cache.length > length:
            self.cache.truncate(length)

    @torch.no_grad()
    def logits(self) -> torch.Tensor:
        """(1, V) logits of the token after the sequence, running only what the cache lacks."""
        if not self.ids:
            raise ValueError("the session is empty: extend it with a prompt first")
        if self._logits is not None:
            return self._logits
        C, n = self.context_length, len(self.ids)
        with evaluating(self.model):
            if self.cache is None:
                self._logits = self.model(torch.tensor([self.ids[-C:]], device=self.device))[:, -1]  # (1, V)
                return self._logits
            if self._prefix and self.cache.length == n:  # all cached, but a truncation dropped the logits
                self.cache.truncate(n - 1)  # run the last token again
            if self._prefix and n <= C:  # the window still starts at the first token: only the new ones run
                new = torch.tensor([self.ids[self.cache.length :]], device=self.device)  # (1, new)
                out = self.model(new, cache=self.cache)  # (1, new, V)
            else:  # the window slides: refill the cache from the last C tokens, as stream() does
                self.cache.reset()
                out = self.model(torch.tensor([self.ids[-C:]], device=self.device), cache=self.cache)
                self._prefix = n <= C
            self._logits = out[:, -1]  # (1, V)
        return self._logits

    def sample(
        self,
        temperature: float = 1.0,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        *,
        top_k: int | None = None,
        top_p: float | None = None,
    ) -> int:
        """Draw the next token (as :func:`sample_next` does), append it, and return it."""
        token = int(sample_next(self.logits(), temperature, top_k, top_p, greedy, generator))
        self.extend([token])
        return token
