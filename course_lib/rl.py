"""Learning from a reward a program checks (chapter 13): sampling, scoring, GRPO, expert iteration.

Reinforcement learning with verifiable rewards needs no labelled answer to imitate, only a
checker. Everything here works on any task given as text prompts and a reward function
``reward(prompt, answer) -> number`` (:class:`RewardTask`):

- :func:`sample_answers`: G answers to each prompt, all sampled as one batch with the KV cache,
  and their rewards; :func:`score` measures a model on held-out prompts (greedy pass@1, sampled
  pass@1, pass@k, answer length) as a :class:`Scores`;
- :func:`group_advantages`: each reward minus its group's mean (divided by the group's spread);
- :func:`grpo_loss`: Group Relative Policy Optimization (Shao et al., 2024, DeepSeekMath), PPO's
  clipped objective with the group as baseline instead of a value network, plus β times an
  estimate of the KL divergence to a frozen reference (:func:`kl_estimate`);
- :func:`train_grpo` and :func:`train_expert_iteration` (sample, keep the right answers,
  fine-tune on them: rejection sampling) share one loop, :func:`~finetuning.fine_tune`;
- :func:`right_wrong_pairs` turns the samples into preference pairs for DPO
  (:mod:`course_lib.preference`): a right answer chosen, a wrong one rejected.

The numbers follow TRL's ``GRPOTrainer`` (its ``loss_type="grpo"``), which the tests check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from .evaluation import mean_interval, wilson_interval
from .finetuning import FineTuneConfig, fine_tune
from .generation import generate_batch
from .instruct import train_instructions
from .model import GPT, GPTConfig
from .preference import Encoded, disable_dropout, token_logprobs
from .runtime import evaluating
from .tasks import AdditionProblems, addition_example
from .training import History

Reward = Callable[[str, str], float]
"""``reward(prompt, answer) -> number``: how good ``answer`` (text) is as an answer to ``prompt``."""


@dataclass(frozen=True)
class RewardTask:
    """How a task is posed and checked, whatever the prompts: a reward function, the tokenizer
    that turns text into the model's ids and back, the id that ends an answer, and how long an
    answer may be."""

    reward: Reward
    tokenizer: object  # encode(text) -> ids, decode(ids) -> text
    eos_id: int
    max_new_tokens: int = 8
    solved_at: float = 1.0  # a reward this high counts as a right answer (pass@k, expert iteration)

    def __post_init__(self) -> None:
        if not callable(self.reward):
            raise TypeError(f"reward must be a function reward(prompt, answer) -> number, got {self.reward!r:.60}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")

    def encode(self, prompts: Sequence[str], context_length: int) -> list[list[int]]:
        """The prompts as ids; a clear error for an empty task or a prompt too long to answer."""
        if isinstance(prompts, str) or len(prompts) == 0:
            raise ValueError("the task has no prompts: give a list of prompt texts")
        encoded = [list(self.tokenizer.encode(p)) for p in prompts]
        for prompt, ids in zip(prompts, encoded):
            if not ids or len(ids) + self.max_new_tokens > context_length:
                raise ValueError(
                    f"the prompt {prompt!r:.40} ({len(ids)} tokens) + {self.max_new_tokens} new tokens does not "
                    f"fit the context of {context_length}"
                )
        return encoded

    def text(self, completion: Sequence[int]) -> str:
        """The text of an answer: its tokens up to the end-of-answer id, decoded and stripped."""
        ids = list(completion)
        return self.tokenizer.decode(ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids).strip()

    def rewards(self, prompts: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
        """(N,) the reward of each answer to its prompt; a clear error when the reward function
        returns something that is not a finite number."""
        values = []
        for prompt, answer in zip(prompts, answers, strict=True):
            value = self.reward(prompt, answer)
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            if not isinstance(value, (int, float)) or not math.isfinite(value):  # a bool counts as 0 or 1
                raise TypeError(
                    f"the reward function returned {value!r:.40} ({type(value).__name__}) for the answer "
                    f"{answer!r:.40} to {prompt!r:.40}; it must return a finite number, e.g. 1.0 for a right "
                    "answer and 0.0 for a wrong one"
                )
            values.append(float(value))
        return torch.tensor(values)


def check_held_out(train: Sequence[str], held_out: Sequence[str]) -> None:
    """A clear error when a held-out prompt is also a training prompt: its score would measure
    memory, not skill."""
    shared = sorted(set(train) & set(held_out))
    if shared:
        raise ValueError(
            f"{len(shared)} held-out prompts are also training prompts (e.g. {shared[0]!r:.40}): "
            "split the prompts first (see tasks.addition_problems)"
        )


@dataclass
class Samples:
    """G sampled answers to each of Q prompts: ids (each ends with its end-of-answer id, unless
    cut at ``max_new_tokens``), texts, and rewards."""

    prompts: list[str]
    prompt_ids: list[list[int]]
    completions: list[list[list[int]]]  # [Q][G] token ids
    texts: list[list[str]]  # [Q][G]
    rewards: torch.Tensor  # (Q, G)

    def encoded(self) -> list[Encoded]:
        """Q·G rows ``(prompt + answer ids, prompt length)``, group after group (:func:`token_logprobs`)."""
        return [(p + c, len(p)) for p, group in zip(self.prompt_ids, self.completions) for c in group]

    def zero_contrast(self) -> float:
        """The share of groups whose answers all got the same reward: nothing to learn from them."""
        return (self.rewards == self.rewards[:, :1]).all(dim=1).float().mean().item()


@torch.no_grad()
def sample_answers(
    model: GPT,
    task: RewardTask,
    prompts: Sequence[str],
    group_size: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> Samples:
    """``group_size`` answers sampled for each prompt and scored: the Q·G rows run as one batch
    with the KV cache (:func:`~course_lib.generation.generate_batch`)."""
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    prompt_ids = task.encode(prompts, model.config.context_length)
    rows = [ids for ids in prompt_ids for _ in range(group_size)]  # each prompt G times
    new = generate_batch(model, rows, task.max_new_tokens, temperature=temperature, generator=generator,
                         eos_id=task.eos_id)  # fmt: skip
    completions = [new[q * group_size : (q + 1) * group_size] for q in range(len(prompts))]
    texts = [[task.text(c) for c in group] for group in completions]
    rewards = task.rewards([p for p in prompts for _ in range(group_size)], [t for group in texts for t in group])
    return Samples(list(prompts), prompt_ids, completions, texts, rewards.view(len(prompts), group_size))


@dataclass
class Scores:
    """What a model does on held-out prompts: its greedy answer to each, and G sampled ones."""

    greedy: torch.Tensor  # (Q,) the reward of each greedy answer
    answers: list[str]  # the greedy answers
    sampled: torch.Tensor  # (Q, G) the rewards of G answers sampled at temperature 1
    solved_at: float = 1.0

    @property
    def n(self) -> int:
        return len(self.answers)

    @property
    def right(self) -> int:
        """How many greedy answers are right (pass@1, greedy)."""
        return int((self.greedy >= self.solved_at).sum())

    def greedy_interval(self) -> tuple[float, float]:
        return wilson_interval(self.right, self.n)

    def sampled_pass_at_1(self) -> tuple[float, tuple[float, float]]:
        """The chance that one sampled answer is right, and its 95% interval over the prompts."""
        return mean_interval((self.sampled >= self.solved_at).float().mean(dim=1).tolist())

    def pass_at(self, k: int) -> float:
        """pass@k: the chance that at least one of k sampled answers is right, estimated without
        bias from the G samples of each prompt, 1 - C(G - c, k) / C(G, k) with c of them right
        (Chen et al., 2021), averaged over the prompts."""
        G = self.sampled.shape[1]
        if not 1 <= k <= G:
            raise ValueError(f"k must be between 1 and the {G} samples per prompt, got {k}")
        right = (self.sampled >= self.solved_at).sum(dim=1).tolist()
        return sum(1 - math.comb(G - c, k) / math.comb(G, k) for c in right) / len(right)

    def solved_within(self) -> int:
        """How many prompts have a right answer among their G samples (pass@G as a count)."""
        return int((self.sampled >= self.solved_at).any(dim=1).sum())

    def mean_length(self) -> float:
        """The mean length of the greedy answers, in characters."""
        return sum(len(a) for a in self.answers) / self.n


def greedy_answers(
    model: GPT, task: RewardTask, prompts: Sequence[str], batch_size: int = 256
) -> tuple[torch.Tensor, list[str]]:
    """``(rewards, answers)``: the greedy answer of ``model`` to each prompt, and its (Q,) rewards."""
    prompt_ids = task.encode(prompts, model.config.context_length)
    new: list[list[int]] = []
    for start in range(0, len(prompt_ids), batch_size):
        new += generate_batch(model, prompt_ids[start : start + batch_size], task.max_new_tokens, greedy=True,
                              eos_id=task.eos_id)  # fmt: skip
    answers = [task.text(c) for c in new]
    return task.rewards(prompts, answers), answers


def greedy_pass_at_1(model: GPT, task: RewardTask, prompts: Sequence[str]) -> float:
    """The share of ``prompts`` whose greedy answer is right (reward >= ``task.solved_at``)."""
    rewards, _ = greedy_answers(model, task, prompts)
    return (rewards >= task.solved_at).float().mean().item()


def addition_start(
    task: RewardTask,
    problems: AdditionProblems,
    target: float = 0.5,
    device: torch.device | str | None = None,
    progress: bool | None = None,
) -> tuple[GPT, History]:
    """Chapter 13's starting point, a model at partial skill: the course GPT (one layer, four heads,
    width 64, context 16) fine-tuned on the training problems (prompt masked, batches of 32, AdamW
    at 3e-3 warmed up over 20 steps and decayed along a cosine planned for 1,000 steps), stopped at
    the first evaluation (every 10 steps) where its greedy pass@1 on the validation problems
    reaches ``target``. ``history.val_accuracy`` holds that pass@1 at each evaluation.

    Why a criterion, not a step count: the run's loss drops off a cliff somewhere after step 250,
    and a last-bit difference in a CPU's float32 kernels (AVX-512, AVX2 or neither; one vendor's
    libraries or another's) moves the cliff by tens to hundreds of steps: the run stopped anywhere
    from step 370 to 570 on the CPUs tried. Stopped at a fixed step, the start's pass@1 ranged from
    0.36 to 0.76 across kernels; stopped on the criterion, it lands just above ``target`` on each,
    at whatever step that takes (tests/test_rl.py)."""
    examples = [addition_example(p, task.tokenizer.encode) for p in problems.train]
    config = GPTConfig(vocab_size=task.tokenizer.vocab_size, context_length=16, n_layers=1, n_heads=4, d_model=64)
    torch.manual_seed(0)
    model = GPT(config).to(device or "cpu")
    steps, batch_size = 1000, 32
    schedule = FineTuneConfig(epochs=steps * batch_size / len(examples), batch_size=batch_size, lr=3e-3,
                              warmup_steps=20, eval_every=10)  # fmt: skip

    def reached(history: History) -> bool:
        history.val_accuracy.append(greedy_pass_at_1(model, task, problems.val))
        return history.val_accuracy[-1] >= target

    val = [addition_example(p, task.tokenizer.encode) for p in problems.val]
    history = train_instructions(model, examples, val, task.eos_id, schedule, True, progress, stop=reached)
    if history.val_accuracy[-1] < target:
        raise RuntimeError(f"the supervised run ended at greedy pass@1 {history.val_accuracy[-1]:.3f}, "
                           f"below the target {target} it should stop at")  # fmt: skip
    return model, history


def score(
    model: GPT, task: RewardTask, prompts: Sequence[str], group_size: int = 8, seed: int = 0, batch_size: int = 256
) -> Scores:
    """Greedy and sampled answers of ``model`` to ``prompts``, scored by ``task`` (sampled with a
    generator seeded by ``seed``, so two models are compared on the same draws)."""
    rewards, answers = greedy_answers(model, task, prompts, batch_size)
    generator = torch.Generator().manual_seed(seed)
    chunk = max(1, batch_size // group_size)
    sampled = [
        sample_answers(model, task, prompts[start : start + chunk], group_size, generator=generator).rewards
        for start in range(0, len(prompts), chunk)
    ]
    return Scores(rewards, answers, torch.cat(sampled), task.solved_at)


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
    if not torch.isfinite(rewards).all():
        bad = (~torch.isfinite(rewards)).nonzero()[0].tolist()
        raise ValueError(
            f"reward {rewards[bad[0], bad[1]].item()} at question {bad[0]}, answer {bad[1]}: every reward must be "
            "a finite number (a NaN or an infinity would make its whole group's advantages NaN)"
        )
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


def kept_answers_loss(logps: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Expert iteration's loss: the cross-entropy of the kept answers' tokens (``keep``: (B,)
    booleans), averaged over those tokens, as supervised fine-tuning averages over its labels;
    0 (with a gradient of 0) when nothing is kept."""
    weights = mask.to(logps.dtype) * keep.to(logps.dtype).unsqueeze(1)  # (B, T)
    return -(logps * weights).sum() / weights.sum().clamp(min=1.0)


@dataclass
class SamplingConfig:
    """How a method that learns from its own answers samples them (a fine-tuning run's
    ``batch_size`` is the prompts per step)."""

    group_size: int = 8  # answers sampled per prompt
    temperature: float = 1.0
    seed: int = 0  # the sampling generator

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size must be at least 2 (a group of one has no baseline), got {self.group_size}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")


@dataclass
class GRPOConfig(SamplingConfig):
    """What GRPO adds to sampling."""

    beta: float = 0.0  # weight of the KL term to the reference (0: no reference needed)
    epsilon: float = 0.2  # the clip range of the ratio
    scale_rewards: bool = True  # divide by the group's standard deviation

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epsilon <= 0 or self.beta < 0:
            raise ValueError(f"epsilon must be positive and beta 0 or more, got {self.epsilon} and {self.beta}")


@dataclass
class RLHistory(History):
    """A :class:`~course_lib.training.History` plus, at every step, the mean reward of the
    sampled answers, the share of groups with no contrast, and the share whose answers were all
    right; ``val_accuracy`` is the greedy pass@1 on the validation prompts at each evaluation."""

    step_reward: list[float] = field(default_factory=list)
    zero_contrast: list[float] = field(default_factory=list)
    all_right: list[float] = field(default_factory=list)


def _learn_from_samples(
    model: GPT,
    task: RewardTask,
    prompts: Sequence[str],
    config: FineTuneConfig,
    sampling: SamplingConfig,
    loss_of: Callable[[Samples, torch.Tensor, torch.Tensor], torch.Tensor],
    val_prompts: Sequence[str] | None,
    progress: bool | None,
) -> RLHistory:
    """The loop GRPO and expert iteration share: each step samples a group for each of
    ``config.batch_size`` prompts with the model as it is, computes the answers' token
    log-probabilities, and takes one step on ``loss_of(samples, logps, mask)``."""
    task.encode(prompts, model.config.context_length)  # an empty task or a prompt that does not fit: an error now
    if val_prompts is not None:
        check_held_out(prompts, val_prompts)
    disable_dropout(model)
    generator = torch.Generator().manual_seed(sampling.seed)
    history, losses = RLHistory(), []

    def batch_loss(chosen: Sequence[int]) -> torch.Tensor:
        samples = sample_answers(model, task, [prompts[i] for i in chosen], sampling.group_size,
                                 sampling.temperature, generator)  # fmt: skip
        logps, mask = token_logprobs(model, samples.encoded(), task.eos_id, model.config.context_length)  # (Q·G, T)
        loss = loss_of(samples, logps, mask)
        history.step_reward.append(samples.rewards.mean().item())
        history.zero_contrast.append(samples.zero_contrast())
        history.all_right.append((samples.rewards >= task.solved_at).all(dim=1).float().mean().item())
        losses.append(loss.item())
        return loss

    def record(step: int) -> None:
        since = len(losses)
        history.steps.append(step)
        history.train_loss.append(sum(losses) / since)
        history.train_accuracy.append(sum(history.step_reward[-since:]) / since)
        losses.clear()
        if val_prompts:
            history.val_accuracy.append(greedy_pass_at_1(model, task, val_prompts))

    history.seconds = fine_tune(model, len(prompts), batch_loss, config, record, progress)
    return history


def train_grpo(
    model: GPT,
    task: RewardTask,
    prompts: Sequence[str],
    config: FineTuneConfig,
    grpo: GRPOConfig,
    reference: nn.Module | None = None,
    val_prompts: Sequence[str] | None = None,
    progress: bool | None = None,
) -> RLHistory:
    """Train ``model`` by GRPO on ``prompts``: each step samples ``grpo.group_size`` answers to
    each of ``config.batch_size`` prompts, scores them, and takes one step on :func:`grpo_loss`
    (one step per batch of samples, as TRL by default: ρ = 1, so the clip never acts here).
    Dropout is switched off. ``reference``: the frozen model of the KL term (needed when β > 0)."""
    if grpo.beta > 0 and reference is None:
        raise ValueError("beta > 0 needs a frozen reference model")

    def loss_of(samples: Samples, logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        advantages = group_advantages(samples.rewards, grpo.scale_rewards).flatten().to(logps.device)  # (Q·G,)
        reference_logps = None
        if grpo.beta > 0:
            with torch.no_grad(), evaluating(reference):
                reference_logps, _ = token_logprobs(
                    reference, samples.encoded(), task.eos_id, model.config.context_length
                )
        return grpo_loss(logps, logps.detach(), advantages, mask, reference_logps, grpo.beta, grpo.epsilon)

    return _learn_from_samples(model, task, prompts, config, grpo, loss_of, val_prompts, progress)


def train_expert_iteration(
    model: GPT,
    task: RewardTask,
    prompts: Sequence[str],
    config: FineTuneConfig,
    sampling: SamplingConfig,
    val_prompts: Sequence[str] | None = None,
    progress: bool | None = None,
) -> RLHistory:
    """Expert iteration (rejection sampling fine-tuning): each step samples answers as GRPO does,
    keeps those the checker calls right (reward >= ``task.solved_at``), and takes one supervised
    step on them (:func:`kept_answers_loss`). Wrong answers are ignored, not pushed down."""

    def loss_of(samples: Samples, logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = (samples.rewards >= task.solved_at).flatten().to(logps.device)  # (Q·G,)
        return kept_answers_loss(logps, mask, keep)

    return _learn_from_samples(model, task, prompts, config, sampling, loss_of, val_prompts, progress)


def right_wrong_pairs(samples: Samples, solved_at: float = 1.0) -> list[tuple[Encoded, Encoded]]:
    """Preference pairs from a model's own samples, for DPO: for each prompt whose group holds a
    right answer (reward >= ``solved_at``) and a wrong one, the first right answer is chosen and
    the first wrong one rejected, both encoded after the prompt. A group without contrast gives none."""
    pairs = []
    for ids, group, rewards in zip(samples.prompt_ids, samples.completions, samples.rewards.tolist()):
        right = [c for c, r in zip(group, rewards) if r >= solved_at]
        wrong = [c for c, r in zip(group, rewards) if r < solved_at]
        if right and wrong:
            pairs.append(((ids + right[0], len(ids)), (ids + wrong[0], len(ids))))
    return pairs
