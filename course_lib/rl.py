"""Learning from a reward a program checks (chapter 13): group sampling, GRPO.

Reinforcement learning with verifiable rewards needs no labelled answer to imitate, only a
checker. Group Relative Policy Optimization (Shao et al., 2024, DeepSeekMath) keeps PPO's
clipped objective but drops its value network: the baseline of an answer is the mean reward of
the other answers sampled for the same question.

- :func:`sample_group`: G answers to one prompt, sampled as one batch of G rows with the KV cache;
- :func:`rewards_of`: a reward function's verdicts, checked to be numbers;
  :func:`exact_reward` (the right answer, exactly) and :func:`contains_reward` (the right
  answer appears somewhere: a loose checker a policy can game);
- :func:`group_advantages`: (r - mean of the group) / (std of the group + ε);
- :func:`grpo_loss`: the clipped surrogate, averaged over each answer's tokens, then over
  answers, plus β times an estimate of the KL divergence to a frozen reference;
- :func:`train_grpo`: sample, score, take one step of the shared fine-tuning loop, repeat;
- :func:`pass_at_1` (greedy) and :func:`sampled_rewards` (G samples per held-out question)
  measure what it changed.

The numbers follow TRL's ``GRPOTrainer`` (its ``loss_type="grpo"``), which the tests check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

from .evaluation import exact_match
from .finetuning import FineTuneConfig, fine_tune
from .generation import generate
from .instruct import answer_batch, format_prompt
from .model import GPT
from .preference import disable_dropout, token_logprobs
from .runtime import evaluating
from .tasks import Instruction
from .tokenization import ENDOFTEXT
from .training import History

RewardFunction = Callable[[str, Instruction], float]
"""``reward(answer_text, example) -> number``: how good an answer to ``example`` is."""


def exact_reward(text: str, example: Instruction) -> float:
    """1.0 when the answer is exactly the expected output (up to surrounding whitespace), else 0.0."""
    return 1.0 if exact_match(text, example["output"]) else 0.0


def contains_reward(text: str, example: Instruction) -> float:
    """1.0 when the expected output appears anywhere in the answer (case-insensitive): a loose
    checker, which an answer listing every option also passes."""
    return 1.0 if example["output"].strip().lower() in text.lower() else 0.0


@torch.no_grad()
def sample_group(
    model: GPT,
    prompt_ids: Sequence[int],
    group_size: int,
    max_new_tokens: int,
    eos_id: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """``group_size`` sampled answers to one prompt, as token ids, each cut after its first
    ``eos_id`` (kept: stopping is part of the answer). The group runs as one batch of rows
    sharing the prompt, with the KV cache."""
    if group_size < 2:
        raise ValueError(f"a group needs at least 2 answers (each is compared with the others), got {group_size}")
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    if len(prompt_ids) + max_new_tokens > model.config.context_length:
        raise ValueError(
            f"prompt ({len(prompt_ids)} tokens) + {max_new_tokens} new tokens does not fit the context of "
            f"{model.config.context_length}: shorten the prompt or max_new_tokens"
        )
    rows = torch.tensor([list(prompt_ids)] * group_size)  # (G, T): the same prompt G times
    new = generate(model, rows, max_new_tokens, temperature=temperature, generator=generator, eos_id=eos_id)
    completions = []
    for row in new[:, len(prompt_ids) :].tolist():  # (G, up to max_new_tokens)
        completions.append(row[: row.index(eos_id) + 1] if eos_id in row else row)
    return completions


def decode_answer(tokenizer, completion: Sequence[int], eos_id: int) -> str:
    """The text of an answer: its tokens up to end-of-text, decoded and stripped (as
    :func:`~course_lib.instruct.answer` returns it)."""
    ids = list(completion)
    return tokenizer.decode(ids[: ids.index(eos_id)] if eos_id in ids else ids).strip()


def rewards_of(reward: RewardFunction, texts: Sequence[str], example: Instruction) -> torch.Tensor:
    """(G,) the reward of each answer to ``example``; a clear error when the reward function
    returns something that is not a finite number."""
    values = []
    for text in texts:
        value = reward(text, example)
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if not isinstance(value, (int, float)) or not math.isfinite(value):  # a bool counts as 0 or 1
            raise TypeError(
                f"the reward function returned {value!r} ({type(value).__name__}) for the answer {text!r:.60}; "
                "it must return a finite number, e.g. 1.0 for a right answer and 0.0 for a wrong one"
            )
        values.append(float(value))
    return torch.tensor(values)


def group_advantages(rewards: torch.Tensor, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """(Q, G) advantages from (Q, G) rewards, Q questions with G answers each: each reward minus
    its group's mean, divided by the group's standard deviation (Bessel-corrected) + ``eps``
    when ``scale``. A group whose answers all scored the same teaches nothing: advantage 0."""
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (questions, answers per question), got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(
            f"a group of {rewards.shape[1]} answer has no baseline to compare with: sample at least 2 per question"
        )
    rewards = rewards.float()
    advantages = rewards - rewards.mean(dim=1, keepdim=True)  # (Q, G)
    if scale:
        advantages = advantages / (rewards.std(dim=1, keepdim=True) + eps)  # (Q, G)
    return advantages


def kl_estimate(logps: torch.Tensor, reference_logps: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(π || π_ref) from the sampled tokens (Schulman's k3):
    exp(r) - r - 1 with r = log π_ref - log π; never negative, zero where they agree."""
    r = reference_logps - logps
    return torch.exp(r) - r - 1


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    reference_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    epsilon: float = 0.2,
) -> torch.Tensor:
    """The GRPO objective to minimise, for B sampled answers.

    ``logps``, ``old_logps`` (the policy that sampled), ``reference_logps`` and ``mask`` (which
    positions are answer tokens) are (B, T); ``advantages`` is (B,). Per token:
    -min(ρ A, clip(ρ, 1 - ε, 1 + ε) A) with ρ = π / π_old, plus β · KL(π || π_ref) when β > 0;
    averaged over each answer's tokens, then over the answers.
    """
    if logps.shape != old_logps.shape or logps.shape != mask.shape or logps.ndim != 2:
        raise ValueError(
            f"logps, old_logps and mask must be (B, T) of one shape, got {tuple(logps.shape)}, "
            f"{tuple(old_logps.shape)}, {tuple(mask.shape)}"
        )
    if advantages.shape != logps.shape[:1]:
        raise ValueError(f"one advantage per answer: expected shape ({logps.shape[0]},), got {tuple(advantages.shape)}")
    if beta != 0.0 and (reference_logps is None or reference_logps.shape != logps.shape):
        raise ValueError("beta > 0 needs reference_logps of the same (B, T) shape as logps")
    mask = mask.to(logps.dtype)
    ratio = torch.exp(logps - old_logps)  # (B, T): 1 at the first step after sampling
    advantage = advantages.unsqueeze(1)  # (B, 1)
    per_token = -torch.min(ratio * advantage, ratio.clamp(1 - epsilon, 1 + epsilon) * advantage)  # (B, T)
    if beta != 0.0:
        per_token = per_token + beta * kl_estimate(logps, reference_logps)
    return ((per_token * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)).mean()


@dataclass
class GRPOConfig:
    """What GRPO adds to a fine-tuning run (whose ``batch_size`` is the questions per step)."""

    group_size: int = 8  # answers sampled per question
    max_new_tokens: int = 12
    temperature: float = 1.0
    beta: float = 0.0  # weight of the KL term to the reference (0: no reference needed)
    epsilon: float = 0.2  # the clip range of the ratio
    scale_rewards: bool = True  # divide by the group's standard deviation
    seed: int = 0  # the sampling generator

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size must be at least 2 (a group of one has no baseline), got {self.group_size}")
        if self.max_new_tokens < 1 or self.temperature <= 0 or self.epsilon <= 0 or self.beta < 0:
            raise ValueError("max_new_tokens, temperature and epsilon must be positive and beta 0 or more")


def train_grpo(
    model: GPT,
    tokenizer,
    questions: Sequence[Instruction],
    reward: RewardFunction,
    config: FineTuneConfig,
    grpo: GRPOConfig,
    reference: nn.Module | None = None,
    evaluate: Callable[[int], None] | None = None,
    style: str = "short",
    progress: bool | None = None,
) -> History:
    """Train ``model`` by GRPO on ``questions`` (instruction examples; only their prompts and
    what ``reward`` makes of the answers are used). Each step takes ``config.batch_size``
    questions, samples ``grpo.group_size`` answers to each, scores them, and takes one step on
    :func:`grpo_loss` (so ρ = 1 and clipping acts only through its gradient, as in TRL with one
    iteration per batch). Dropout is switched off. The history records at each evaluation the
    mean loss and the mean reward of the sampled answers since the previous one (``train_loss``,
    ``train_accuracy``); ``evaluate(step)``, if given, measures anything else.
    """
    if not questions:
        raise ValueError("train_grpo needs at least one question")
    if grpo.beta > 0 and reference is None:
        raise ValueError("beta > 0 needs a frozen reference model")
    disable_dropout(model)
    eos_id = tokenizer.special_tokens[ENDOFTEXT]
    prompts = [tokenizer.encode(format_prompt(q, style), allowed_special="all") for q in questions]
    generator = torch.Generator().manual_seed(grpo.seed)
    context = model.config.context_length
    history, losses, mean_rewards = History(), [], []

    def batch_loss(chosen: Sequence[int]) -> torch.Tensor:
        encoded, rewards = [], []
        for i in chosen:
            completions = sample_group(
                model, prompts[i], grpo.group_size, grpo.max_new_tokens, eos_id, grpo.temperature, generator
            )
            texts = [decode_answer(tokenizer, c, eos_id) for c in completions]
            rewards.append(rewards_of(reward, texts, questions[i]))
            encoded += [(prompts[i] + c, len(prompts[i])) for c in completions]
        rewards = torch.stack(rewards)  # (Q, G)
        advantages = group_advantages(rewards, grpo.scale_rewards).flatten()  # (Q * G,)
        logps, mask = token_logprobs(model, encoded, eos_id, context)  # (Q * G, T) each
        reference_logps = None
        if grpo.beta > 0:
            with torch.no_grad(), evaluating(reference):
                reference_logps, _ = token_logprobs(reference, encoded, eos_id, context)
        loss = grpo_loss(
            logps, logps.detach(), advantages.to(logps.device), mask, reference_logps, grpo.beta, grpo.epsilon
        )
        losses.append(loss.item())
        mean_rewards.append(rewards.mean().item())
        return loss

    def record(step: int) -> None:
        history.steps.append(step)
        history.train_loss.append(sum(losses) / len(losses))
        history.train_accuracy.append(sum(mean_rewards) / len(mean_rewards))
        losses.clear()
        mean_rewards.clear()
        if evaluate is not None:
            evaluate(step)

    history.seconds = fine_tune(model, len(questions), batch_loss, config, record, progress)
    return history


def pass_at_1(
    model: GPT, tokenizer, questions: Sequence[Instruction], reward: RewardFunction, max_new_tokens: int = 12,
    style: str = "short",
) -> tuple[int, list[str]]:  # fmt: skip
    """``(passed, answers)``: how many greedy answers earn a reward of at least 1 (pass@1 with a
    0/1 reward), and the answers themselves."""
    prompts = [format_prompt(q, style) for q in questions]
    answers = [text for text, _ in answer_batch(model, tokenizer, prompts, max_new_tokens)]  # = answer() each
    passed = sum(rewards_of(reward, [a], q).item() >= 1.0 for a, q in zip(answers, questions))
    return int(passed), answers


@torch.no_grad()
def sampled_rewards(
    model: GPT,
    tokenizer,
    questions: Sequence[Instruction],
    reward: RewardFunction,
    group_size: int = 8,
    max_new_tokens: int = 12,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    style: str = "short",
) -> torch.Tensor:
    """(Q, G): the reward of each of ``group_size`` answers sampled (as in training) for each
    question. Its row means are each question's chance of a rewarded sample; a row with any
    reward of at least 1 is a question solved within G tries (pass@G with a 0/1 reward)."""
    if not questions:
        raise ValueError("sampled_rewards needs at least one question")
    eos_id = tokenizer.special_tokens[ENDOFTEXT]
    rows = []
    for q in questions:
        prompt = tokenizer.encode(format_prompt(q, style), allowed_special="all")
        completions = sample_group(model, prompt, group_size, max_new_tokens, eos_id, temperature, generator)
        rows.append(rewards_of(reward, [decode_answer(tokenizer, c, eos_id) for c in completions], q))
    return torch.stack(rows)  # (Q, G)
