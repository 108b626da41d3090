"""A small, honest training loop for next-token prediction.

Any model mapping (B, T) token ids to (B, T, V) logits trains with :func:`train_language_model`:
AdamW, cosine learning-rate decay, a tqdm progress bar, and an estimate of the training and
validation loss every ``eval_every`` steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from .data import SlidingWindowDataset, make_dataloader
from .runtime import show_progress


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the next-token predictions: (B, T, V) logits vs (B, T) targets."""
    logits = model(x)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())  # (B*T, V) vs (B*T,)


@torch.no_grad()
def estimate_loss(model: nn.Module, ids: torch.Tensor, context_length: int, batch_size: int = 32, max_batches: int | None = None) -> float:
    """Mean loss over non-overlapping windows of ``ids``.

    With ``max_batches`` only that many batches of windows are used, spread evenly over the
    whole of ``ids`` so the estimate does not depend on the start of the text alone.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    dataset = SlidingWindowDataset(ids, context_length, stride=context_length)
    n = len(dataset) if max_batches is None else min(len(dataset), max_batches * batch_size)
    chosen = torch.linspace(0, len(dataset) - 1, n).round().long().tolist()
    total, count = 0.0, 0
    for start in range(0, n, batch_size):
        x, y = (torch.stack(t).to(device) for t in zip(*(dataset[i] for i in chosen[start : start + batch_size])))
        total += lm_loss(model, x, y).item() * x.numel()
        count += x.numel()
    model.train(was_training)
    return total / count


@dataclass
class History:
    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)


def train_language_model(
    model: nn.Module,
    train_ids: torch.Tensor,
    val_ids: torch.Tensor,
    *,
    context_length: int,
    batch_size: int,
    steps: int,
    lr: float,
    weight_decay: float = 0.01,
    eval_every: int = 100,
    eval_batches: int = 20,
    seed: int = 0,
    progress: bool | None = None,
) -> History:
    """Train for ``steps`` batches, cycling through shuffled windows; return the loss history.

    ``progress=None`` shows a progress bar unless ``COURSE_PROGRESS=0`` (see runtime).
    """
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    device = next(model.parameters()).device
    loader = make_dataloader(train_ids, context_length, batch_size, seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    history = History()
    batches = iter(loader)
    model.train()
    bar = tqdm(range(1, steps + 1), desc="training", disable=not (show_progress() if progress is None else progress))
    for step in bar:
        try:
            x, y = next(batches)
        except StopIteration:  # a new epoch, in a new order
            batches = iter(loader)
            x, y = next(batches)
        loss = lm_loss(model, x.to(device), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % eval_every == 0 or step == steps:
            history.steps.append(step)
            history.train_loss.append(estimate_loss(model, train_ids, context_length, batch_size, eval_batches))
            history.val_loss.append(estimate_loss(model, val_ids, context_length, batch_size, eval_batches))
            bar.set_postfix(train=f"{history.train_loss[-1]:.3f}", val=f"{history.val_loss[-1]:.3f}")
    model.eval()
    return history
