"""Looking inside a trained GPT (chapter 15): what each layer holds, what each head does, and
interventions that show it causally.

Everything works through PyTorch hooks on an unchanged :class:`~course_lib.model.GPT` (GPT-2,
the course GPT, SmolLM2: learned positions or RoPE, grouped-query attention alike), and every
context manager removes its hooks when it ends, also when the block inside raises.

Shapes: ``B`` batch, ``T`` tokens, ``C`` model width, ``L`` layers, ``H`` heads, ``D`` head
width, ``V`` vocabulary.

Looking:

- :class:`Cache`: ``resid`` (L + 1 tensors (B, T, C): the residual stream entering each block,
  then the one leaving the last block, before the final norm), ``attention`` (L tensors
  (B, H, T, T)), ``z`` (L tensors (B, T, H, D): each head's mix of values, the input of
  ``c_proj`` split by head); ``cache.head_outputs(layer)`` (B, T, H, C): what each head writes
  into the residual stream;
- :func:`capture` ``(model, attention=True)``: a context manager yielding a Cache that fills
  whenever the model runs inside it; :func:`run_with_cache` ``(model, idx)`` -> (logits, Cache);
- :func:`logit_lens` ``(model, cache, positions=None)`` -> (L + 1, B, T, V): each residual
  stream read by the model's own final norm and LM head.

Scoring heads (on lists of (B, H, T, T) weights, e.g. ``cache.attention``):

- :func:`previous_token_scores` -> (L, H); :func:`induction_scores` ``(attention, period)``
  -> (L, H), Olsson et al.'s (2022) prefix-matching score on repeated random tokens
  (:func:`repeated_random_tokens`).

Intervening (context managers; interventions run before a :func:`capture` records):

- :func:`ablate_heads` ``(model, heads, how="zero" | "mean", means=None)``, with
  :func:`head_means` ``(model, idx)``;
- :func:`patch_heads` ``(model, heads, source, positions=None)`` and :func:`patch_resid`
  ``(model, layer, source, positions=None)``: activation patching from the Cache of another
  input;
- :func:`per_token_loss` ``(logits, idx)`` -> (B, T - 1): the loss of every prediction, to pair
  an intervention with the clean run item by item;
- :func:`logit_difference` ``(logits, right, wrong)`` -> (B,), :func:`fraction_recovered`
  ``(patched, clean, corrupt)``, and :func:`patch_each_head` ``(model, idx, source, metric)``
  -> (L, H): noising (a corrupt source into the clean run) and denoising (a clean source into
  the corrupt run) on one normalised scale.

Reading the weights and the output:

- :func:`head_circuits` ``(model, layer, head)`` -> (W_QK, W_OV); :func:`composition_score`,
  :func:`composition_scores` ``(model, kind)`` -> (H, H) ("Q", "K" or "V" composition), and
  :func:`random_composition_scores`, the baseline unrelated heads score;
  :func:`copying_scores` ``(model)`` -> (L, H): does a head's OV circuit copy the token it
  attends to (W_E W_OV W_U)?
- :func:`logit_attribution` ``(model, cache, right, wrong=None)`` -> :class:`LogitAttribution`:
  each head's, attention layer's and MLP's direct share of a logit (difference).

Hooks and TransformerLens's hook names (for students going on to ARENA): ``cache.resid[l]`` is
``blocks.l.hook_resid_pre`` (the last, ``ln_final.hook_in``), ``cache.attention[l]`` is
``blocks.l.attn.hook_pattern``, ``cache.z[l]`` is ``blocks.l.attn.hook_z``,
``cache.head_outputs(l)`` is ``blocks.l.attn.hook_result`` (``stack_head_results``);
:func:`ablate_heads` and :func:`patch_heads` write ``hook_z``, :func:`patch_resid` writes
``hook_resid_pre``.

Probing: :func:`probe` ``(features, labels, control_labels, test=None, seed=0, l2=1e-3,
groups=None)`` -> :class:`ProbeResult`: logistic-regression probes (:func:`fit_linear_probe`)
on a task and on Hewitt and Liang's (2019) control task (:func:`control_task`: each token type
a random label), their test accuracies with n and 95% intervals, the majority baseline on the test items, balanced
accuracies, and the selectivity (task minus control accuracy, paired over the same test items;
clustered by ``groups``, e.g. sequences); :func:`balanced_selectivity` over several control
seeds puts both sides on one floor.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .evaluation import PairedDifference, paired_difference, wilson_interval
from .layers import LayerNorm
from .model import GPT
from .runtime import evaluating, model_device

ABLATIONS = ("zero", "mean")


# --------------------------------------------------------------------------------------
# Capturing activations
# --------------------------------------------------------------------------------------


@dataclass
class Cache:
    """The activations of one forward pass (see the module docstring for the shapes).

    ``out_weights`` holds each layer's ``c_proj`` weight (C, H * D), shared with the model, so
    that :meth:`head_outputs` can split the attention's output by head."""

    resid: list[torch.Tensor] = field(default_factory=list)
    attention: list[torch.Tensor] = field(default_factory=list)
    z: list[torch.Tensor] = field(default_factory=list)
    out_weights: list[torch.Tensor] = field(default_factory=list, repr=False)

    @property
    def n_layers(self) -> int:
        return len(self.z)

    def __repr__(self) -> str:
        def shapes(tensors):
            return f"{len(tensors)} x {tuple(tensors[0].shape)}" if tensors and tensors[0] is not None else "[]"

        return f"Cache(resid={shapes(self.resid)}, attention={shapes(self.attention)}, z={shapes(self.z)})"

    def head_outputs(self, layer: int) -> torch.Tensor:
        """(B, T, H, C): what each head of ``layer`` adds to the residual stream, z_h through its
        own D columns of ``c_proj`` (no bias: the bias belongs to no head). Summed over heads
        and plus the bias, it is the attention layer's output."""
        layer = _check_layer(layer, self.n_layers)
        z = self.z[layer]  # (B, T, H, D)
        B, T, H, D = z.shape
        w = self.out_weights[layer].view(-1, H, D)  # (C, H, D): head h's slice of c_proj
        return torch.einsum("bthd,chd->bthc", z, w.to(z.dtype))  # (B, T, H, C)


def _blocks(model: GPT) -> nn.ModuleList:
    if not isinstance(model, GPT):
        raise TypeError(f"expected a course_lib GPT, got {type(model).__name__}")
    return model.transformer.h


def _index(value, what: str, top: int) -> int:
    """``value`` as a Python int in 0..top - 1 (a NumPy or 0-d tensor integer is fine)."""
    try:
        index = operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be a whole number, got {value!r}") from None
    if not 0 <= index < top:
        raise ValueError(f"{what} {index} is out of range: this model has {what}s 0..{top - 1}")
    return index


def _check_layer(layer: int, n_layers: int, allow_final: bool = False) -> int:
    return _index(layer, "layer", n_layers + 1 if allow_final else n_layers)


def _check_heads(model: GPT, heads: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    """{layer: [head, ...]} from (layer, head) pairs, each checked against the model."""
    by_layer: dict[int, list[int]] = {}
    for pair in heads:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"heads are (layer, head) pairs, got {pair!r} (one head is [(layer, head)])")
        layer = _check_layer(pair[0], model.config.n_layers)
        head = _index(pair[1], "head", model.config.n_heads)
        if head not in by_layer.setdefault(layer, []):
            by_layer[layer].append(head)
    return by_layer


def _check_batch(model: GPT, idx: torch.Tensor) -> None:
    device = model_device(model)
    if isinstance(idx, torch.Tensor) and idx.device != device:  # anything else: the model's own checks name it
        raise ValueError(f"the batch is on {idx.device} but the model is on {device}: move it with idx.to({device})")


@contextmanager
def _hooks(model: GPT, handles: list) -> Iterator[None]:
    """Check every batch's device on the way in; remove ``handles`` (and that check) at the end,
    whatever happens inside."""

    def check(module, args):
        _check_batch(model, args[0])

    handles.append(model.transformer.wte.register_forward_pre_hook(check, prepend=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def capture(model: GPT, attention: bool = True) -> Iterator[Cache]:
    """Record the residual streams, head mixes and (with ``attention``) attention weights of
    every forward pass of ``model`` inside the block; the Cache holds the latest pass.

    The fast kernel never forms the attention weights, so while capturing, each attention layer
    is asked for them (``return_weights=True``) and runs its readable path: the logits agree
    with the fast path's to float rounding. ``attention=False`` leaves the fast path alone.
    Tensors are detached; nothing is copied."""
    blocks = _blocks(model)
    L = len(blocks)
    cache = Cache(out_weights=[block.attn.c_proj.weight.detach() for block in blocks])

    def resid_hook(layer):
        def hook(module, args):
            if layer == 0:  # a new forward pass begins
                cache.resid[:] = [None] * (L + 1)
                cache.z[:] = [None] * L
                cache.attention[:] = [None] * L if attention else []
            cache.resid[layer] = args[0].detach()

        return hook

    def z_hook(layer):
        def hook(module, args):
            x = args[0]  # (B, T, H * D)
            cache.z[layer] = x.detach().reshape(*x.shape[:-1], model.config.n_heads, -1)  # (B, T, H, D)

        return hook

    def ask_weights(module, args, kwargs):
        return args, {**kwargs, "return_weights": True}

    def weights_hook(layer):
        def hook(module, args, kwargs, output):
            if not isinstance(output, tuple):  # a static cache's decoding step returns no weights
                return output
            out, weights = output
            cache.attention[layer] = weights.detach()  # (B, H, T, T)
            return out

        return hook

    handles = []
    for layer, block in enumerate(blocks):
        handles.append(block.register_forward_pre_hook(resid_hook(layer)))
        handles.append(block.attn.c_proj.register_forward_pre_hook(z_hook(layer)))
        if attention:
            handles.append(block.attn.register_forward_pre_hook(ask_weights, with_kwargs=True))
            handles.append(block.attn.register_forward_hook(weights_hook(layer), with_kwargs=True))
    handles.append(model.transformer.ln_f.register_forward_pre_hook(resid_hook(L)))
    with _hooks(model, handles):
        yield cache


@torch.no_grad()
def run_with_cache(model: GPT, idx: torch.Tensor, attention: bool = True) -> tuple[torch.Tensor, Cache]:
    """``(logits (B, T, V), Cache)`` of one forward pass in eval mode, without gradients."""
    _check_batch(model, idx)
    with evaluating(model), capture(model, attention) as cache:
        logits = model(idx)
    return logits, cache


def logit_lens(model: GPT, cache: Cache, positions=None) -> torch.Tensor:
    """(L + 1, B, T, V): what the model would predict if it stopped after each block, reading
    each residual stream with its own final norm and LM head (nostalgebraist, 2020). Layer 0 is
    the embeddings alone; the last equals the model's logits. Earlier layers were never trained
    to be read this way, so a late answer is no proof the model lacks it earlier (a tuned lens
    learns one map per layer instead).

    ``positions`` (a position or a list of them, e.g. ``-1``) reads only those: (L + 1, B, P, V).
    A large vocabulary makes the whole table big (SmolLM2, 60 tokens: 1.5 GB)."""
    if len(cache.resid) != model.config.n_layers + 1:
        n = model.config.n_layers + 1
        raise ValueError(f"the cache holds {len(cache.resid)} residual streams, the model needs {n}")
    resid = torch.stack(cache.resid)  # (L + 1, B, T, C)
    resid = resid[:, :, _positions(positions, resid.shape[2], resid.device)]  # (L + 1, B, P, C)
    with torch.no_grad():
        return model.lm_head(model.transformer.ln_f(resid))  # (L + 1, B, T, V)


# --------------------------------------------------------------------------------------
# Interventions
# --------------------------------------------------------------------------------------


def _positions(positions, T: int, device) -> torch.Tensor | slice:
    if positions is None:
        return slice(None)
    positions = torch.as_tensor(positions, dtype=torch.long, device=device).flatten()
    if positions.numel() and (positions.min() < -T or positions.max() >= T):
        raise ValueError(f"positions {positions.tolist()} are out of range for {T} tokens")
    return positions


def _replace_heads(model: GPT, by_layer: dict[int, list[int]], new_z, positions=None) -> list:
    """Pre-hooks on ``c_proj`` that overwrite the listed heads' z with ``new_z(layer, z)``
    (B, T, len(heads), D) at ``positions``; registered first, so a capture records the result."""
    H = model.config.n_heads
    handles = []
    for layer, heads in by_layer.items():

        def hook(module, args, layer=layer, heads=heads):
            x = args[0]  # (B, T, H * D)
            z = x.reshape(*x.shape[:-1], H, -1).clone()  # (B, T, H, D)
            where = _positions(positions, z.shape[1], z.device)
            new = new_z(layer, z).to(z.dtype)  # (B, T, len(heads), D)
            for k, head in enumerate(heads):
                z[:, where, head] = new[:, where, k]
            return (z.view_as(x), *args[1:])

        handles.append(_blocks(model)[layer].attn.c_proj.register_forward_pre_hook(hook, prepend=True))
    return handles


@contextmanager
def ablate_heads(
    model: GPT, heads: Iterable[tuple[int, int]], how: str = "zero", means: Sequence[torch.Tensor] | None = None
) -> Iterator[None]:
    """Inside the block, the listed (layer, head) pairs are knocked out: their z is replaced by
    zeros (``how="zero"``) or by its mean over a reference batch (``how="mean"``, with
    ``means`` from :func:`head_means`). Mean ablation keeps the layer's input to c_proj at its
    usual size, so the effect measured is the head's information, not a shock to the scale."""
    if how not in ABLATIONS:
        raise ValueError(f"unknown ablation {how!r}; choose one of {', '.join(ABLATIONS)}")
    by_layer = _check_heads(model, heads)
    shape = (model.config.n_heads, model.config.head_dim)
    if how == "mean":
        if means is None:
            raise ValueError("mean ablation needs the heads' means: pass means=head_means(model, idx)")
        if len(means) != model.config.n_layers or any(tuple(m.shape) != shape for m in means):
            raise ValueError(
                f"means must hold one (n_heads, head_dim) = {shape} tensor per layer "
                f"({model.config.n_layers}), got shapes {[tuple(m.shape) for m in means]}"
            )

    def new_z(layer, z):  # z: (B, T, H, D)
        if how == "zero":
            return torch.zeros_like(z[:, :, by_layer[layer]])
        return means[layer][by_layer[layer]].to(z.device).expand_as(z[:, :, by_layer[layer]])

    with _hooks(model, _replace_heads(model, by_layer, new_z)):
        yield


@torch.no_grad()
def head_means(model: GPT, idx: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, (H, D): each head's z averaged over the batch and its positions, the value a
    mean ablation puts in its place."""
    _, cache = run_with_cache(model, idx, attention=False)
    return [z.float().mean(dim=(0, 1)) for z in cache.z]  # (H, D) each


def _check_source(name: str, source: torch.Tensor, current: torch.Tensor) -> None:
    if source.shape != current.shape:
        raise ValueError(
            f"the source run's {name} has shape {tuple(source.shape)} but this run's has {tuple(current.shape)}: "
            "patch between batches of the same shape"
        )


@contextmanager
def patch_heads(model: GPT, heads: Iterable[tuple[int, int]], source: Cache, positions=None) -> Iterator[None]:
    """Activation patching: inside the block, the listed heads' z (at ``positions``, default all)
    is taken from ``source``, the Cache of a run on another input of the same shape. If the
    output moves toward the source's, those heads carry the difference between the inputs."""
    by_layer = _check_heads(model, heads)
    if len(source.z) != model.config.n_layers:
        raise ValueError(f"the source Cache holds {len(source.z)} layers, the model has {model.config.n_layers}")

    def new_z(layer, z):
        _check_source(f"z of layer {layer}", source.z[layer], z)
        return source.z[layer][:, :, by_layer[layer]].to(z.device)

    with _hooks(model, _replace_heads(model, by_layer, new_z, positions)):
        yield


@contextmanager
def patch_resid(model: GPT, layer: int, source: Cache, positions=None) -> Iterator[None]:
    """Activation patching of the residual stream entering block ``layer`` (``n_layers``: the
    one entering the final norm), at ``positions`` (default all), from ``source``."""
    blocks = _blocks(model)
    layer = _check_layer(layer, len(blocks), allow_final=True)
    if len(source.resid) != len(blocks) + 1:
        n = len(blocks) + 1
        raise ValueError(f"the source Cache holds {len(source.resid)} residual streams, the model has {n}")
    module = blocks[layer] if layer < len(blocks) else model.transformer.ln_f

    def hook(module, args):
        x = args[0]  # (B, T, C)
        _check_source(f"residual stream {layer}", source.resid[layer], x)
        x = x.clone()
        where = _positions(positions, x.shape[1], x.device)
        x[:, where] = source.resid[layer][:, where].to(x.device, x.dtype)
        return (x, *args[1:])

    with _hooks(model, [module.register_forward_pre_hook(hook, prepend=True)]):
        yield


def per_token_loss(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """(B, T - 1): the cross-entropy of each next-token prediction (position t predicts token
    t + 1), in float32: the per-item numbers a paired comparison of two runs needs."""
    if logits.ndim != 3 or logits.shape[:2] != idx.shape:
        shapes = f"{tuple(logits.shape)} and {tuple(idx.shape)}"
        raise ValueError(f"logits (B, T, V) and ids (B, T) must agree, got {shapes}")
    return F.cross_entropy(logits[:, :-1].float().transpose(1, 2), idx[:, 1:], reduction="none")  # (B, T - 1)


# --------------------------------------------------------------------------------------
# Scoring heads
# --------------------------------------------------------------------------------------


def _stack(attention: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    if not isinstance(attention, torch.Tensor) and not len(attention):
        raise ValueError("no attention weights: capture them with capture(model, attention=True)")
    weights = attention if isinstance(attention, torch.Tensor) else torch.stack(list(attention))
    if weights.ndim != 5 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"expected attention weights of shape (L, B, H, T, T), got {tuple(weights.shape)}")
    return weights.float()  # (L, B, H, T, T)


def previous_token_scores(attention: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """(L, H): the mean attention each head pays from position t to t - 1 (t >= 1), over the
    batch and positions. A previous-token head scores near 1."""
    weights = _stack(attention)
    if weights.shape[-1] < 2:
        raise ValueError("previous-token scores need at least 2 positions")
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(1, 3))  # (L, B, H, T-1) -> (L, H)


def induction_scores(attention: Sequence[torch.Tensor] | torch.Tensor, period: int) -> torch.Tensor:
    """(L, H): on sequences whose last ``2 * period`` tokens are a random block repeated (a BOS
    token may come first, see :func:`repeated_random_tokens`), the mean attention from each
    position t of the second copy to t - period + 1: the token that followed the earlier copy
    of the current token. This is Olsson et al.'s (2022) prefix-matching score (ARENA's
    induction score, without its few first-half queries); an induction head scores near 1.

    A score is a pattern, not a mechanism: trained on one fixed period, a layer-0 head can look
    ``period - 1`` tokens back by position alone and score as high. Score on another period
    than the training one, and ablate, before calling a head an induction head."""
    weights = _stack(attention)
    T = weights.shape[-1]
    if period < 1 or T < 2 * period:
        raise ValueError(f"a period of {period} needs at least {2 * period} positions, got {T}")
    queries = torch.arange(T - period, T, device=weights.device)  # the second copy
    return weights[..., queries, queries - period + 1].mean(dim=(1, 3))  # (L, B, H, period) -> (L, H)


def repeated_random_tokens(
    batch: int, length: int, vocab_size: int, generator: torch.Generator, bos: int | None = None
) -> torch.Tensor:
    """(B, 2 * length) ids: ``length`` uniformly random tokens, then the same again, with
    ``bos`` prepended when given ((B, 2 * length + 1), and ``bos`` never drawn among the
    tokens). Only a model that copies from its context can predict the second half."""
    if batch < 1 or length < 1:
        raise ValueError(f"batch and length must be at least 1, got {batch} and {length}")
    n = vocab_size - (bos is not None)
    if n < 1:
        raise ValueError(f"a vocabulary of {vocab_size} leaves no tokens to draw")
    half = torch.randint(0, n, (batch, length), generator=generator)  # (B, length)
    if bos is not None:
        if not 0 <= bos < vocab_size:
            raise ValueError(f"bos={bos} is outside the vocabulary of {vocab_size}")
        half = half + (half >= bos).long()  # skip the bos id
    ids = torch.cat([half, half], dim=1)  # (B, 2 * length)
    if bos is None:
        return ids
    return torch.cat([torch.full((batch, 1), bos, dtype=torch.long), ids], dim=1)


# --------------------------------------------------------------------------------------
# Reading the weights
# --------------------------------------------------------------------------------------

COMPOSITIONS = ("Q", "K", "V")


def _head_weights(model: GPT, layer: int, head: int) -> tuple[torch.Tensor, ...]:
    """(W_q, W_k, W_v) (D, C) each and W_o (C, D) of one head; under grouped-query attention its
    keys and values are those of the key/value head it reads."""
    attn = _blocks(model)[_check_layer(layer, model.config.n_layers)].attn
    head = _index(head, "head", attn.n_heads)
    C, D = attn.d_model, attn.head_dim
    kv = head // (attn.n_heads // attn.n_kv_heads)
    W = attn.c_attn.weight.detach()  # (C + 2 Ckv, C): queries, keys, values
    W_q = W[head * D : (head + 1) * D]
    W_k = W[C + kv * D : C + (kv + 1) * D]
    W_v = W[C + attn.kv_dim + kv * D : C + attn.kv_dim + (kv + 1) * D]
    return W_q, W_k, W_v, attn.c_proj.weight.detach()[:, head * D : (head + 1) * D]


def head_circuits(model: GPT, layer: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W_QK, W_OV)``, (C, C) each, of one head in the row-vector convention (Elhage et al.,
    2021): its attention score is x_q W_QK x_k^T and what it writes is x W_OV. Read from the
    weights alone: the norms, the biases and RoPE's rotation of queries and keys are left out."""
    W_q, W_k, W_v, W_o = _head_weights(model, layer, head)
    return W_q.T @ W_k, W_v.T @ W_o.T


def composition_score(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a b||_F / (||a||_F ||b||_F): how much of what ``a`` writes ``b`` reads (Elhage et al.,
    2021). Unrelated matrices score above 0 too: compare with :func:`random_composition_scores`."""
    return float((a.float() @ b.float()).norm() / (a.float().norm() * b.float().norm()))


def composition_scores(model: GPT, kind: str, earlier: int = 0, later: int = 1) -> torch.Tensor:
    """(H, H): the ``kind`` ("Q", "K" or "V") composition score of every head of layer
    ``earlier`` (rows) into every head of layer ``later`` (columns): whether the later head's
    queries, keys or values read what the earlier head's OV circuit writes (TransformerLens's
    ``all_composition_scores``)."""
    if kind not in COMPOSITIONS:
        raise ValueError(f"unknown composition {kind!r}; choose one of {', '.join(COMPOSITIONS)}")
    H = model.config.n_heads
    scores = torch.zeros(H, H)
    for h0 in range(H):
        ov0 = head_circuits(model, earlier, h0)[1]
        for h1 in range(H):
            qk1, ov1 = head_circuits(model, later, h1)
            reader = {"Q": qk1, "K": qk1.T, "V": ov1}[kind]
            scores[h0, h1] = composition_score(ov0, reader)
    return scores


def random_composition_scores(d_model: int, head_dim: int, n: int, generator: torch.Generator) -> torch.Tensor:
    """(n,): the composition scores of ``n`` pairs of unrelated random matrices shaped like two
    heads' circuits, each (C, C) of rank ``head_dim``, the product of two (C, D) Gaussian factors.
    The baseline a composition score must beat: it is about 1 / sqrt(C), not 0."""
    factors = torch.randn(4, n, d_model, head_dim, generator=generator)  # (4, n, C, D)
    a = factors[0] @ factors[1].transpose(1, 2)  # (n, C, C)
    b = factors[2] @ factors[3].transpose(1, 2)
    return (a @ b).norm(dim=(1, 2)) / (a.norm(dim=(1, 2)) * b.norm(dim=(1, 2)))


@torch.no_grad()
def copying_scores(model: GPT) -> torch.Tensor:
    """(L, H): Olsson et al.'s (2022) copying score of each head, from its full OV circuit
    W_E W_OV W_U (V, V): the sum of its eigenvalues over the sum of their absolute values. Near
    +1, a token the head attends to raises its own logit (the head copies); near -1 it lowers it.
    An induction head must match the prefix (:func:`induction_scores`) **and** copy. From the
    weights alone (norms left out); the eigenvalues are those of the small (D, D) product
    W_o^T W_U W_E W_v^T, the nonzero ones of the (V, V) circuit."""
    W_E = model.transformer.wte.weight.detach().float()  # (V, C)
    W_U = model.lm_head.weight.detach().float().T  # (C, V)
    through = W_U @ W_E  # (C, C): unembed what was embedded
    L, H = model.config.n_layers, model.config.n_heads
    scores = torch.zeros(L, H)
    for layer in range(L):
        for head in range(H):
            _, _, W_v, W_o = _head_weights(model, layer, head)
            eigenvalues = torch.linalg.eigvals(W_o.float().T @ through @ W_v.float().T)  # (D,)
            scores[layer, head] = eigenvalues.sum().real / eigenvalues.abs().sum()
    return scores


# --------------------------------------------------------------------------------------
# Direct logit attribution
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogitAttribution:
    """What each part of the model adds directly to a logit (or a logit difference) at one
    position, (B,) per item: the embeddings, each head (``heads`` (L, H, B)), each attention
    layer (its heads plus its output bias, (L, B)), each MLP ((L, B)) and the final norm's bias.
    They add up to the logit exactly (``total``)."""

    embeddings: torch.Tensor
    heads: torch.Tensor
    attention: torch.Tensor
    mlp: torch.Tensor
    norm_bias: torch.Tensor

    @property
    def total(self) -> torch.Tensor:
        """(B,): the sum of every part: the model's logit (difference)."""
        return self.embeddings + self.attention.sum(dim=0) + self.mlp.sum(dim=0) + self.norm_bias


@torch.no_grad()
def logit_attribution(model: GPT, cache: Cache, right, wrong=None, position: int = -1) -> LogitAttribution:
    """Direct logit attribution: the residual stream at ``position`` is a sum of what the
    embeddings, every head and every MLP wrote; the final norm divides the whole by one scale
    (taken from this run, so it is linear in each part) and the LM head reads it. Each part's
    share of the logit of ``right`` (B,) (minus that of ``wrong`` (B,), when given: a logit
    difference) is that part read alone. "Direct": what a part changes through later layers is
    not counted; only an intervention measures that."""
    if len(cache.resid) != model.config.n_layers + 1:
        n = model.config.n_layers + 1
        raise ValueError(f"the cache holds {len(cache.resid)} residual streams, the model needs {n}")
    if not model.config.pre_norm:
        raise ValueError("logit attribution reads a pre-norm model's residual stream, a sum of what each part wrote")
    B = cache.resid[0].shape[0]
    resid = [r[:, position].float() for r in cache.resid]  # L + 1 of (B, C)
    W_U = model.lm_head.weight.detach().float()  # (V, C)
    right = torch.as_tensor(right, device=W_U.device).long().expand(B)
    direction = W_U[right]  # (B, C)
    if wrong is not None:
        direction = direction - W_U[torch.as_tensor(wrong, device=W_U.device).long().expand(B)]
    norm = model.transformer.ln_f
    centred = isinstance(norm, LayerNorm)
    final = resid[-1]
    if centred:
        scale = torch.sqrt(final.var(dim=-1, unbiased=False) + norm.eps)  # (B,)
    else:
        scale = torch.sqrt(final.pow(2).mean(dim=-1) + norm.eps)
    reader = direction * norm.weight.detach().float() / scale[:, None]  # (B, C)

    def read(x):  # (..., B, C) -> (..., B)
        if centred:
            x = x - x.mean(dim=-1, keepdim=True)
        return (x * reader).sum(dim=-1)

    heads, attention, mlp = [], [], []
    for layer, block in enumerate(_blocks(model)):
        outputs = cache.head_outputs(layer)[:, position].float()  # (B, H, C)
        bias = block.attn.c_proj.bias
        written = outputs.sum(dim=1) + (0.0 if bias is None else bias.detach().float())  # (B, C)
        heads.append(read(outputs.transpose(0, 1)))  # (H, B)
        attention.append(read(written))
        mlp.append(read(resid[layer + 1] - resid[layer] - written))
    norm_bias = torch.zeros(B) if getattr(norm, "bias", None) is None else direction @ norm.bias.detach().float()
    return LogitAttribution(read(resid[0]), torch.stack(heads), torch.stack(attention), torch.stack(mlp), norm_bias)


# --------------------------------------------------------------------------------------
# Patching, measured
# --------------------------------------------------------------------------------------


def logit_difference(logits: torch.Tensor, right, wrong, position=-1) -> torch.Tensor:
    """The logit of ``right`` minus that of ``wrong`` at ``position``: (B,) for one position,
    with ids (B,) or one for all; (B, P) for a list of P positions, with ids (B, P). A measure of
    the answer that ignores everything else the output does."""
    at = logits[:, position].float()  # (B, V) or (B, P, V)
    right = torch.as_tensor(right, device=at.device).long().expand(at.shape[:-1])
    wrong = torch.as_tensor(wrong, device=at.device).long().expand(at.shape[:-1])
    return at.gather(-1, right[..., None])[..., 0] - at.gather(-1, wrong[..., None])[..., 0]


def fraction_recovered(patched, clean, corrupt):
    """(patched − corrupt) / (clean − corrupt): where a patched run's measure lies between the
    corrupt run (0) and the clean run (1). Denoising (a clean activation patched into the corrupt
    run) near 1: that activation alone suffices to restore the behaviour. Noising (a corrupt
    activation into the clean run) near 0: the behaviour needs it."""
    return (patched - corrupt) / (clean - corrupt)


@torch.no_grad()
def patch_each_head(model: GPT, idx: torch.Tensor, source: Cache, metric, positions=None) -> torch.Tensor:
    """(L, H, ...): ``metric(logits)`` (a number, or a tensor such as one value per item) of a
    run on ``idx`` with each head in turn patched from ``source`` (at ``positions``), as
    TransformerLens's ``get_act_patch_attn_head_out_all_pos``. Denoising: ``idx`` the corrupt
    input, ``source`` the clean run's Cache; noising: the reverse."""
    L, H = model.config.n_layers, model.config.n_heads
    rows = []
    with evaluating(model):
        for layer in range(L):
            for head in range(H):
                with patch_heads(model, [(layer, head)], source, positions):
                    rows.append(torch.as_tensor(metric(model(idx))).detach().float().cpu())
    return torch.stack(rows).view(L, H, *rows[0].shape)


# --------------------------------------------------------------------------------------
# Probing with a control task
# --------------------------------------------------------------------------------------


def control_task(types: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Hewitt and Liang's (2019) control labels: each distinct type (e.g. token id) gets one
    label drawn from the task labels' own distribution, and keeps it wherever it occurs. A probe
    can only score well on it by memorising types, so it measures what the probe itself can do."""
    if types.shape != labels.shape or types.ndim != 1:
        raise ValueError(f"types and labels must be (N,) each, got {tuple(types.shape)} and {tuple(labels.shape)}")
    distinct, which = torch.unique(types, return_inverse=True)
    counts = torch.bincount(labels.long())
    drawn = torch.multinomial(counts.float(), len(distinct), replacement=True, generator=generator)  # (types,)
    return drawn[which.cpu()].to(labels.device)  # (N,)


@dataclass(frozen=True)
class ProbeResult:
    """The probe's right (1) or wrong (0) answers on each test item, for the task and the control
    task (the same items), and what they say: accuracies with 95% intervals, and the selectivity,
    task minus control paired over the items.

    Without ``groups`` every test item is an independent draw: Wilson intervals, and the
    selectivity's Newcombe interval with McNemar's p. With ``groups`` (which sequence each item
    came from: the tokens of one text are not independent draws) the intervals are clustered by
    group, t with (groups - 1) degrees of freedom (:func:`~course_lib.evaluation.paired_difference`
    with ``clusters``): 2,000 tokens from 20 texts are closer to 20 draws than to 2,000."""

    task_correct: list[int]
    control_correct: list[int]
    groups: list[int] | None = None
    task_labels: list[int] | None = None
    control_labels: list[int] | None = None

    @property
    def n(self) -> int:
        """Test items."""
        return len(self.task_correct)

    @property
    def n_groups(self) -> int:
        """Independent units among them: the groups, or the items."""
        return self.n if self.groups is None else len(set(self.groups))

    def _accuracy(self, correct: list[int]) -> tuple[float, tuple[float, float]]:
        if self.groups is None:
            return sum(correct) / self.n, wilson_interval(sum(correct), self.n)
        # the accuracy as a difference from 0, for its interval clustered by group
        above_zero = paired_difference(correct, [0] * self.n, clusters=self.groups)
        return above_zero.difference, (max(0.0, above_zero.low), min(1.0, above_zero.high))

    @property
    def task_accuracy(self) -> float:
        return sum(self.task_correct) / self.n

    @property
    def task_interval(self) -> tuple[float, float]:
        return self._accuracy(self.task_correct)[1]

    @property
    def control_accuracy(self) -> float:
        return sum(self.control_correct) / self.n

    @property
    def control_interval(self) -> tuple[float, float]:
        return self._accuracy(self.control_correct)[1]

    @property
    def selectivity(self) -> PairedDifference:
        """Task minus control accuracy, paired over the same items (clustered by group when
        given): the probe is selective only where its interval lies above 0."""
        return paired_difference(self.task_correct, self.control_correct, clusters=self.groups)

    @property
    def majority_accuracy(self) -> float:
        """What always guessing the test items' most common task label scores on them: the
        floor a task accuracy must beat (the control task's floor differs: see
        :meth:`balanced_accuracy`)."""
        labels = self._labels("task")
        return max(labels.count(y) for y in set(labels)) / self.n

    def _labels(self, which: str) -> list[int]:
        labels = {"task": self.task_labels, "control": self.control_labels}[which]
        if labels is None:
            raise ValueError("this result holds no labels of its test items: make it with probe()")
        return labels

    def balanced_items(self, which: str = "task") -> list[float]:
        """Each test item's share of the balanced accuracy of the ``which`` ("task" or
        "control") probe: right answers weighted by n / (classes * items of their class), so
        that their mean is the mean recall over the classes."""
        correct = {"task": self.task_correct, "control": self.control_correct}[which]
        labels = self._labels(which)
        counts = {y: labels.count(y) for y in set(labels)}
        return [c * self.n / (len(counts) * counts[y]) for c, y in zip(correct, labels)]

    def balanced_accuracy(self, which: str = "task") -> tuple[float, tuple[float, float]]:
        """The mean over classes of the share of each class's items the probe gets right, with
        its 95% interval (clustered by group when given). Guessing one class, or at random,
        scores 0.5 with two classes whatever their balance: task and control share this floor."""
        items = self.balanced_items(which)
        above = paired_difference(items, [0.0] * self.n, clusters=self.groups)
        return above.difference, (above.low, above.high)

    @property
    def balanced_selectivity(self) -> PairedDifference:
        """Balanced task minus balanced control accuracy, paired over the items: selectivity
        with one floor on both sides (:func:`balanced_selectivity`)."""
        return balanced_selectivity([self])

    def __str__(self) -> str:
        (tl, th), (cl, ch) = self.task_interval, self.control_interval
        units = f"n = {self.n}" if self.groups is None else f"n = {self.n} items in {self.n_groups} groups"
        return (
            f"task {self.task_accuracy:.3f} [{tl:.2f}, {th:.2f}], control {self.control_accuracy:.3f} "
            f"[{cl:.2f}, {ch:.2f}] ({units}); selectivity {self.selectivity}"
        )


def balanced_selectivity(results: Sequence[ProbeResult]) -> PairedDifference:
    """Selectivity on a shared floor: the balanced task accuracy minus the balanced control
    accuracy, the control averaged over several control tasks (one per seed of
    :func:`control_task`, scored on the same test items), paired over the items and clustered
    by group when given. Plain accuracies have different floors when the control's labels are
    spread over the types differently from the task's (always guessing the commonest label scores
    differently on the two), so their difference mixes floors with selectivity; one control seed
    is one draw of the types' labels."""
    if not results:
        raise ValueError("no probe results")
    first = results[0]
    for other in results[1:]:
        if other.task_correct != first.task_correct or other.groups != first.groups:
            raise ValueError("the results must share one task probe and its test items (vary only the control seed)")
    task = first.balanced_items("task")
    controls = [r.balanced_items("control") for r in results]
    control = [sum(values) / len(values) for values in zip(*controls)]
    return paired_difference(task, control, clusters=first.groups)


def fit_linear_probe(
    features: torch.Tensor, labels: torch.Tensor, n_classes: int | None = None, l2: float = 1e-3, max_iter: int = 200
) -> nn.Linear:
    """Multinomial logistic regression of ``labels`` (N,) on ``features`` (N, C): the linear map
    (C -> n_classes) minimising the mean cross-entropy plus ``l2`` times the squared weights (the
    penalty keeps separable data from driving the weights to infinity). Fitted by L-BFGS from
    zeros, so the same data always give the same probe."""
    x, y = features.float(), labels.long().to(features.device)
    n_classes = int(y.max()) + 1 if n_classes is None else n_classes
    linear = nn.Linear(x.shape[1], n_classes, device=x.device)
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)
    optimizer = torch.optim.LBFGS(
        linear.parameters(),
        max_iter=max_iter,
        tolerance_grad=1e-9,
        tolerance_change=1e-12,
        line_search_fn="strong_wolfe",
    )

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(linear(x), y) + l2 * linear.weight.square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return linear.requires_grad_(False)


def probe(
    features: torch.Tensor,
    labels: torch.Tensor,
    control_labels: torch.Tensor,
    test: torch.Tensor | None = None,
    test_fraction: float = 0.3,
    seed: int = 0,
    l2: float = 1e-3,
    groups: torch.Tensor | None = None,
) -> ProbeResult:
    """Train two linear probes (:func:`fit_linear_probe`) on ``features`` (N, C): one for
    ``labels`` (N,), one for ``control_labels`` (N,), and score both on the same held-out items:
    ``test`` (N,) booleans, or a random ``test_fraction`` of the items (of the ``groups``, when
    given) drawn with ``seed``. With ``groups`` (N,) (e.g. each token's sequence), a group lies
    wholly in training or in test, and the intervals are clustered by group (see
    :class:`ProbeResult`). Features are standardised with the training items' mean and spread.

    A high task accuracy says the information is linearly readable; only a high *selectivity*
    says the probe did not just memorise (Hewitt and Liang, 2019)."""
    if features.ndim != 2 or labels.shape != (features.shape[0],) or control_labels.shape != labels.shape:
        raise ValueError(
            f"features (N, C), labels (N,) and control_labels (N,) must agree, got {tuple(features.shape)}, "
            f"{tuple(labels.shape)} and {tuple(control_labels.shape)}"
        )
    N = features.shape[0]
    if groups is not None:
        if groups.shape != (N,):
            raise ValueError(f"groups must be (N,) = ({N},), got {tuple(groups.shape)}")
        groups = groups.long().cpu()
    if test is None:
        if not 0 < test_fraction < 1:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        units = torch.arange(N) if groups is None else groups.unique()
        order = torch.randperm(len(units), generator=torch.Generator().manual_seed(seed))
        chosen = units[order[: max(1, math.floor(test_fraction * len(units)))]]
        test = torch.isin(torch.arange(N) if groups is None else groups, chosen)
    test = test.cpu()
    if test.shape != (N,) or test.dtype != torch.bool or test.all() or not test.any():
        raise ValueError("test must be an (N,) boolean mask with both training and test items")
    if groups is not None:
        straddling = set(groups[test].tolist()) & set(groups[~test].tolist())
        if straddling:
            raise ValueError(f"groups {sorted(straddling)[:5]} have items in both training and test")
    x = features.float()
    train, test = (~test).to(x.device), test.to(x.device)
    mean, spread = x[train].mean(dim=0), x[train].std(dim=0).clamp(min=1e-6)
    x = (x - mean) / spread  # (N, C)
    correct, truth = [], []
    for y in (labels, control_labels):
        y = y.long().to(x.device)
        linear = fit_linear_probe(x[train], y[train], int(y.max()) + 1, l2)
        correct.append((linear(x[test]).argmax(dim=-1) == y[test]).long().tolist())
        truth.append(y[test].tolist())
    test_groups = None if groups is None else groups[test.cpu()].tolist()
    return ProbeResult(correct[0], correct[1], test_groups, truth[0], truth[1])
