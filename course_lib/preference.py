"""Learning from preferences (chapter 13): sequence log-probabilities, DPO.

A demonstration says "write this"; a preference says "this answer is better than that one".
Direct Preference Optimisation (Rafailov et al., 2023) learns from pairs without a reward model:

- :func:`token_logprobs` / :func:`sequence_logprobs`: log p(answer | prompt) under a model,
  summed over the answer's tokens and its closing end-of-answer token, the prompt masked by
  chapter 11's :func:`~course_lib.instruct.collate`;
- :func:`dpo_loss`: -log σ(β [(log π(y_w) - log π_ref(y_w)) - (log π(y_l) - log π_ref(y_l))]);
  β times a log-ratio is the *implicit reward* of an answer;
- :func:`train_dpo`: the loss on the shared fine-tuning loop (:func:`finetuning.fine_tune`),
  the reference's log-probabilities computed once, before training; ``nll_weight`` adds the
  chosen answers' own cross-entropy (RPO, Pang et al., 2024), against DPO's known habit of
  lowering the chosen answers' likelihood too.

Pairs come from anywhere: :func:`course_lib.rl.right_wrong_pairs` makes them from a model's own
samples and a checker (a right answer chosen, a wrong one rejected).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .finetuning import FineTuneConfig, fine_tune
from .instruct import IGNORE_INDEX, collate
from .runtime import evaluating, model_device
from .training import History

Encoded = tuple[list[int], int]
"""An encoded example: prompt + answer + end-of-text as ids, and the prompt's length."""


def disable_dropout(model: nn.Module) -> nn.Module:
    """Set every dropout of ``model`` to p = 0 (as TRL's trainers do by default): with dropout
    the policy's log-probabilities would be noisy samples, and their ratio to the reference's
    (computed without dropout) would not be 1 at the start."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        elif isinstance(getattr(module, "dropout", None), float):  # attention's dropout on its weights
            module.dropout = 0.0
    return model


def token_logprobs(
    model: nn.Module, encoded: Sequence[Encoded], pad_id: int, max_length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logps, mask)``, both (B, T): the log-probability of each target token and whether it
    is an answer token (the answer and its closing end-of-text; prompt and padding masked), as
    chapter 11's collate with the instruction masked decides. Gradients flow (training uses it)."""
    inputs, targets = collate(encoded, pad_id, max_length, mask_instruction=True)  # (B, T), (B, T)
    device = model_device(model)
    inputs, targets = inputs.to(device), targets.to(device)
    logits = model(inputs).float()  # (B, T, V)
    mask = targets != IGNORE_INDEX  # (B, T)
    picked = logits.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T): the target's logit
    logps = (picked - torch.logsumexp(logits, dim=-1)).masked_fill(~mask, 0.0)  # (B, T): log-softmax, picked
    return logps, mask


def sequence_logprobs(
    model: nn.Module, encoded: Sequence[Encoded], pad_id: int, max_length: int | None = None
) -> torch.Tensor:
    """(B,) log p(answer | prompt): the answer's token log-probabilities summed."""
    logps, _ = token_logprobs(model, encoded, pad_id, max_length)
    return logps.sum(dim=-1)  # (B,)


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    reference_chosen: torch.Tensor,
    reference_rejected: torch.Tensor,
    beta: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, chosen_rewards, rejected_rewards)`` of Direct Preference Optimisation.

    Each argument is (N,) sequence log-probabilities of N pairs. The implicit reward of an
    answer is β (log π(y|x) - log π_ref(y|x)); the loss is the mean over pairs of
    -log σ(chosen reward - rejected reward): the Bradley–Terry likelihood that the chosen
    answer wins. Rewards are returned detached, for measuring.
    """
    tensors = {"policy_chosen": policy_chosen, "policy_rejected": policy_rejected,
               "reference_chosen": reference_chosen, "reference_rejected": reference_rejected}  # fmt: skip
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1 or len(shapes["policy_chosen"]) != 1:
        raise ValueError(f"dpo_loss needs four (N,) tensors, one log-probability per pair; got shapes {shapes}")
    if shapes["policy_chosen"][0] == 0:
        raise ValueError("dpo_loss needs at least one pair")
    if not beta > 0:
        raise ValueError(f"beta must be positive (it scales the implicit reward), got {beta}")
    chosen_logratios = policy_chosen - reference_chosen  # (N,)
    rejected_logratios = policy_rejected - reference_rejected  # (N,)
    loss = -F.logsigmoid(beta * (chosen_logratios - rejected_logratios)).mean()
    return loss, beta * chosen_logratios.detach(), beta * rejected_logratios.detach()


@torch.no_grad()
def score_pairs(
    model: nn.Module, pairs: Sequence[tuple[Encoded, Encoded]], pad_id: int, batch_size: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(chosen, rejected)``: (N,) sequence log-probabilities of each pair's answers, on the CPU,
    in eval mode (the reference's values for :func:`dpo_loss`, or a model's for measuring)."""
    if not pairs:
        raise ValueError("score_pairs needs at least one pair")
    max_length = getattr(getattr(model, "config", None), "context_length", None)
    chosen, rejected = [], []
    with evaluating(model):
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start : start + batch_size]
            logps = sequence_logprobs(model, [c for c, _ in batch] + [r for _, r in batch], pad_id, max_length)
            chosen.append(logps[: len(batch)].cpu())
            rejected.append(logps[len(batch) :].cpu())
    return torch.cat(chosen), torch.cat(rejected)


@dataclass
class PairScores:
    """What a model makes of held-out pairs against the reference: how often it prefers the
    chosen answer, the implicit rewards, and the log-probabilities themselves."""

    chosen: torch.Tensor  # (N,) log π(chosen)
    rejected: torch.Tensor  # (N,) log π(rejected)
    chosen_rewards: torch.Tensor  # (N,) β (log π - log π_ref) of the chosen answers
    rejected_rewards: torch.Tensor  # (N,)

    @property
    def prefers_chosen(self) -> int:
        """How many pairs the model gives the chosen answer the higher log-probability."""
        return int((self.chosen > self.rejected).sum())

    @property
    def margin(self) -> float:
        """The mean implicit reward margin, chosen minus rejected."""
        return (self.chosen_rewards - self.rejected_rewards).mean().item()


def compare_pairs(
    model: nn.Module,
    reference: tuple[torch.Tensor, torch.Tensor],
    pairs: Sequence[tuple[Encoded, Encoded]],
    pad_id: int,
    beta: float = 0.1,
) -> PairScores:
    """Score ``pairs`` under ``model``, with implicit rewards against the ``reference``'s
    log-probabilities (as :func:`score_pairs` returned them)."""
    chosen, rejected = score_pairs(model, pairs, pad_id)
    if chosen.shape != reference[0].shape:
        raise ValueError(f"{len(pairs)} pairs but {reference[0].shape[0]} reference log-probabilities")
    return PairScores(chosen, rejected, beta * (chosen - reference[0]), beta * (rejected - reference[1]))


def train_dpo(
    policy: nn.Module,
    reference: nn.Module,
    train: Sequence[tuple[Encoded, Encoded]],
    val: Sequence[tuple[Encoded, Encoded]],
    pad_id: int,
    config: FineTuneConfig,
    beta: float = 0.1,
    nll_weight: float = 0.0,
    progress: bool | None = None,
) -> History:
    """Train ``policy`` with :func:`dpo_loss` on encoded pairs ``((ids, prompt length) chosen,
    (ids, prompt length) rejected)``, the ``reference`` frozen (usually a copy of the policy before
    training). ``nll_weight`` > 0 adds that weight times the chosen answers' cross-entropy (the
    mean over their tokens, as TRL's ``rpo_alpha``). Dropout is switched off in the policy. The
    history records, at each evaluation, the mean training loss since the last one, the DPO loss
    on the validation pairs, and the share of validation pairs whose chosen answer the policy
    finds more likely (``val_accuracy``)."""
    if not train or not val:
        raise ValueError("train_dpo needs training and validation pairs")
    if nll_weight < 0:
        raise ValueError(f"nll_weight must be 0 or more, got {nll_weight}")
    disable_dropout(policy)
    reference_train, reference_val = score_pairs(reference, train, pad_id), score_pairs(reference, val, pad_id)
    max_length = getattr(getattr(policy, "config", None), "context_length", None)
    device = model_device(policy)
    history, losses = History(), []

    def batch_loss(chosen: Sequence[int]) -> torch.Tensor:
        batch, n = [train[i] for i in chosen], len(chosen)
        logps, mask = token_logprobs(policy, [c for c, _ in batch] + [r for _, r in batch], pad_id, max_length)
        sequences = logps.sum(dim=-1)  # (2n,): chosen answers, then rejected ones
        index = torch.tensor(list(chosen))
        loss, _, _ = dpo_loss(
            sequences[:n], sequences[n:],
            reference_train[0][index].to(device), reference_train[1][index].to(device), beta,
        )  # fmt: skip
        if nll_weight > 0:
            loss = loss + nll_weight * -logps[:n].sum() / mask[:n].sum()  # the chosen tokens' mean cross-entropy
        losses.append(loss.item())
        return loss

    def record(step: int) -> None:
        scores = compare_pairs(policy, (reference_val[0], reference_val[1]), val, pad_id, beta)
        history.steps.append(step)
        history.train_loss.append(sum(losses) / len(losses))
        losses.clear()
        val_loss, _, _ = dpo_loss(scores.chosen, scores.rejected, reference_val[0], reference_val[1], beta)
        history.val_loss.append(val_loss.item())
        history.val_accuracy.append(scores.prefers_chosen / len(val))

    history.seconds = fine_tune(policy, len(train), batch_loss, config, record, progress)
    return history
