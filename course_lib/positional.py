"""Positional information for attention, which on its own is blind to order.

- :class:`LearnedPositionalEmbedding`: one trained vector per position, added to the token
  embeddings (GPT-2). Cannot go beyond the positions it was trained on.
- :func:`sinusoidal_encoding`: fixed sines and cosines of geometric frequencies, added to the
  token embeddings (the original transformer).
- :class:`RotaryEmbedding` (RoPE): rotates each pair of query/key dimensions by an angle
  proportional to the position, inside every head (LLaMA and most models since). No parameters.
- :func:`alibi_bias`: ALiBi adds ``-slope * distance`` to the attention scores of each head.

**RoPE pairing convention.** A rotation acts on pairs of dimensions. The RoPE paper pairs
neighbours ``(0, 1), (2, 3), ...`` ("interleaved"), and so does Meta's reference LLaMA code;
GPT-NeoX and Hugging Face's LLaMA pair dimension ``i`` with ``i + D/2`` ("halves"; Hugging
Face's conversion script permutes the rows of W_q and W_k of Meta's checkpoints to get there).
course_lib uses **halves**, so Hugging Face weights load as they are; :func:`rope_interleaved`
is the paper's version and :func:`interleaved_to_halves` the permutation that maps one
convention onto the other.

**Devices.** Every table here is built on the device it will meet (``device=`` for the
functions; the device of the module's own buffers for :class:`RotaryEmbedding`, whose table
grows when a longer sequence arrives), so a model on a GPU never mixes in a CPU tensor.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position 0..context_length-1: (T,) positions -> (T, C)."""

    def __init__(self, context_length: int, d_model: int):
        super().__init__()
        self.context_length = context_length
        self.weight = nn.Parameter(torch.randn(context_length, d_model) * 0.02)

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        if offset + T > self.context_length:
            raise ValueError(
                f"asked for positions {offset}..{offset + T - 1}, but learned position embeddings stop at "
                f"{self.context_length - 1}: positions never trained have no vector. Use at most "
                f"{self.context_length} tokens, or a positional scheme that extrapolates (sinusoidal, rope, alibi)"
            )
        return self.weight[offset : offset + T]  # (T, C)

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """(B, T) positions, one per token of each row (a padded batch) -> (B, T, C). The caller
        keeps them below ``context_length``: a check here would read the values back from the
        device at every step."""
        return self.weight[positions]  # (B, T, C)


def _check_even(d: int, what: str) -> None:
    if d % 2:
        raise ValueError(f"{what} needs an even dimension (it works on pairs), got {d}")


def sinusoidal_encoding(
    T: int,
    d_model: int,
    base: float = 10000.0,
    offset: int = 0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(pos / base^(2i/d)); shape (T, d).

    Computed in float32 on ``device`` (pass the device of the embeddings it is added to), then
    cast to ``dtype``.
    """
    positions = torch.arange(offset, offset + T, dtype=torch.float32, device=device)  # (T,)
    return sinusoidal_at(positions, d_model, base).to(dtype)


def sinusoidal_at(positions: torch.Tensor, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The sinusoidal encoding of any positions: (...,) -> (..., d), in float32 on their device
    (a padded batch has its own positions in every row)."""
    _check_even(d_model, "the sinusoidal encoding")
    device = positions.device
    positions = positions.float()[..., None]  # (..., 1)
    exponents = torch.arange(0, d_model, 2, dtype=torch.float32, device=device) / d_model  # (d/2,)
    frequencies = base**-exponents  # (d/2,)
    angles = positions * frequencies  # (..., d/2)
    encoding = torch.empty(*angles.shape[:-1], d_model, device=device)  # (..., d)
    encoding[..., 0::2] = torch.sin(angles)
    encoding[..., 1::2] = torch.cos(angles)
    return encoding


def rope_frequencies(head_dim: int, base: float = 10000.0, device: torch.device | str | None = None) -> torch.Tensor:
    """theta_i = base^(-2(i-1)/d) for i = 1..d/2: fast rotations first, slow ones last."""
    _check_even(head_dim, "RoPE")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim  # (D/2,)
    return base**-exponents  # (D/2,)


def rope_interleaved(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """The paper's RoPE: rotate pairs (x_{2i}, x_{2i+1}) by positions * theta_i.

    [x'_{2i}  ]   [cos  -sin] [x_{2i}  ]
    [x'_{2i+1}] = [sin   cos] [x_{2i+1}]      x: (..., T, D), positions: (T,)
    """
    frequencies = rope_frequencies(x.shape[-1], base, device=x.device)  # (D/2,)
    angles = positions.to(x.device).float()[:, None] * frequencies  # (T, D/2)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, D/2) each
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def interleaved_to_halves(head_dim: int) -> torch.Tensor:
    """Index permutation: ``x[..., perm]`` turns interleaved pairs into halves pairs.

    Dimensions (0, 1, 2, 3, ...) become (0, 2, 4, ..., 1, 3, 5, ...): pair i = (i, i + D/2).
    """
    _check_even(head_dim, "RoPE")
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class RotaryEmbedding(nn.Module):
    """RoPE in the halves convention, with cos/sin cached for ``max_positions`` positions.

    ``forward(q, k, offset)`` rotates queries and keys of shape (B, H, T, D) as if they sat at
    positions offset..offset+T-1, so a KV cache can rotate one new token at a time. The cache
    grows by itself when a longer sequence arrives; the grown table is computed in float32 on
    the device of the existing one (wherever ``.to()`` moved the module) and keeps its dtype.
    """

    def __init__(self, head_dim: int, max_positions: int = 2048, base: float = 10000.0):
        super().__init__()
        self.head_dim, self.base = head_dim, base
        self.register_buffer("inv_freq", rope_frequencies(head_dim, base), persistent=False)
        self._build(max_positions)

    def _build(self, n: int) -> None:
        old = getattr(self, "cos", None)
        device = self.inv_freq.device
        dtype = old.dtype if old is not None else torch.float32
        # recomputed in float32: inv_freq itself may have been cast to a low precision by .to()
        inv_freq = rope_frequencies(self.head_dim, self.base, device=device)  # (D/2,)
        positions = torch.arange(n, dtype=torch.float32, device=device)  # (n,)
        angles = positions[:, None] * inv_freq  # (n, D/2)
        angles = torch.cat([angles, angles], dim=-1)  # (n, D): pair i and i + D/2 share an angle
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)

    def rotate(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        T = x.shape[-2]
        if offset + T > self.cos.shape[0]:
            self._build(2 * (offset + T))
        cos = self.cos[offset : offset + T].to(x.dtype)  # (T, D)
        sin = self.sin[offset : offset + T].to(x.dtype)
        return x * cos + rotate_half(x) * sin

    def rotate_at(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate (B, H, T, D) by each row's own (B, T) positions (a left-padded batch). The
        table must already reach them (:meth:`reach`): growing it here would need their values."""
        cos = self.cos[positions][:, None].to(x.dtype)  # (B, 1, T, D): the same angle for every head
        sin = self.sin[positions][:, None].to(x.dtype)
        return x * cos + rotate_half(x) * sin

    def reach(self, n: int) -> None:
        """Make the table cover positions 0..n-1 (before a compiled step that cannot grow it)."""
        if n > self.cos.shape[0]:
            self._build(n)

    def forward(self, q: torch.Tensor, k: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rotate(q, offset), self.rotate(k, offset)


def alibi_slopes(n_heads: int, device: torch.device | str | None = None) -> torch.Tensor:
    """One slope per head: the geometric sequence 2^(-8/n), 2^(-16/n), ... of the ALiBi paper.

    For a head count that is not a power of two, the paper takes the slopes of the next lower
    power of two and fills in with every other slope of the next higher one.
    """

    def powers_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = powers_of_two(n_heads)
    else:
        lower = 2 ** math.floor(math.log2(n_heads))
        slopes = powers_of_two(lower) + powers_of_two(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(slopes, device=device)  # (H,)


def alibi_bias(
    n_heads: int,
    T: int,
    offset: int = 0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(H, T, T_total) additive bias: -slope_h * (query position - key position) for past keys.

    Future keys get 0 here; the causal mask removes them separately. Built on ``device`` (pass
    the device of the attention scores it is added to), in float32, then cast to ``dtype``.
    """
    queries = torch.arange(offset, offset + T, device=device)[:, None]  # (T, 1)
    keys = torch.arange(offset + T, device=device)[None, :]  # (1, T_total)
    distance = (queries - keys).clamp(min=0).float()  # (T, T_total)
    bias = -alibi_slopes(n_heads, device=device)[:, None, None] * distance  # (H, T, T_total)
    return bias.to(dtype)
