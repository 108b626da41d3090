"""The layers of a transformer block, written out: normalisations, activations, feed-forward.

Every one is checked against PyTorch's built-in in the tests (``nn.LayerNorm``,
``torch.nn.RMSNorm``, ``F.gelu`` in both forms).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    """Normalise each vector over its features to mean 0 and variance 1, then scale and shift.

    y = (x - mean) / sqrt(var + eps) * gamma + beta, with the biased variance (divide by C),
    as ``nn.LayerNorm`` does. ``bias=False`` drops beta. ``fast=True`` computes the same with
    PyTorch's fused kernel (one pass over the data instead of five).
    """

    def __init__(self, d_model: int, eps: float = 1e-5, bias: bool = True, fast: bool = False):
        super().__init__()
        self.eps, self.fast = eps, fast
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None  # beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fast:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = x.var(dim=-1, keepdim=True, unbiased=False)  # (..., 1)
        y = (x - mean) / torch.sqrt(var + self.eps) * self.weight
        return y + self.bias if self.bias is not None else y


class RMSNorm(nn.Module):
    """Scale each vector by the inverse of its root mean square; no centring, no bias.

    y = x / sqrt(mean(x^2) + eps) * gamma. Cheaper than LayerNorm and as good in practice.
    ``fast=True`` uses PyTorch's fused kernel.
    """

    def __init__(self, d_model: int, eps: float = 1e-6, fast: bool = False):
        super().__init__()
        self.eps, self.fast = eps, fast
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fast:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU: x * Phi(x), Phi the standard normal CDF. ``approximate="tanh"`` is GPT-2's form."""
    if approximate == "none":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


def relu(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(min=0)


def silu(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x), the gate of SwiGLU (also called swish)."""
    return x * torch.sigmoid(x)


ACTIVATIONS = {
    "gelu": gelu,
    "gelu_tanh": lambda x: gelu(x, approximate="tanh"),
    "relu": relu,
    "silu": silu,
}
FAST_ACTIVATIONS = {  # PyTorch's fused versions of the same functions
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}


def _activation(name: str, fast: bool = False):
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}")
    return (FAST_ACTIVATIONS if fast else ACTIVATIONS)[name]


class FeedForward(nn.Module):
    """Expand, activate, project back: (B, T, C) -> (B, T, hidden) -> (B, T, C). GPT-2 names.

    ``fast=True`` uses PyTorch's fused activation."""

    def __init__(
        self,
        d_model: int,
        hidden: int | None = None,
        activation: str = "gelu_tanh",
        bias: bool = True,
        dropout: float = 0.0,
        fast: bool = False,
    ):
        super().__init__()
        hidden = 4 * d_model if hidden is None else hidden
        self.act = _activation(activation, fast)
        self.c_fc = nn.Linear(d_model, hidden, bias=bias)
        self.c_proj = nn.Linear(hidden, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class SwiGLU(nn.Module):
    """A gated feed-forward: down(silu(gate(x)) * up(x)). LLaMA's names and layout.

    Three matrices instead of two, so ``hidden`` is usually about 8/3 of ``d_model`` to keep
    the parameter count of a 4x FeedForward.
    """

    def __init__(
        self, d_model: int, hidden: int | None = None, bias: bool = False, dropout: float = 0.0, fast: bool = False
    ):
        super().__init__()
        hidden = 4 * d_model * 2 // 3 if hidden is None else hidden
        self.act = _activation("silu", fast)
        self.gate_proj = nn.Linear(d_model, hidden, bias=bias)
        self.up_proj = nn.Linear(d_model, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x)))
