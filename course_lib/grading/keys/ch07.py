"""The instructors' key to notebook 07, The transformer block and the GPT model.

Each exercise's solution, hidden cases and typical mistakes, in the order of its visible cases in
:mod:`course_lib.exercises.ch07`; the registers they fill are :mod:`course_lib.grading.keys.core`.
"""

from __future__ import annotations

import math

import torch

from course_lib.exercises import Case
from course_lib.exercises.core import _seeded

from .core import MISTAKES, hidden, solution

# -- llama-parameters ------------------------------------------------------------------------------


@solution("llama-parameters")
def llama_parameters(vocab_size: int, d_model: int, n_layers: int, hidden: int) -> int:
    C = d_model
    per_layer = 4 * C * C + 3 * C * hidden + 2 * C  # q, k, v, o; SwiGLU's gate, up, down; two RMSNorms
    return 2 * vocab_size * C + n_layers * per_layer + C  # embedding and untied head, layers, final norm


@hidden("llama-parameters")
def _llama(seed: int) -> list[Case]:
    return [
        Case((1, 1, 1, 1), "all ones"),
        Case((50257, 768, 12, 2048), "GPT-2 small's sizes, LLaMA's layers"),
        Case((32000, 5120, 40, 13824), "LLaMA-13B"),
        Case((49152, 576, 30, 1536), "SmolLM2-135M's sizes, its head untied"),
        Case((10, 16, 0, 32), "no layers"),
    ]


MISTAKES["llama-parameters"] = [
    lambda V, C, L, h: llama_parameters(V, C, L, h) - V * C,  # a tied head
    lambda V, C, L, h: llama_parameters(V, C, L, h) + L * (4 * C + 3 * h + C) + L * 2 * C,  # biases and shifts
    lambda V, C, L, h: llama_parameters(V, C, L, h) - 3 * C * h * L + 8 * C * C * L,  # GPT-2's 4C MLP
]


# -- rms-norm --------------------------------------------------------------------------------------


@solution("rms-norm")
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # half-precision squares overflow
    rms = torch.sqrt(work.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., 1): over each vector's features
    return (work / rms * (1 + weight.to(work.dtype))).to(x.dtype)  # Gemma's scale: 1 + weight


@hidden("rms-norm")
def _rms_norm(seed: int) -> list[Case]:
    g = _seeded(seed + 11)
    return [
        Case((torch.randn(1, 1, generator=g), torch.ones(1), 1e-6), "C = 1: the sign"),
        Case((torch.randn(4, 2, 3, 16, generator=g), torch.randn(16, generator=g), 1e-5), "(4, 2, 3, 16)"),
        Case((torch.zeros(2, 4), torch.ones(4), 1e-6), "zeros: eps avoids 0/0"),
        Case((torch.randn(3, 5, generator=g) * 1e3, torch.randn(5, generator=g), 1e-6), "large values"),
        Case((torch.randn(6, 7, generator=g).T, torch.ones(6), 0.1), "a non-contiguous (7, 6), eps 0.1"),
        Case((torch.randn(5, 3, 16, generator=g).transpose(0, 1), torch.randn(16, generator=g), 1e-6),
             "a non-contiguous (3, 5, 16)"),
        Case(
            (torch.randn(2, 8, generator=g, dtype=torch.float64), torch.ones(8, dtype=torch.float64), 1e-6), "float64"
        ),
        Case(((torch.randn(3, 2, 8, generator=g) * 500).half(), torch.randn(8, generator=g).half(), 1e-6),
             "float16 activations of a few hundred"),
        Case(((torch.randn(4, 16, generator=g) * 1e3).bfloat16(), torch.zeros(16, dtype=torch.bfloat16), 1e-5),
             "bfloat16"),
    ]  # fmt: skip


def rms_over_dim_1(x, weight, eps):  # the function the exercise shows
    return x / torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + eps) * (1 + weight)


def rms_norm_llama_order(x, weight, eps):  # normalised in float32, cast back, then the weight in float16
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (work / torch.sqrt(work.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * (1 + weight)


def rms_norm_with(x, weight, eps, reduce=torch.mean, centred=False, scale=lambda w: 1 + w, work=torch.float32):
    y = x.to(work) if x.dtype in (torch.float16, torch.bfloat16) else x
    if centred:  # a LayerNorm
        y = y - y.mean(dim=-1, keepdim=True)
    return (y / torch.sqrt(reduce(y.pow(2), dim=-1, keepdim=True) + eps) * scale(weight.to(y.dtype))).to(x.dtype)


MISTAKES["rms-norm"] = [
    rms_over_dim_1,
    lambda x, w, eps: rms_norm_with(x, w, eps, reduce=torch.sum),  # the sum, not the mean
    lambda x, w, eps: rms_norm_with(x, w, eps, centred=True),  # a LayerNorm
    lambda x, w, eps: torch.nn.functional.rms_norm(x, w.shape, 1 + w, eps),  # banned
    lambda x, w, eps: rms_norm_with(x, w, eps, scale=lambda w: w),  # LLaMA's scale, weight not 1 + weight
    lambda x, w, eps: rms_norm_with(x, w, eps, work=x.dtype),  # squares in float16: inf
    lambda x, w, eps: rms_norm_with(x.float(), w, eps),  # float32 whatever the dtype of x
    lambda x, w, eps: rms_norm(x.view(-1, x.shape[-1]), w, eps).view(x.shape),  # view: fails on a transposed batch
    lambda x, w, eps: rms_norm_with(x, w, eps, work=x.dtype if x.dtype == torch.bfloat16 else torch.float32),  # bf16
    rms_norm_llama_order,
]


# -- residual-std ----------------------------------------------------------------------------------


@solution("residual-std")
def residual_std(n_layers: int, branch_std: float) -> float:
    return math.sqrt(1 + 2 * n_layers * branch_std**2)  # independent variances add, two branches a block


@hidden("residual-std")
def _residual_std(seed: int) -> list[Case]:
    return [
        Case((48, 0.0), "branches that add nothing"),
        Case((12, 0.02), "GPT-2's init, unscaled"),
        Case((12, 0.02 / 24**0.5), "GPT-2's init scaled by 1 / sqrt(2 n_layers)"),
        Case((96, 1.0), "96 layers of std 1"),
        Case((3, 2.5), "wide branches"),
    ]


MISTAKES["residual-std"] = [
    lambda L, s: math.sqrt(1 + L * s**2),  # one branch a block
    lambda L, s: 1 + 2 * L * s,  # adds standard deviations
    lambda L, s: math.sqrt(2 * L) * s,  # forgets the embeddings
]


# -- dead-fraction ---------------------------------------------------------------------------------


@solution("dead-fraction")
def dead_fraction(h: torch.Tensor) -> float:
    never_on = (h.reshape(-1, h.shape[-1]) <= 0).all(dim=0)  # (hidden,): <= 0 at every position
    return never_on.float().mean().item()


@hidden("dead-fraction")
def _dead(seed: int) -> list[Case]:
    g = _seeded(seed + 12)
    relu = torch.relu(torch.randn(64, 32, generator=g) - 1.5)
    return [
        Case((torch.zeros(3, 5),), "all zeros: every unit dead"),
        Case((torch.ones(1, 4),), "one position, all alive"),
        Case((relu,), "ReLU outputs of shifted inputs"),
        Case((torch.randn(2, 16, 100, generator=g) - 2.5,), "(2, 16, 100), mostly negative"),
        Case((torch.randn(1, 1, 7, generator=g),), "one position: dead where <= 0"),
    ]


MISTAKES["dead-fraction"] = [
    lambda h: (h <= 0).float().mean().item(),  # the share of entries, not of units
    lambda h: (h.reshape(-1, h.shape[-1]) < 0).all(0).float().mean().item(),  # 0 counted as alive
    lambda h: (h.reshape(-1, h.shape[-1]) <= 0).all(1).float().mean().item(),  # positions, not units
    lambda h: (h.reshape(-1, h.shape[-1]) <= 0).all(0).float().mean().numpy(),  # a NumPy array, not a float
]
