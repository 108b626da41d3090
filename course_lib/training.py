"""Training a language model: the loop the seeds teach, grown up.

Any model mapping (B, T) token ids to (B, T, V) logits trains with :class:`Trainer`:

- batches of windows in a shuffled order that is a function of (seed, step) alone, so a run
  can stop and resume at any step and see the same batches;
- AdamW with weight decay on matrices only (not on biases, norms' gains), linear warmup then
  cosine decay (:func:`lr_at`), gradient clipping, gradient accumulation;
- an estimate of the training and validation loss every ``eval_every`` steps, samples of
  generated text every ``sample_every`` steps, a tqdm bar with the loss and tokens/s;
- checkpoints (safetensors, see :mod:`course_lib.checkpoints`) holding model, optimizer,
  step, history and RNG state, from which :meth:`Trainer.resume` continues exactly;
- with ``torch.distributed`` initialised (``torchrun``), DistributedDataParallel: every rank
  takes its share of each batch, gradients are averaged, all ranks keep identical weights.

:func:`train_language_model` is the one-call version the early chapters use.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from .checkpoints import CheckpointError, read_checkpoint, save_checkpoint
from .data import SlidingWindowDataset
from .runtime import evaluating, model_device, native_bf16, show_progress


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the next-token predictions: (B, T, V) logits vs (B, T) targets."""
    logits = model(x)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())  # (B*T, V) vs (B*T,), in float32


def perplexity(loss: float) -> float:
    """e^loss: the number of equally likely tokens the model is as unsure as."""
    return math.exp(loss)


def bits_per_token(loss: float) -> float:
    """The loss in bits (it is measured in nats): what an ideal coder would spend per token."""
    return loss / math.log(2)


@torch.no_grad()
def estimate_loss(
    model: nn.Module, ids: torch.Tensor, context_length: int, batch_size: int = 32, max_batches: int | None = None
) -> float:
    """Mean loss over non-overlapping windows of ``ids``.

    With ``max_batches`` only that many batches of windows are used, spread evenly over the
    whole of ``ids`` so the estimate does not depend on the start of the text alone.
    """
    device = model_device(model)
    dataset = SlidingWindowDataset(ids, context_length, stride=context_length)
    n = len(dataset) if max_batches is None else min(len(dataset), max_batches * batch_size)
    chosen = torch.linspace(0, len(dataset) - 1, n).round().long().tolist()
    total, count = 0.0, 0
    with evaluating(model):
        for start in range(0, n, batch_size):
            batch = zip(*(dataset[i] for i in chosen[start : start + batch_size]))
            x, y = (torch.stack(t).to(device) for t in batch)  # (B, T), (B, T)
            total += lm_loss(model, x, y).item() * x.numel()
            count += x.numel()
    return total / count


@torch.no_grad()
def window_losses(model: nn.Module, ids: torch.Tensor, context_length: int, batch_size: int = 32) -> torch.Tensor:
    """(windows,) the mean loss of each non-overlapping window of ``ids``, one number per stretch
    of text: two models scored on the same text are then compared window by window
    (:func:`~course_lib.evaluation.paired_difference`), not by their means alone. All windows have
    the same length, so the mean of these is :func:`estimate_loss` over every window."""
    device = model_device(model)
    dataset = SlidingWindowDataset(ids, context_length, stride=context_length)
    losses = []
    with evaluating(model):
        for start in range(0, len(dataset), batch_size):
            batch = zip(*(dataset[i] for i in range(start, min(start + batch_size, len(dataset)))))
            x, y = (torch.stack(t).to(device) for t in batch)  # (B, T), (B, T)
            logits = model(x).float()  # (B, T, V)
            per_token = F.cross_entropy(logits.transpose(1, 2), y, reduction="none")  # (B, T)
            losses.append(per_token.mean(dim=1).cpu())
    return torch.cat(losses)


PRECISIONS = ("auto", "fp32", "bf16")
BAR_EVERY = 10  # steps between progress-bar updates


@dataclass
class TrainConfig:
    """Everything that decides what a training run computes (saved with each checkpoint)."""

    steps: int = 1000  # optimizer steps
    batch_size: int = 16  # windows per optimizer step (split over grad_accum and ranks)
    context_length: int = 128
    lr: float = 1e-3  # peak learning rate, reached after warmup
    min_lr: float = 0.0  # where the cosine ends
    warmup_steps: int = 0
    weight_decay: float = 0.1  # on matrices only
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float | None = 1.0  # max global gradient norm; None: no clipping
    grad_accum: int = 1  # micro-batches per optimizer step
    eval_every: int = 100
    eval_batches: int = 20
    sample_every: int = 0  # 0: no samples during training
    seed: int = 0  # the order of the batches
    precision: str = "auto"  # "fp32", "bf16" (mixed: bfloat16 matmuls, float32 weights), "auto"
    compile: bool = False  # torch.compile the model and its loss together (pays off on a GPU, see Trainer)

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "context_length", "grad_accum", "eval_every", "eval_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.warmup_steps < 0 or self.warmup_steps > self.steps:
            raise ValueError(
                f"warmup_steps={self.warmup_steps} must be between 0 and steps={self.steps}: "
                "the schedule warms up and then decays within the run"
            )
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size={self.batch_size} must be divisible by grad_accum={self.grad_accum}")
        if not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"min_lr={self.min_lr} must be between 0 and lr={self.lr}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")


GPU_BF16_MIN_WIDTH = 512
"""On a GPU, ``precision="auto"`` uses bfloat16 from this model width on. Below it a step is
bound by kernel launches, not arithmetic, and autocast only adds cast kernels: measured on an
H100, the shipped width-128 model trained about 30% slower in bfloat16 than in float32."""


def autocast_dtype(precision: str, device: torch.device, width: int | None = None) -> torch.dtype | None:
    """The dtype the forward pass runs in under ``precision`` (None: float32 throughout).

    ``auto`` picks bfloat16 where it is faster: on a CPU with native bfloat16 (see
    :func:`runtime.native_bf16`) at any width, on a GPU with native bfloat16 for models at
    least :data:`GPU_BF16_MIN_WIDTH` wide (``width``: the model's ``d_model``; unknown counts
    as small). The weights, the optimizer and the loss stay float32 either way: only the
    matrix products are rounded, which a network trained with noisy gradients does not notice.
    """
    if precision == "bf16":
        return torch.bfloat16
    if precision == "auto" and native_bf16(device):
        if device.type == "cpu" or (width or 0) >= GPU_BF16_MIN_WIDTH:
            return torch.bfloat16
    return None


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warmup, then cosine decay.

    Warmup climbs to ``lr`` over ``warmup_steps`` steps (small steps while Adam's moment
    estimates are still noisy); the cosine then glides from ``lr`` to ``min_lr``.
    """
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    decay_steps = config.steps - config.warmup_steps
    progress = (step - config.warmup_steps) / decay_steps if decay_steps else 1.0
    return config.min_lr + (config.lr - config.min_lr) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with two groups: matrices (embeddings, projections) decay, vectors do not.

    Decaying a norm's gain or a bias pulls it towards 0, which is not a simpler model, just a
    worse one; the matrices are where the capacity is.
    """
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()  # a tied weight once
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = next(iter(params)).device.type in ("cpu", "cuda")  # one kernel for all parameters
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), fused=fused)


class WindowBatches:
    """Batch ``i`` of a run: windows in a shuffled order that depends on (seed, epoch) only.

    Epoch ``e`` visits the windows in the order of the ``e``-th permutation drawn from a
    generator seeded with ``seed``; batch ``i`` is a slice of it. Any batch can be rebuilt
    from its number, which is what makes resuming exact.
    """

    def __init__(self, ids: torch.Tensor, context_length: int, batch_size: int, seed: int = 0):
        self.dataset = SlidingWindowDataset(ids, context_length, stride=context_length)
        self.batch_size, self.seed = batch_size, seed
        self.per_epoch = len(self.dataset) // batch_size
        if self.per_epoch == 0:
            raise ValueError(
                f"the training data has {len(ids)} tokens: {len(self.dataset)} windows of "
                f"{context_length + 1} tokens, fewer than one batch of {batch_size}; use a smaller "
                "batch_size or context_length, or more data"
            )
        self._epoch, self._order = -1, None

    def _permutation(self, epoch: int) -> torch.Tensor:
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed)
            for _ in range(epoch + 1):
                order = torch.randperm(len(self.dataset), generator=generator)
            self._epoch, self._order = epoch, order
        return self._order

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, k = divmod(i, self.per_epoch)
        chosen = self._permutation(epoch)[k * self.batch_size : (k + 1) * self.batch_size].tolist()
        x, y = zip(*(self.dataset[j] for j in chosen))
        return torch.stack(x), torch.stack(y)  # (B, T), (B, T)


@dataclass
class History:
    """What a training run recorded at each evaluation, for every loop of the course: the
    pretraining :class:`Trainer` (losses, learning rate, samples) and :mod:`finetuning`
    (losses, and accuracies where the task has them). A curve a run does not measure stays empty."""

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    samples: list[tuple[int, str]] = field(default_factory=list)
    tokens_seen: int = 0
    seconds: float = 0.0


def apply_update(
    optimizer: torch.optim.Optimizer, parameters: Iterable[nn.Parameter], lr: float, grad_clip: float | None
) -> None:
    """The end of every training step of the course, once the gradients are in: clip the global
    norm of the ``parameters``' gradients to ``grad_clip`` (None: no clipping), take one
    optimizer step at learning rate ``lr``, and clear the gradients for the next step."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    if grad_clip is not None:
        nn.utils.clip_grad_norm_(parameters, grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Trainer:
    """Owns a model's training run: optimizer, step counter, batches, history, checkpoints.

    ``sample(model) -> str`` (optional) is called every ``sample_every`` steps and its text
    kept in the history (and printed).
    """

    def __init__(
        self,
        model: nn.Module,
        train_ids: torch.Tensor,
        val_ids: torch.Tensor,
        config: TrainConfig,
        sample: Callable[[nn.Module], str] | None = None,
        progress: bool | None = None,
    ):
        self.model, self.config, self.sample = model, config, sample
        self.train_ids, self.val_ids = train_ids, val_ids
        self.rank, self.world_size = _world()
        per_rank = config.batch_size // config.grad_accum
        if per_rank % self.world_size:
            raise ValueError(
                f"a micro-batch of {per_rank} windows cannot be split evenly over {self.world_size} processes"
            )
        self.batches = WindowBatches(train_ids, config.context_length, per_rank, config.seed)
        SlidingWindowDataset(val_ids, config.context_length)  # fail early on a too-short validation split
        self.optimizer = make_optimizer(model, config)
        self.step = 0
        self.history = History()
        self.progress = show_progress() if progress is None else progress
        self.device = model_device(model)
        width = getattr(getattr(model, "config", None), "d_model", None)
        self.dtype = autocast_dtype(config.precision, self.device, width)  # None: float32
        self._ddp = None
        if self.world_size > 1:
            self._ddp = nn.parallel.DistributedDataParallel(model)
        net = self._ddp or self.model
        self._loss = lambda x, y: lm_loss(net, x, y)  # noqa: E731
        if config.compile:
            # the loss inside the graph: the float32 logits and the cross-entropy fuse with the
            # model (a GPU spends much of an eager step on them); about 20-30 s to compile once
            self._loss = torch.compile(self._loss)

    def evaluate(self) -> tuple[float, float]:
        """(train, validation) loss estimated on ``eval_batches`` batches of each."""
        c = self.config
        return (
            estimate_loss(self.model, self.train_ids, c.context_length, c.batch_size, c.eval_batches),
            estimate_loss(self.model, self.val_ids, c.context_length, c.batch_size, c.eval_batches),
        )

    def _micro_batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.batches[i]  # (B_micro, T): the same on every rank
        x, y = x[self.rank :: self.world_size], y[self.rank :: self.world_size]  # this rank's share
        return x.to(self.device), y.to(self.device)

    def train_step(self) -> float:
        """One optimizer step (``grad_accum`` micro-batches); returns its mean training loss."""
        return float(self._step())

    def _step(self) -> torch.Tensor:
        """One optimizer step; its loss stays on the device (reading it waits for the GPU)."""
        c = self.config
        total = torch.zeros((), device=self.device)
        for a in range(c.grad_accum):
            x, y = self._micro_batch(self.step * c.grad_accum + a)
            sync = a == c.grad_accum - 1 or self._ddp is None
            with self._ddp.no_sync() if not sync else nullcontext():  # DDP averages on the last one only
                with torch.autocast(
                    self.device.type, dtype=self.dtype or torch.bfloat16, enabled=self.dtype is not None
                ):
                    loss = self._loss(x, y) / c.grad_accum
                loss.backward()
            total += loss.detach()
        apply_update(self.optimizer, self.model.parameters(), lr_at(self.step, c), c.grad_clip)
        self.step += 1
        self.history.tokens_seen += c.batch_size * c.context_length
        return total

    def train(self, until: int | None = None) -> History:
        """Train up to step ``until`` (default: ``config.steps``); return the history.

        The progress bar reads the loss every ``BAR_EVERY`` steps only: on a GPU each read
        waits for the device, and a step that waits cannot overlap with the next one.
        """
        c = self.config
        until = c.steps if until is None else min(until, c.steps)
        self.model.train()
        bar = tqdm(total=until, initial=self.step, desc="training", disable=not self.progress or self.rank != 0)
        started, since = time.perf_counter(), self.step
        while self.step < until:
            loss = self._step()
            if bar.disable is False and (self.step % BAR_EVERY == 0 or self.step == until):
                elapsed = time.perf_counter() - started
                tokens = (self.step - since) * c.batch_size * c.context_length
                bar.set_postfix(loss=f"{float(loss):.3f}", tok_s=f"{tokens / elapsed:,.0f}", refresh=False)
                bar.update(self.step - bar.n)
            if self.step % c.eval_every == 0 or self.step == c.steps:
                self.history.seconds += time.perf_counter() - started
                self._record()
                started, since = time.perf_counter(), self.step
            if c.sample_every and self.sample is not None and self.step % c.sample_every == 0:
                self.history.seconds += time.perf_counter() - started
                text = self.sample(self.model)
                self.history.samples.append((self.step, text))
                if self.rank == 0:
                    tqdm.write(f"step {self.step}: {text!r}")
                self.model.train()
                started, since = time.perf_counter(), self.step
        self.history.seconds += time.perf_counter() - started
        bar.close()
        self.model.eval()
        return self.history

    def _record(self) -> None:
        train_loss, val_loss = self.evaluate()
        h = self.history
        h.steps.append(self.step)
        h.train_loss.append(train_loss)
        h.val_loss.append(val_loss)
        h.lr.append(lr_at(self.step - 1, self.config))

    # ----------------------------------------------------------------------------------
    # checkpoints
    # ----------------------------------------------------------------------------------

    def save(self, path: str | Path, **notes) -> None:
        """Write a checkpoint (rank 0 only under DDP), atomically, without pickle; ``notes``
        (JSON-ready) are stored beside the state, e.g. how the data was prepared."""
        if self.rank == 0:
            extra = {"train_config": asdict(self.config), "history": asdict(self.history), **notes}
            save_checkpoint(path, self.model, self.optimizer, step=self.step, extra=extra)
        if self.world_size > 1:
            dist.barrier()

    @classmethod
    def resume(
        cls, path: str | Path, model: nn.Module, train_ids: torch.Tensor, val_ids: torch.Tensor, **options
    ) -> Trainer:
        """A trainer that continues the run saved at ``path``: same config, weights, optimizer
        moments, step, history and random state, so the rest of the run is what it would have
        been without the interruption. ``model`` must have the saved shapes."""
        checkpoint = read_checkpoint(path)
        if "train_config" not in checkpoint.extra:
            raise CheckpointError(f"{path} was not written by a Trainer (it has no train_config); use load_checkpoint")
        trainer = cls(model, train_ids, val_ids, TrainConfig(**checkpoint.extra["train_config"]), **options)
        checkpoint.restore(model, trainer.optimizer)
        trainer.step = checkpoint.step
        history = checkpoint.extra["history"]
        history["samples"] = [tuple(s) for s in history["samples"]]
        trainer.history = History(**history)
        return trainer


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
    """Train for ``steps`` batches with cosine decay and no warmup; return the loss history.

    The one-call form of :class:`Trainer` for chapters that are not about training itself.
    ``progress=None`` shows a progress bar unless ``COURSE_PROGRESS=0`` (see runtime).
    """
    config = TrainConfig(
        steps=steps,
        batch_size=batch_size,
        context_length=context_length,
        lr=lr,
        weight_decay=weight_decay,
        eval_every=eval_every,
        eval_batches=eval_batches,
        seed=seed,
    )
    return Trainer(model, train_ids, val_ids, config, progress=progress).train()
