"""Fine-tuning on a list of examples (chapters 10 and 11): the pretraining recipe, per example.

Pretraining walks through windows of one long text (:class:`training.Trainer`); fine-tuning
walks through labelled examples: texts and classes (:mod:`classification`), instructions and
answers (:mod:`instruct`). Both end every step the same way (:func:`training.apply_update`:
clip, AdamW step with decay on matrices only, warmup then cosine) and record a
:class:`training.History`. A task brings only its loss on a batch of example indices and what
to measure at each evaluation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from .runtime import show_progress
from .training import TrainConfig, apply_update, lr_at, make_optimizer


@dataclass
class FineTuneConfig:
    """A fine-tuning run over labelled examples (texts and labels, instructions and answers)."""

    epochs: float = 3.0  # passes over the training examples (a fraction is allowed)
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.1
    warmup_steps: int = 10
    grad_clip: float | None = 1.0
    eval_every: int = 50  # steps between evaluations
    seed: int = 0  # the order of the examples

    def __post_init__(self) -> None:
        if not self.epochs > 0:
            raise ValueError(f"epochs must be positive, got {self.epochs}")
        for name in ("batch_size", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")


def fine_tune(
    model: nn.Module,
    n_examples: int,
    batch_loss: Callable[[Sequence[int]], torch.Tensor],
    config: FineTuneConfig,
    evaluate: Callable[[int], bool | None],
    progress: bool | None = None,
) -> float:
    """Train the trainable parameters of ``model``: ``batch_loss(indices)`` gives the loss of a
    batch of example indices. The examples are reshuffled every epoch by a generator seeded with
    ``config.seed``; the learning rate warms up, then decays along a cosine to a tenth of its
    peak. ``evaluate(step)`` runs every ``eval_every`` steps and after the last; when it returns
    True, training stops there (early stopping on a criterion measured on validation; the schedule
    stays the one of the full run). Returns the seconds spent training (evaluations excluded); the
    model is left in eval mode.
    """
    if n_examples < 1:
        raise ValueError("fine_tune needs at least one training example")
    per_epoch = math.ceil(n_examples / config.batch_size)
    steps = max(1, round(config.epochs * per_epoch))
    schedule = TrainConfig(
        steps=steps, batch_size=config.batch_size, lr=config.lr, min_lr=config.lr / 10,
        warmup_steps=min(config.warmup_steps, steps), weight_decay=config.weight_decay, grad_clip=config.grad_clip,
        eval_every=config.eval_every,
    )  # fmt: skip
    optimizer = make_optimizer(model, schedule)
    generator = torch.Generator().manual_seed(config.seed)
    order: list[int] = []
    progress = show_progress() if progress is None else progress
    seconds, started = 0.0, time.perf_counter()
    trainable = [p for p in model.parameters() if p.requires_grad]
    model.train()
    for step in tqdm(range(steps), desc="fine-tuning", disable=not progress):
        if len(order) < config.batch_size:
            order += torch.randperm(n_examples, generator=generator).tolist()
        chosen, order = order[: config.batch_size], order[config.batch_size :]
        batch_loss(chosen).backward()
        apply_update(optimizer, trainable, lr_at(step, schedule), config.grad_clip)
        if (step + 1) % config.eval_every == 0 or step + 1 == steps:
            seconds += time.perf_counter() - started
            if evaluate(step + 1):
                break
            model.train()
            started = time.perf_counter()
    model.eval()
    return seconds
