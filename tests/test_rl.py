"""Rewards a program checks (chapter 13): group sampling, group-relative advantages and the GRPO
objective, against TRL's GRPOTrainer on the same numbers and against hand-computed cases."""

import inspect
import math
import sys
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from course_lib.finetuning import FineTuneConfig
from course_lib.pretrained import load_pretrained
from course_lib.rl import (
    GRPOConfig,
    contains_reward,
    decode_answer,
    exact_reward,
    group_advantages,
    grpo_loss,
    kl_estimate,
    pass_at_1,
    rewards_of,
    sample_group,
    sampled_rewards,
    train_grpo,
)

# The reference: trl 1.16, a test-only dependency that needs Python 3.11 or newer. Where it can be
# installed (CI included) it must be: an import error there is a failure, not a skip.
if sys.version_info >= (3, 11):
    import trl.trainer.grpo_trainer as trl_grpo
    import trl.trainer.utils as trl_utils
needs_trl = pytest.mark.skipif(sys.version_info < (3, 11), reason="trl 1.16 needs Python 3.11 or newer")


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only waits


# -- advantages ------------------------------------------------------------------------------------


def trl_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """TRL 1.16's GRPOTrainer (scale_rewards="group", one reward function): these lines of
    _generate_and_score_completions, with its own nanstd. The test below checks they are still
    TRL's."""
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    std_rewards = trl_utils.nanstd(rewards.view(-1, num_generations), dim=1)
    std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    advantages = rewards - mean_grouped_rewards
    return advantages / (std_rewards + 1e-4)


@needs_trl
def test_the_advantage_lines_are_trls():
    source = inspect.getsource(trl_grpo.GRPOTrainer._generate_and_score_completions)
    for line in (
        "mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)",
        "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)",
        "advantages = rewards - mean_grouped_rewards",
        "advantages = advantages / (std_rewards + 1e-4)",
    ):
        assert line in source


@needs_trl
@pytest.mark.parametrize("group_size", [2, 4, 8])
def test_group_advantages_match_trl(group_size, generator):
    rewards = torch.randint(0, 2, (5, group_size), generator=generator).float()
    rewards[0] = torch.rand(group_size, generator=generator)  # a real-valued reward too
    expected = trl_advantages(rewards.flatten(), group_size)
    assert torch.allclose(group_advantages(rewards).flatten(), expected, atol=1e-6)


def test_group_advantages_by_hand():
    # all-equal rewards: nothing to learn from that group, whatever the value
    assert torch.equal(group_advantages(torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])), torch.zeros(2, 3))
    # one right answer out of four: mean 0.25, std sqrt(0.25) = 0.5 (Bessel: 0.75 / 3)
    advantages = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    assert torch.allclose(advantages, torch.tensor([[1.5, -0.5, -0.5, -0.5]]), atol=1e-3)
    assert torch.allclose(group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), scale=False),
                          torch.tensor([[0.75, -0.25, -0.25, -0.25]]))  # fmt: skip
    assert abs(group_advantages(torch.tensor([[3.0, 5.0, 10.0]])).sum().item()) < 1e-5  # they sum to zero


def test_group_advantages_refuse_bad_input():
    with pytest.raises(ValueError, match="group of 1 answer has no baseline"):
        group_advantages(torch.ones(4, 1))
    with pytest.raises(ValueError, match="questions, answers per question"):
        group_advantages(torch.ones(8))


# -- the GRPO objective ----------------------------------------------------------------------------


def trl_grpo_loss(logps, old_logps, advantages, mask, reference_logps, beta, epsilon):
    """TRL 1.16's GRPOTrainer._compute_loss (loss_type "grpo", token-level ratios) on given
    per-token log-probabilities: the model's forward is replaced by one returning them."""
    accelerator = SimpleNamespace(
        gather=lambda x: x, gather_for_metrics=lambda x: x, reduce=lambda x, reduction="sum": x
    )
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logps, torch.zeros_like(logps), None),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token", beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None), loss_type="grpo", epsilon_low=epsilon,
        epsilon_high=epsilon, use_vllm=False, model=SimpleNamespace(training=False), aux_loss_enabled=False,
        _entropy_bonus_enabled=False, current_gradient_accumulation_steps=1, accelerator=accelerator,
        _metrics=defaultdict(lambda: defaultdict(list)),
    )  # fmt: skip
    B, T = logps.shape
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long), "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask.long(),
        "advantages": advantages, "old_per_token_logps": old_logps, "ref_per_token_logps": reference_logps,
    }  # fmt: skip
    return trl_grpo.GRPOTrainer._compute_loss(trainer, None, inputs)


@needs_trl
@pytest.mark.parametrize("beta", [0.0, 0.04, 0.5])
@pytest.mark.parametrize("epsilon", [0.2, 0.05])
def test_grpo_loss_matches_trl(beta, epsilon, generator):
    B, T = 6, 5
    logps = -torch.rand(B, T, generator=generator) * 3
    old_logps = logps + 0.3 * torch.randn(B, T, generator=generator)  # ratios on both sides of the clip range
    reference_logps = logps + 0.5 * torch.randn(B, T, generator=generator)
    advantages = torch.randn(B, generator=generator)
    mask = torch.ones(B, T)
    mask[1, 3:] = 0  # answers of different lengths
    mask[4, 1:] = 0
    expected = trl_grpo_loss(logps, old_logps, advantages, mask, reference_logps, beta, epsilon)
    got = grpo_loss(logps, old_logps, advantages, mask.bool(), reference_logps, beta, epsilon)
    assert torch.allclose(got, expected, atol=1e-6)


def test_grpo_loss_by_hand():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]]).bool()
    logps = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.1, 0.3, 0.6]]))
    advantages = torch.tensor([1.0, -1.0])
    # on-policy (ratio 1): the loss is minus the mean advantage (0 here)
    assert abs(grpo_loss(logps, logps, advantages, mask).item()) < 1e-7
    # ratio 1.5 with A = +1 is clipped to 1.2; ratio 0.5 with A = -1 is clipped to 0.8
    old = logps - torch.log(torch.tensor([[1.5, 1.5, 1.5], [0.5, 0.5, 0.5]]))
    expected = (-1.2 + 0.8) / 2
    assert math.isclose(grpo_loss(logps, old, advantages, mask).item(), expected, rel_tol=1e-5)
    # inside the clip range nothing is clipped
    old = logps - math.log(1.1)
    assert math.isclose(grpo_loss(logps, old, advantages, mask).item(), (-1.1 + 1.1) / 2, abs_tol=1e-6)


def test_grpo_gradient_is_the_advantage_weighted_log_likelihood():
    logps = torch.tensor([[-1.0, -2.0], [-0.5, -0.7]], requires_grad=True)
    advantages = torch.tensor([2.0, -1.0])
    grpo_loss(logps, logps.detach(), advantages, torch.ones(2, 2, dtype=torch.bool)).backward()
    # d/d logp of -mean_b(mean_t(ratio * A)) at ratio 1: -A / (T * B)
    assert torch.allclose(logps.grad, torch.tensor([[-0.5, -0.5], [0.25, 0.25]]))


def test_kl_estimate():
    a = torch.tensor([-1.0, -2.0, -0.1])
    assert torch.equal(kl_estimate(a, a), torch.zeros(3))
    assert bool((kl_estimate(a, a + torch.tensor([0.5, -0.5, 2.0])) > 0).all())


def test_grpo_loss_refuses_bad_input():
    x, mask = torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="one advantage per answer"):
        grpo_loss(x, x, torch.zeros(3), mask)
    with pytest.raises(ValueError, match="of one shape"):
        grpo_loss(x, torch.zeros(2, 4), torch.zeros(2), mask)
    with pytest.raises(ValueError, match="beta > 0 needs reference_logps"):
        grpo_loss(x, x, torch.zeros(2), mask, beta=0.1)


# -- rewards -----------------------------------------------------------------------------------------


def test_rewards_and_their_errors():
    example = {"instruction": "Which area?", "input": "", "output": "networking"}
    assert exact_reward(" networking ", example) == 1.0 and exact_reward("networking, text", example) == 0.0
    assert contains_reward("text, Networking, maths", example) == 1.0  # loose: listing options passes
    assert rewards_of(exact_reward, ["networking", "text"], example).tolist() == [1.0, 0.0]
    assert rewards_of(lambda text, e: text == e["output"], ["networking"], example).tolist() == [1.0]  # bool: 0/1
    for bad in ("1.0", None, float("nan"), [1.0]):
        with pytest.raises(TypeError, match="must return a finite number"):
            rewards_of(lambda text, e, bad=bad: bad, ["networking"], example)


# -- sampling and training ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    """The course tokenizer with a small random GPT of its vocabulary (fast to sample and train)."""
    from course_lib.model import GPT, GPTConfig

    _, tokenizer, _ = load_pretrained()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=1024, context_length=48, n_layers=1, n_heads=2, d_model=32))
    return model, tokenizer


def test_sample_group(small):
    model, tokenizer = small
    eos = tokenizer.special_tokens["<|endoftext|>"]
    prompt = tokenizer.encode("### Instruction:\nName it.\n\n### Response:\n")
    group = sample_group(model, prompt, 6, 8, eos, generator=torch.Generator().manual_seed(1))
    again = sample_group(model, prompt, 6, 8, eos, generator=torch.Generator().manual_seed(1))
    assert group == again and len(group) == 6
    assert all(1 <= len(c) <= 8 and (eos not in c or c.index(eos) == len(c) - 1) for c in group)
    assert decode_answer(tokenizer, tokenizer.encode(" hi ") + [eos, 5], eos) == "hi"
    with pytest.raises(ValueError, match="at least 2 answers"):
        sample_group(model, prompt, 1, 8, eos)
    with pytest.raises(ValueError, match="does not fit the context of 48"):
        sample_group(model, prompt, 4, 40, eos)


class Letters:
    """A stand-in tokenizer for fast training tests: one token per character, 32 of them (id 0 is
    end-of-text, ids 1..31 decode to letters), enough for the prompts of format_prompt."""

    special_tokens = {"<|endoftext|>": 0}

    def encode(self, text, allowed_special=None):
        return [1 + ord(c) % 31 for c in text]

    def decode(self, ids):
        return "".join(chr(ord("a") + (i - 1) % 26) if i else "" for i in ids)


QUESTIONS = [{"instruction": f"Say {word}.", "input": "", "output": word} for word in ("a", "b", "c", "d")]


def share_of_a(text, example):
    return text.count("a") / max(1, len(text))


def test_train_grpo_learns_a_reward_and_constant_rewards_change_nothing(tiny_gpt, same_weights):
    import copy

    model, tokenizer = tiny_gpt(0, vocab_size=32, context_length=48), Letters()
    config = FineTuneConfig(epochs=10, batch_size=2, lr=1e-2, warmup_steps=1, weight_decay=0.0, eval_every=10)
    grpo = GRPOConfig(group_size=8, max_new_tokens=6)

    # a constant reward: every advantage is 0, so (without weight decay) no weight moves
    still = copy.deepcopy(model)
    history = train_grpo(still, tokenizer, QUESTIONS, lambda text, e: 1.0, config, grpo, progress=False)
    assert same_weights(still, model) and history.train_loss == [0.0, 0.0]

    # a reward for the letter a: the mean reward of the sampled answers rises
    learner = copy.deepcopy(model)
    measured = []
    history = train_grpo(learner, tokenizer, QUESTIONS, share_of_a, config, grpo, evaluate=measured.append,
                         progress=False)  # fmt: skip
    assert history.steps == measured == [10, 20]
    assert history.train_accuracy[-1] > history.train_accuracy[0] + 0.1, history.train_accuracy

    passed, answers = pass_at_1(learner, tokenizer, QUESTIONS, exact_reward, max_new_tokens=4)
    assert 0 <= passed <= len(QUESTIONS) and len(answers) == len(QUESTIONS)
    with pytest.raises(ValueError, match="needs a frozen reference"):
        train_grpo(learner, tokenizer, QUESTIONS, exact_reward, config, GRPOConfig(beta=0.1), progress=False)
    with pytest.raises(ValueError, match="group_size must be at least 2"):
        GRPOConfig(group_size=1)


def test_train_grpo_with_a_kl_leash_stays_nearer_the_reference(tiny_gpt):
    import copy

    reference, tokenizer = tiny_gpt(0, vocab_size=32, context_length=48), Letters()
    config = FineTuneConfig(epochs=5, batch_size=2, lr=1e-2, warmup_steps=1, weight_decay=0.0, eval_every=10)
    drift = {}
    for beta in (0.0, 1.0):
        model = copy.deepcopy(reference)
        grpo = GRPOConfig(group_size=8, max_new_tokens=6, beta=beta)
        train_grpo(model, tokenizer, QUESTIONS, share_of_a, config, grpo, reference=reference, progress=False)
        drift[beta] = sum((p - q).norm() ** 2 for p, q in zip(model.parameters(), reference.parameters())).item()
    assert drift[1.0] < drift[0.0]


def test_sampled_rewards_score_each_sample_of_each_question(small):
    model, tokenizer = small
    questions = [{"instruction": "Hi.", "input": "", "output": "x"}, {"instruction": "Yo.", "input": "", "output": "y"}]
    seen = []

    def reward(text, example):
        seen.append((text, example["output"]))
        return float(len(seen) % 2)

    got = sampled_rewards(model, tokenizer, questions, reward, 3, 4, generator=torch.Generator().manual_seed(0))
    assert got.shape == (2, 3) and got.flatten().tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert [o for _, o in seen] == ["x"] * 3 + ["y"] * 3  # each question's samples scored against it
    again = sampled_rewards(model, tokenizer, questions, exact_reward, 3, 4, generator=torch.Generator().manual_seed(0))
    first = sampled_rewards(model, tokenizer, questions, exact_reward, 3, 4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again, first)  # seeded
    with pytest.raises(ValueError, match="at least one question"):
        sampled_rewards(model, tokenizer, [], exact_reward)
