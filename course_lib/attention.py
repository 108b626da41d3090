"""Attention, written to be read: softmax, scaled dot-product attention, masks, heads.

Shapes: ``B`` batch, ``T`` tokens, ``C`` model width (``d_model``), ``H`` number of heads,
``D`` width of one head (``C // H``).

Two multi-head modules compute the same function:

- :class:`MultiHeadAttentionWrapper`: a list of :class:`AttentionHead` run one after the other
  and concatenated, the way the idea is first explained;
- :class:`MultiHeadAttention`: one fused ``(C, 3C)`` projection for queries, keys and values,
  reshaped to ``(B, H, T, D)`` so that all heads run as one batched matrix product. With
  ``fast=True`` it calls ``torch.nn.functional.scaled_dot_product_attention`` (a fused kernel
  that never stores the ``T x T`` weights); the tests check all paths agree.

Generation reuses past keys and values through a :class:`KVCache`: the new token's query
attends to the cached keys, so each step costs O(T) instead of recomputing all T positions.
:class:`StaticKVCache` is the fast path beside it: buffers of a fixed size allocated once for a
left-padded batch of prompts of different lengths, written at a slot held in a tensor, so that
every decoding step has the same shapes and can be compiled (or captured in a CUDA graph).

Masks follow PyTorch's convention: a boolean mask is ``True`` where attention is **allowed**;
a float mask is **added** to the scores (``-inf`` forbids).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .positional import RotaryEmbedding, alibi_bias, alibi_slopes


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x) / sum(exp(x)), computed after subtracting the maximum so nothing overflows.

    A row that is entirely ``-inf`` (nothing allowed) gives zeros instead of NaN.
    """
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # all -inf row: avoid inf - inf
    e = (x - m).exp()
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(T, T) boolean mask, ``True`` on and below the diagonal: token t sees tokens 0..t."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def _apply_mask(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    try:
        torch.broadcast_shapes(mask.shape, scores.shape)
    except RuntimeError:
        raise ValueError(
            f"attention mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores.shape)} (..., queries, keys)"
        ) from None
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))  # forbidden: exp(-inf) = 0 after softmax
    return scores + mask.to(scores.dtype)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d) + mask) v, the heart of the transformer.

    q: (..., Tq, d), k: (..., Tk, d), v: (..., Tk, dv) -> (..., Tq, dv).
    Dropout (if ``dropout_p > 0``) zeroes attention weights, as in the original transformer.
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"queries and keys must have the same width, got {q.shape[-1]} and {k.shape[-1]}")
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)  # (..., Tq, Tk); scaling q is cheaper
    if mask is not None:
        scores = _apply_mask(scores, mask)
    weights = softmax(scores, dim=-1)  # (..., Tq, Tk), rows sum to 1
    if dropout_p > 0:
        weights = F.dropout(weights, p=dropout_p)
    out = weights @ v  # (..., Tq, dv)
    return (out, weights) if return_weights else out


def _check_length(T: int, context_length: int) -> None:
    if T > context_length:
        raise ValueError(
            f"sequence of {T} tokens is longer than the context length {context_length}; "
            "crop the input (x[:, -context_length:]) or build the module with a longer context"
        )


class AttentionHead(nn.Module):
    """One head of self-attention: (B, T, C) -> (B, T, D)."""

    def __init__(
        self,
        d_model: int,
        head_dim: int,
        context_length: int,
        causal: bool = True,
        dropout: float = 0.0,
        bias: bool = False,
    ):
        super().__init__()
        self.query = nn.Linear(d_model, head_dim, bias=bias)
        self.key = nn.Linear(d_model, head_dim, bias=bias)
        self.value = nn.Linear(d_model, head_dim, bias=bias)
        self.context_length, self.causal, self.dropout = context_length, causal, dropout
        self.register_buffer("mask", causal_mask(context_length), persistent=False)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        B, T, C = x.shape
        _check_length(T, self.context_length)
        q, k, v = self.query(x), self.key(x), self.value(x)  # (B, T, D) each
        mask = self.mask[:T, :T] if self.causal else None
        return scaled_dot_product_attention(q, k, v, mask, self.dropout if self.training else 0.0, return_weights)


class MultiHeadAttentionWrapper(nn.Module):
    """Several heads side by side, outputs concatenated then projected: (B, T, C) -> (B, T, C)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        context_length: int,
        causal: bool = True,
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        head_dim = _head_dim(d_model, n_heads)
        self.heads = nn.ModuleList(
            AttentionHead(d_model, head_dim, context_length, causal, dropout, bias) for _ in range(n_heads)
        )
        self.proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))  # (B, T, H*D) -> (B, T, C)


def _head_dim(d_model: int, n_heads: int) -> int:
    if n_heads < 1 or d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}; choose n_heads dividing d_model")
    return d_model // n_heads


class LayerKV:
    """One layer's cached keys and values, (B, H, T, D) each, in buffers allocated once."""

    def __init__(self, max_length: int):
        self.max_length = max_length
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new (B, H, T_new, D) keys and values; return all of them so far."""
        B, H, T, D = k.shape
        if self.length + T > self.max_length:
            raise ValueError(
                f"the KV cache holds at most {self.max_length} positions; {self.length} are cached and "
                f"{T} more were given. Reset the cache and feed the last {self.max_length} tokens again"
            )
        if self.keys is None or self.keys.shape[0] != B:
            self.keys = k.new_empty(B, H, self.max_length, D)
            self.values = v.new_empty(B, H, self.max_length, D)
        self.keys[:, :, self.length : self.length + T] = k
        self.values[:, :, self.length : self.length + T] = v
        self.length += T
        return self.keys[:, :, : self.length], self.values[:, :, : self.length]  # (B, H, T_total, D)


class KVCache:
    """The keys and values of every layer for the tokens seen so far.

    Pass it to ``GPT.forward(idx, cache=...)``: the model then treats ``idx`` as the tokens
    that follow the cached ones (positions ``cache.length`` onwards) and appends their keys
    and values.
    """

    def __init__(self, n_layers: int, max_length: int):
        self.max_length = max_length
        self.layers = [LayerKV(max_length) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length

    def reset(self) -> None:
        for layer in self.layers:
            layer.length = 0

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on: a prompt shared by many continuations is run
        once, and each continuation starts again from it."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        for layer in self.layers:
            layer.length = length


class StaticStep:
    """Where the T new tokens of a left-padded batch go, computed once per forward pass and
    shared by every layer.

    - ``slots`` (T,): the cache slots they are written to (the same for every row: rows are
      left-padded so that they all end at the same slot);
    - ``positions`` (B, T): their positions in their own row, ``slot - padding`` (clamped to
      ``0..max_position - 1``: a padding slot or a row already past the context gets a valid
      position whose result is never read);
    - ``allowed`` (B, 1, T, L): True where a query may attend to a cache slot: its own row's
      real tokens up to itself. A padding query sees only itself, so that no softmax row is
      empty (an empty row would give NaN).
    """

    def __init__(self, slots: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor):
        self.slots, self.positions, self.allowed = slots, positions, allowed


class StaticLayerKV:
    """One layer's slice of a :class:`StaticKVCache`: (B, Hkv, L, D) keys and values."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values

    def write(self, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new (B, Hkv, T, D) keys and values at ``slots`` (T,); return the whole
        buffers (B, Hkv, L, D), whose unwritten slots the mask hides."""
        self.keys.index_copy_(2, slots, k.to(self.keys.dtype))  # in place: no new tensor, same address
        self.values.index_copy_(2, slots, v.to(self.values.dtype))
        return self.keys, self.values


class StaticKVCache:
    """Preallocated keys and values for a batch of B left-padded rows: the fast path.

    ``pad`` (B,) is each row's left padding: row b's token at position p sits in slot
    ``pad[b] + p``. Every forward pass writes its T tokens at slots ``slot..slot + T - 1`` and
    moves ``slot`` on. ``slot`` is a tensor, not a Python number, so a compiled decoding step
    sees the same inputs at every step and is not recompiled; the buffers never move, so a
    CUDA graph can replay reading and writing them.
    """

    def __init__(
        self,
        n_layers: int,
        pad: torch.Tensor,
        n_kv_heads: int,
        head_dim: int,
        max_length: int,
        max_position: int,
        dtype: torch.dtype = torch.float32,
    ):
        if pad.ndim != 1 or pad.dtype != torch.long:
            raise ValueError(f"pad must be a (batch,) tensor of whole numbers, got {tuple(pad.shape)} {pad.dtype}")
        B, device = pad.shape[0], pad.device
        if B < 1 or max_length < 1:
            raise ValueError(f"a static cache needs at least one row and one slot, got {B} rows, {max_length} slots")
        self.max_length, self.max_position, self.pad = max_length, max_position, pad
        shape = (n_layers, B, n_kv_heads, max_length, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)  # (n_layers, B, Hkv, L, D): one allocation
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.slot = torch.zeros((), dtype=torch.long, device=device)  # the next slot to write
        self.layers = [StaticLayerKV(self.keys[i], self.values[i]) for i in range(n_layers)]
        self._slots = torch.arange(max_length, device=device)  # (L,)
        views = [t for layer in self.layers for t in (layer.keys, layer.values)]
        for tensor in (self.keys, self.values, self.slot, self.pad, self._slots, *views):
            # for CUDA graphs (torch.compile's mode="reduce-overhead"): these addresses stay put while
            # the graph replays; a new cache makes it record again, not recompile. Each layer writes
            # through its own view, and a view does not inherit its base's mark: without it, inductor
            # skips the CUDA graph ("mutated inputs")
            torch._dynamo.mark_static_address(tensor)

    @property
    def batch_size(self) -> int:
        return self.pad.shape[0]

    def step(self, T: int) -> StaticStep:
        """The slots, positions and mask of the next T tokens; then the slot moves on by T."""
        slots = self.slot + self._slots[:T]  # (T,)
        positions = (slots[None, :] - self.pad[:, None]).clamp(0, self.max_position - 1)  # (B, T)
        keys = self._slots[None, None, :]  # (1, 1, L)
        queries = slots[None, :, None]  # (1, T, 1)
        own_row = keys >= self.pad[:, None, None]  # (B, 1, L): not a padding slot
        allowed = (keys <= queries) & (own_row | (keys == queries))  # (B, T, L)
        self.slot += T  # in place, so a compiled step sees the same tensor next time
        return StaticStep(slots, positions, allowed[:, None])  # allowed: (B, 1, T, L), broadcast over heads


class MultiHeadAttention(nn.Module):
    """All heads at once: one fused QKV projection, heads as a batch dimension.

    Parameter names follow GPT-2 (``c_attn``, ``c_proj``) so its weights map directly.
    ``fast=True`` uses PyTorch's fused ``scaled_dot_product_attention``. Position-aware
    variants: ``rotary=True`` rotates queries and keys (RoPE), ``alibi=True`` adds ALiBi's
    distance penalty to the scores. ``extrapolate=True`` accepts sequences longer than
    ``context_length`` (sensible only with a positional scheme that extrapolates).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        context_length: int,
        causal: bool = True,
        dropout: float = 0.0,
        bias: bool = True,
        fast: bool = False,
        rotary: bool = False,
        rope_base: float = 10000.0,
        alibi: bool = False,
        extrapolate: bool = False,
        n_kv_heads: int | None = None,
    ):
        super().__init__()
        self.head_dim = _head_dim(d_model, n_heads)
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if self.n_kv_heads < 1 or n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}: in grouped-query attention "
                "each key/value head serves the same number of query heads"
            )
        self.d_model, self.n_heads, self.context_length = d_model, n_heads, context_length
        self.causal, self.dropout, self.fast = causal, dropout, fast
        self.alibi, self.extrapolate = alibi, extrapolate
        self.kv_dim = self.n_kv_heads * self.head_dim  # = d_model unless key/value heads are shared
        self.c_attn = nn.Linear(d_model, d_model + 2 * self.kv_dim, bias=bias)  # queries, keys, values in one matmul
        self.c_proj = nn.Linear(d_model, d_model, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)
        self.rotary = RotaryEmbedding(self.head_dim, context_length, rope_base) if rotary else None

    def _mask(self, T: int, dtype: torch.dtype, offset: int = 0) -> torch.Tensor | None:
        """The mask for T queries at positions offset.. over offset + T keys: boolean (causal
        only) or additive (with ALiBi)."""
        causal = None
        device = self.c_proj.weight.device
        if self.causal:  # built when needed: a stored (context, context) mask per layer would cost
            n = offset + T  # 30 x 64 MB for SmolLM2's 8,192 positions
            causal = causal_mask(n, device)[offset:n, :n]  # (T, offset + T): query i sees keys 0..offset + i
        if not self.alibi:
            return causal
        bias = alibi_bias(self.n_heads, T, offset).to(dtype=dtype, device=device)  # (H, T, offset + T)
        return bias if causal is None else bias.masked_fill(~causal, float("-inf"))

    def forward(
        self,
        x: torch.Tensor,
        return_weights: bool = False,
        cache: LayerKV | StaticLayerKV | None = None,
        step: StaticStep | None = None,
    ):
        """(B, T, C) -> (B, T, C); with ``return_weights`` also the (B, H, T, T) weights.

        Returning weights needs the readable path, so it is used even when ``fast=True``.
        With a ``cache``, ``x`` holds the tokens after the cached ones: their keys and values
        are appended and the queries attend to everything cached so far. A
        :class:`StaticLayerKV` comes with its ``step`` (see :class:`StaticKVCache`).
        """
        if isinstance(cache, StaticLayerKV):
            if step is None:
                raise ValueError("a static cache needs its StaticStep: call it through GPT.forward(idx, cache=...)")
            return self._forward_static(x, cache, step)
        B, T, C = x.shape
        offset = cache.length if cache is not None else 0
        if not self.extrapolate:
            _check_length(offset + T, self.context_length)
        q, k, v = self.c_attn(x).split([self.d_model, self.kv_dim, self.kv_dim], dim=-1)  # (B, T, C), (B, T, Ckv) x2
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        if self.rotary is not None:
            q, k = self.rotary(q, k, offset)  # position enters through the rotation of q and k
        if cache is not None:
            k, v = cache.append(k, v)  # (B, Hkv, offset + T, D): the cache holds only the shared heads
        if self.n_kv_heads != self.n_heads:  # grouped-query attention: query head h reads key/value head h // group
            group = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, T_total, D)
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if self.fast and not return_weights:
            if self.alibi or (offset and T > 1):
                out = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=self._mask(T, q.dtype, offset), dropout_p=dropout_p
                )
            else:  # no cache, or one new token that may see every cached one
                causal = self.causal and offset == 0
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal)  # (B, H, T, D)
        else:
            out, weights = scaled_dot_product_attention(
                q, k, v, self._mask(T, q.dtype, offset), dropout_p, return_weights=True
            )
        out = out.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, H, D) -> (B, T, C)
        out = self.resid_dropout(self.c_proj(out))
        return (out, weights) if return_weights else out

    def _forward_static(self, x: torch.Tensor, cache: StaticLayerKV, step: StaticStep) -> torch.Tensor:
        """The fast path: positions per row, keys and values written into fixed buffers, and a
        mask over all L slots (the same shapes at every step)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split([self.d_model, self.kv_dim, self.kv_dim], dim=-1)  # (B, T, C), (B, T, Ckv) x2
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        if self.rotary is not None:
            q, k = self.rotary.rotate_at(q, step.positions), self.rotary.rotate_at(k, step.positions)
        k, v = cache.write(k, v, step.slots)  # (B, Hkv, L, D): every slot, written or not
        if self.n_kv_heads != self.n_heads:
            group = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, L, D)
        mask = step.allowed  # (B, 1, T, L) boolean
        if self.alibi:  # distances in slots equal distances in positions: a row's tokens are contiguous
            keys = torch.arange(k.shape[2], device=x.device)  # (L,)
            distance = (step.slots[:, None] - keys[None, :]).clamp(min=0)  # (T, L); future slots are masked
            bias = -alibi_slopes(self.n_heads, device=x.device)[:, None, None] * distance.float()  # (H, T, L)
            mask = bias.to(q.dtype).masked_fill(~mask, float("-inf"))  # (B, H, T, L) additive
        if self.fast:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, D)
        else:
            out = scaled_dot_product_attention(q, k, v, mask)
        out = out.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, H, D) -> (B, T, C)
        return self.resid_dropout(self.c_proj(out))

    @classmethod
    def from_wrapper(cls, wrapper: MultiHeadAttentionWrapper, fast: bool = False) -> MultiHeadAttention:
        """The fused module computing exactly what ``wrapper`` computes (weights copied)."""
        heads = list(wrapper.heads)
        first = heads[0]
        d_model = first.query.in_features
        bias = first.query.bias is not None
        fused = cls(d_model, len(heads), first.context_length, first.causal, first.dropout, bias, fast)
        with torch.no_grad():
            for part, name in enumerate(("query", "key", "value")):
                rows = slice(part * d_model, (part + 1) * d_model)
                fused.c_attn.weight[rows] = torch.cat([getattr(h, name).weight for h in heads])
                if bias:
                    fused.c_attn.bias[rows] = torch.cat([getattr(h, name).bias for h in heads])
            fused.c_proj.load_state_dict(wrapper.proj.state_dict())
        return fused
