"""Fine-tuning a pretrained GPT to classify texts (chapter 10).

- :func:`pad_batch` pads token lists on the right to the longest of the batch (not to the
  context), truncating a too-long text by keeping its start, and returns the true lengths;
- :class:`GPTClassifier` puts a small head on the GPT's features **at the last real token** of
  each sequence: in a causal model it is the only position that has seen the whole text. Pooling
  at position -1 instead reads a padding token whenever the batch needed padding, so a text's
  prediction would change with its neighbours in the batch;
- :func:`freeze` trains only the head, the last block (and final norm) with it, or everything;
- :func:`train_classifier` is the Trainer's recipe for labelled texts: AdamW with the same
  parameter groups, warmup and cosine, clipping, a progress bar, the model's device; it
  records loss and accuracy on training and validation batches as it goes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .finetuning import FineTuneConfig, fine_tune
from .model import GPT, count_trainable
from .runtime import evaluating, model_device
from .tokenization import ENDOFTEXT
from .training import History

Example = tuple[str, int]
FREEZING = ("head", "last_block", "all")


def pad_id_of(tokenizer) -> int:
    """The id to pad with: the tokenizer's end-of-text token (never a real word's id)."""
    special = getattr(tokenizer, "special_tokens", {})
    if ENDOFTEXT not in special:
        raise ValueError(f"the tokenizer has no {ENDOFTEXT!r} token to pad with; pass pad_id yourself")
    return special[ENDOFTEXT]


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_id: int, max_length: int, truncate: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, lengths)``: (B, T) ids padded on the right with ``pad_id`` to the longest
    sequence of the batch, and (B,) the number of real tokens in each row.

    A sequence longer than ``max_length`` (the model's context) keeps its first ``max_length``
    tokens, or raises when ``truncate=False``. An empty sequence raises: there is nothing to
    classify.
    """
    if len(sequences) == 0:
        raise ValueError("pad_batch needs at least one sequence, got an empty batch")
    rows = []
    for k, seq in enumerate(sequences):
        if len(seq) == 0:
            raise ValueError(f"text {k} of the batch is empty (no tokens): there is nothing to classify")
        if len(seq) > max_length and not truncate:
            raise ValueError(
                f"text {k} has {len(seq)} tokens, more than the context of {max_length}; "
                "pass truncate=True to keep its start"
            )
        rows.append(list(seq[:max_length]))
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)  # (B, T)
    for k, row in enumerate(rows):
        ids[k, : len(row)] = torch.tensor(row, dtype=torch.long)
    return ids, torch.tensor([len(r) for r in rows])


def last_real_token(features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, T, C) features, (B,) lengths -> (B, C): each row's vector at its last real token."""
    if lengths.shape != features.shape[:1]:
        raise ValueError(f"need one length per row: {features.shape[0]} rows, lengths of shape {tuple(lengths.shape)}")
    if bool((lengths < 1).any()) or bool((lengths > features.shape[1]).any()):
        raise ValueError(
            f"every length must be between 1 and the row's {features.shape[1]} positions, got {lengths.tolist()}: "
            "a length of 0 would read position -1, the last padding token"
        )
    rows = torch.arange(features.shape[0], device=features.device)
    return features[rows, lengths.to(features.device) - 1]  # (B, C)


class GPTClassifier(nn.Module):
    """A pretrained :class:`GPT` whose LM head is replaced by ``n_classes`` outputs, read at
    the last real token of each text (``pooling="last"`` reads position -1, for comparison)."""

    def __init__(self, gpt: GPT, n_classes: int, pooling: str = "last_real"):
        super().__init__()
        if n_classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {n_classes}")
        if pooling not in ("last_real", "last"):
            raise ValueError(f"unknown pooling {pooling!r}; choose 'last_real' or 'last'")
        self.gpt, self.pooling = gpt, pooling
        self.head = nn.Linear(gpt.config.d_model, n_classes)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    @property
    def context_length(self) -> int:
        return self.gpt.config.context_length

    def forward(self, idx: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) ids (right-padded), (B,) lengths -> (B, n_classes) logits."""
        features = self.gpt.features(idx)  # (B, T, C)
        if self.pooling == "last" or lengths is None:
            pooled = features[:, -1]  # (B, C): a padding token when the row was padded
        else:
            pooled = last_real_token(features, lengths)  # (B, C)
        return self.head(pooled)  # (B, n_classes)


def freeze(model: GPTClassifier, train: str) -> tuple[int, int]:
    """Train only part of ``model``: ``"head"``, ``"last_block"`` (the head, the last
    transformer block and the final norm) or ``"all"``. Returns (trainable, total) parameters."""
    if train not in FREEZING:
        raise ValueError(f"unknown choice {train!r}; choose one of {', '.join(FREEZING)}")
    for p in model.parameters():
        p.requires_grad_(train == "all")
    if train == "last_block":
        for part in (model.gpt.transformer.h[-1], model.gpt.transformer.ln_f):
            for p in part.parameters():
                p.requires_grad_(True)
    for p in model.head.parameters():
        p.requires_grad_(True)
    return count_trainable(model)


# --------------------------------------------------------------------------------------
# data, evaluation, training
# --------------------------------------------------------------------------------------


def encode_examples(examples: Sequence[Example], tokenizer, n_classes: int) -> list[tuple[list[int], int]]:
    """Token ids and label of each example, checking the labels and that no text is empty."""
    encoded = []
    for k, (text, label) in enumerate(examples):
        if not isinstance(label, int) or not 0 <= label < n_classes:
            raise ValueError(f"example {k} has label {label!r}; labels must be integers 0..{n_classes - 1}")
        ids = tokenizer.encode(text)
        if not ids:
            raise ValueError(f"example {k} is an empty text: there is nothing to classify")
        encoded.append((ids, label))
    return encoded


def batches(
    encoded: Sequence[tuple[list[int], int]],
    batch_size: int,
    pad_id: int,
    max_length: int,
    order: Sequence[int] | None = None,
):
    """Yield ``(ids, lengths, labels)`` batches in ``order`` (default: as given)."""
    order = range(len(encoded)) if order is None else order
    order = list(order)
    for start in range(0, len(order), batch_size):
        chosen = [encoded[i] for i in order[start : start + batch_size]]
        ids, lengths = pad_batch([ids for ids, _ in chosen], pad_id, max_length)
        yield ids, lengths, torch.tensor([label for _, label in chosen])


@torch.no_grad()
def evaluate(
    model: GPTClassifier, encoded: Sequence[tuple[list[int], int]], pad_id: int, batch_size: int = 64
) -> tuple[float, float, torch.Tensor]:
    """(mean loss, accuracy, predictions) over ``encoded``, in eval mode."""
    device = model_device(model)
    total, predictions = 0.0, []
    with evaluating(model):
        for ids, lengths, labels in batches(encoded, batch_size, pad_id, model.context_length):
            logits = model(ids.to(device), lengths)  # (B, n_classes)
            total += F.cross_entropy(logits.float(), labels.to(device), reduction="sum").item()
            predictions.append(logits.argmax(-1).cpu())
    predictions = torch.cat(predictions)
    labels = torch.tensor([label for _, label in encoded])
    return total / len(encoded), (predictions == labels).float().mean().item(), predictions


def majority_baseline(train_labels: Sequence[int], test_labels: Sequence[int]) -> float:
    """Accuracy of always answering the most frequent training label: what to beat."""
    most = max(set(train_labels), key=list(train_labels).count)
    return sum(label == most for label in test_labels) / len(test_labels)


def confusion_matrix(predictions: Sequence[int], labels: Sequence[int], n_classes: int) -> torch.Tensor:
    """(n_classes, n_classes) counts: row = true label, column = predicted label."""
    matrix = torch.zeros(n_classes, n_classes, dtype=torch.long)
    for p, y in zip(predictions, labels):
        matrix[int(y), int(p)] += 1
    return matrix


def train_classifier(
    model: GPTClassifier,
    train: Sequence[tuple[list[int], int]],
    val: Sequence[tuple[list[int], int]],
    pad_id: int,
    config: FineTuneConfig,
    progress: bool | None = None,
) -> History:
    """Fine-tune the trainable parameters of ``model`` on encoded examples (see
    :func:`encode_examples`); returns the history of loss and accuracy.

    The examples are reshuffled every epoch by a generator seeded with ``config.seed``; the
    training loss and accuracy recorded are measured on (up to) as many training examples as
    the validation set has, in eval mode, so both curves are comparable.
    """
    if not train or not val:
        raise ValueError("train_classifier needs training and validation examples")
    device = model_device(model)
    train_probe = list(train[:: max(1, len(train) // len(val))])[: len(val)]
    history = History()

    def batch_loss(chosen: Sequence[int]) -> torch.Tensor:
        ids, lengths, labels = next(batches(train, len(chosen), pad_id, model.context_length, chosen))
        return F.cross_entropy(model(ids.to(device), lengths).float(), labels.to(device))

    def record(step: int) -> None:
        train_loss, train_accuracy, _ = evaluate(model, train_probe, pad_id)
        val_loss, val_accuracy, _ = evaluate(model, val, pad_id)
        history.steps.append(step)
        history.train_loss.append(train_loss)
        history.train_accuracy.append(train_accuracy)
        history.val_loss.append(val_loss)
        history.val_accuracy.append(val_accuracy)

    history.seconds = fine_tune(model, len(train), batch_loss, config, record, progress)
    return history
