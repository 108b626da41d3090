"""LoRA (Hu et al., 2021): fine-tune a large layer by training a small low-rank change beside it.

A frozen linear layer ``y = x W^T + b`` becomes

    y = x W^T + b + (alpha / r) * x A^T B^T        A: (r, in), B: (out, r)

with ``r`` much smaller than ``in`` and ``out``. Only A and B train: ``r * (in + out)`` numbers
instead of ``in * out``. B starts at zero, so the wrapped model computes exactly what the
pretrained one did; A starts random (Kaiming-uniform, as in the paper's reference code and
in ``peft``) so that B's gradient is not zero. ``alpha / r`` keeps the size of the update
roughly independent of the rank chosen. After training, :meth:`LoRALinear.merge` folds
``(alpha / r) * B A`` into W: one plain linear layer again, no extra cost at inference.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn as nn


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update of rank ``r``, scaled by ``alpha / r``."""

    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16.0):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"LoRA wraps an nn.Linear, got {type(base).__name__}")
        if r < 1:
            raise ValueError(f"the LoRA rank r must be a positive integer, got {r}")
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.r, self.alpha = r, alpha
        self.scaling = alpha / r
        device, dtype = base.weight.device, base.weight.dtype
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, device=device, dtype=dtype))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, device=device, dtype=dtype))  # (out, r)
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.merged = False

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    @property
    def weight(self) -> torch.Tensor:
        """The frozen weight (code that reads ``layer.weight`` keeps working)."""
        return self.base.weight

    def delta_weight(self) -> torch.Tensor:
        """The change LoRA makes to the weight: (alpha / r) * B A, shape (out, in)."""
        return self.scaling * (self.lora_B @ self.lora_A)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)  # (..., out): the frozen layer
        if self.merged:
            return out
        return out + self.scaling * (x @ self.lora_A.T) @ self.lora_B.T  # (..., r) -> (..., out)

    @torch.no_grad()
    def merge(self) -> nn.Linear:
        """Fold the update into the base weight and return the plain ``nn.Linear``; the outputs
        are unchanged (up to rounding)."""
        if not self.merged:
            self.base.weight += self.delta_weight()
            self.merged = True
        return self.base

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha}, scaling={self.scaling:g}"


def apply_lora(model: nn.Module, targets: Iterable[str], r: int = 8, alpha: float = 16.0) -> list[str]:
    """Freeze every parameter of ``model`` and wrap each linear layer whose name ends with one
    of ``targets`` (e.g. ``"attn.c_attn"``, ``"mlp.c_fc"``) in a :class:`LoRALinear`.

    Returns the names wrapped. Parameters that should keep training (a new classification
    head, say) are unfrozen by the caller afterwards.
    """
    targets = list(targets)
    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear) and name.endswith(tuple(targets))]
    unmatched = [t for t in targets if not any(name.endswith(t) for name in names)]
    if unmatched:
        linear = sorted(
            {
                name.split(".")[-2] + "." + name.split(".")[-1]
                for name, m in model.named_modules()
                if isinstance(m, nn.Linear) and "." in name
            }
        )
        raise ValueError(f"no linear layer of this model is named like {unmatched}; linear layers end with {linear}")
    for p in model.parameters():
        p.requires_grad_(False)
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(getattr(parent, child), r=r, alpha=alpha))
    return names


def merge_lora(model: nn.Module) -> int:
    """Replace every :class:`LoRALinear` in ``model`` by its merged ``nn.Linear``; returns how many."""
    wrapped = [(name, m) for name, m in model.named_modules() if isinstance(m, LoRALinear)]
    for name, module in wrapped:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, module.merge())
    return len(wrapped)
