"""Rewards a program checks (chapter 13): the addition task and its checkers, sampling and scoring,
group-relative advantages and the GRPO objective (against TRL's GRPOTrainer on the same numbers and
against hand-computed cases), GRPO and expert iteration on any task given as prompts and a reward."""

import inspect
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from course_lib.finetuning import FineTuneConfig
from course_lib.generation import generate
from course_lib.rl import (
    GRPOConfig,
    RewardTask,
    SamplingConfig,
    Scores,
    check_held_out,
    greedy_answers,
    group_advantages,
    grpo_loss,
    kept_answers_loss,
    kl_estimate,
    right_wrong_pairs,
    sample_answers,
    score,
    train_expert_iteration,
    train_grpo,
)
from course_lib.runtime import CPU_PROFILES, THREADS_ENV, cpu_profiles
from course_lib.tasks import (
    ADDITION_CHARACTERS,
    addition_answer,
    addition_example,
    addition_problems,
    addition_reward,
    loose_addition_reward,
)
from course_lib.tokenization import CharTokenizer

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
    for bad in (float("nan"), float("inf"), -float("inf")):
        rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        rewards[1, 0] = bad
        with pytest.raises(ValueError, match=rf"reward {bad} at question 1, answer 0: .* must be a finite number"):
            group_advantages(rewards)


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


# -- the addition task and its checkers -------------------------------------------------------------


def test_addition_problems_are_split_by_a_readable_rule():
    problems = addition_problems()
    assert len(problems.train) + len(problems.val) + len(problems.test) == 100 * 100
    assert len(problems.test) >= 1000 and not set(problems.test) & (set(problems.train) | set(problems.val))
    assert problems == addition_problems()  # the same split on every run and machine
    from course_lib.tasks import split_of

    assert all(split_of(p, 5, 15) == "test" for p in problems.test)
    assert len(addition_problems(max_operand=9).train) < 100
    with pytest.raises(ValueError, match="at least 9"):
        addition_problems(max_operand=5)


def test_an_addition_example_is_the_prompt_its_answer_and_the_end():
    ids, n = addition_example("37+45=", TOKENIZER.encode)
    assert TOKENIZER.decode(ids) == "37+45=28\n" and n == 6


def test_addition_answers_and_checkers():
    assert addition_answer("37+45=") == "28" and addition_answer("50+50=") == "001" and addition_answer("0+0=") == "0"
    assert addition_reward("37+45=", " 28\n") == 1.0
    for wrong in ("82", "2828", "028", "+28", "", "28 28"):
        assert addition_reward("37+45=", wrong) == 0.0, wrong
    assert loose_addition_reward("37+45=", "912833") == 1.0  # the loose checker pays a hedge
    assert loose_addition_reward("37+45=", "82") == 0.0
    for bad in ("37+45", "37-45=", "a+b=", "37+45=28"):
        with pytest.raises(ValueError, match="looks like '37\\+45='"):
            addition_answer(bad)


# -- the task, sampling and scoring ----------------------------------------------------------------


TOKENIZER = CharTokenizer(list(ADDITION_CHARACTERS))
END = TOKENIZER.stoi["\n"]
TASK = RewardTask(addition_reward, TOKENIZER, END, max_new_tokens=5)
PROMPTS = ["1+2=", "37+45=", "9+9=", "50+50="]


@pytest.fixture
def adder(tiny_gpt):
    """A random GPT of the addition task's 13 characters."""
    return tiny_gpt(0, vocab_size=len(ADDITION_CHARACTERS), context_length=16, n_layers=1)


def test_rewards_are_checked_numbers():
    assert TASK.rewards(["37+45=", "37+45="], ["28", "82"]).tolist() == [1.0, 0.0]
    as_bool = RewardTask(lambda p, a: a == "28", TOKENIZER, END)
    assert as_bool.rewards(["37+45="], ["28"]).tolist() == [1.0]  # a bool counts as 0 or 1
    assert RewardTask(lambda p, a: torch.tensor(0.5), TOKENIZER, END).rewards(["1+1="], ["2"]).tolist() == [0.5]
    for bad in ("1.0", None, float("nan"), [1.0]):
        with pytest.raises(TypeError, match="must return a finite number"):
            RewardTask(lambda p, a, bad=bad: bad, TOKENIZER, END).rewards(["1+1="], ["2"])
    with pytest.raises(TypeError, match="reward must be a function"):
        RewardTask("exact", TOKENIZER, END)
    assert TASK.text(TOKENIZER.encode("28") + [END] + TOKENIZER.encode("99")) == "28"  # cut at the end


def test_sample_answers_in_one_batch(adder):
    samples = sample_answers(adder, TASK, PROMPTS, 6, generator=torch.Generator().manual_seed(1))
    again = sample_answers(adder, TASK, PROMPTS, 6, generator=torch.Generator().manual_seed(1))
    assert samples.completions == again.completions and samples.rewards.shape == (4, 6)
    for prompt, group, texts in zip(PROMPTS, samples.completions, samples.texts):
        assert len(group) == 6 and all(1 <= len(c) <= 5 and (END not in c or c[-1] == END) for c in group)
        assert texts == [TASK.text(c) for c in group]
    # the greedy answers of a batch are each prompt's greedy answer alone
    alone = generate(adder, torch.tensor([TOKENIZER.encode(PROMPTS[1])]), 5, greedy=True, eos_id=END)[0, 6:]
    rewards, answers = greedy_answers(adder, TASK, PROMPTS)
    assert answers[1] == TASK.text(alone.tolist()) and rewards.shape == (4,)
    rows = samples.encoded()
    assert len(rows) == 24 and rows[6][1] == len(PROMPTS[1])
    assert rows[6][0][: rows[6][1]] == TOKENIZER.encode(PROMPTS[1])


def test_bad_tasks_are_refused(adder):
    with pytest.raises(ValueError, match="no prompts"):
        sample_answers(adder, TASK, [], 4)
    with pytest.raises(ValueError, match="does not fit the context of 16"):
        sample_answers(adder, RewardTask(addition_reward, TOKENIZER, END, max_new_tokens=12), PROMPTS, 4)
    with pytest.raises(ValueError, match="held-out prompts are also training prompts"):
        check_held_out(["1+2=", "3+4="], ["5+6=", "3+4="])
    config = FineTuneConfig(epochs=1, batch_size=2, eval_every=1)
    with pytest.raises(ValueError, match="held-out prompts are also training prompts"):
        train_grpo(adder, TASK, PROMPTS, config, GRPOConfig(), val_prompts=PROMPTS[:1], progress=False)
    with pytest.raises(ValueError, match="no prompts"):
        train_expert_iteration(adder, TASK, [], config, SamplingConfig(), progress=False)
    with pytest.raises(ValueError, match="group_size must be at least 2"):
        GRPOConfig(group_size=1)
    with pytest.raises(ValueError, match="needs a frozen reference"):
        train_grpo(adder, TASK, PROMPTS, config, GRPOConfig(beta=0.1), progress=False)


def test_scores_pass_at_k_by_hand():
    # 3 problems, 4 samples each: 0, 1 and 4 of them right
    sampled = torch.tensor([[0.0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1]])
    scores = Scores(torch.tensor([0.0, 1.0, 1.0]), ["9", "28", "4"], sampled)
    assert scores.right == 2 and scores.n == 3 and scores.solved_within() == 2
    assert math.isclose(scores.pass_at(1), (0 + 1 / 4 + 1) / 3)
    assert math.isclose(scores.pass_at(2), (0 + (1 - math.comb(3, 2) / math.comb(4, 2)) + 1) / 3)  # 1 - 3/6
    assert math.isclose(scores.pass_at(4), 2 / 3)
    mean, (low, high) = scores.sampled_pass_at_1()
    assert math.isclose(mean, 1.25 / 3) and low < mean < high
    assert math.isclose(scores.mean_length(), 4 / 3)
    with pytest.raises(ValueError, match="between 1 and the 4 samples"):
        scores.pass_at(5)


def test_score_is_seeded_and_counts_greedy_answers(adder):
    first, again = score(adder, TASK, PROMPTS, group_size=4), score(adder, TASK, PROMPTS, group_size=4)
    assert torch.equal(first.sampled, again.sampled) and first.answers == again.answers
    assert first.right == sum(addition_reward(p, a) for p, a in zip(PROMPTS, first.answers))
    assert first.sampled.shape == (4, 4)


def test_right_wrong_pairs():
    from course_lib.rl import Samples

    ids = [TOKENIZER.encode(p) for p in PROMPTS[:2]]
    completions = [[[1], [2], [3]], [[4], [5], [6]]]
    samples = Samples(PROMPTS[:2], ids, completions, [["a"] * 3] * 2, torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    pairs = right_wrong_pairs(samples)
    assert pairs == [((ids[0] + [2], len(ids[0])), (ids[0] + [1], len(ids[0])))]  # first right, first wrong
    assert samples.zero_contrast() == 0.5


def test_kept_answers_loss_is_the_mean_cross_entropy_of_the_kept_tokens():
    logps = torch.log(torch.tensor([[0.5, 0.25, 1.0], [0.1, 0.1, 0.1]]))
    mask = torch.tensor([[True, True, False], [True, True, True]])
    loss = kept_answers_loss(logps, mask, torch.tensor([True, False]))
    assert math.isclose(loss.item(), (math.log(2) + math.log(4)) / 2, rel_tol=1e-6)
    nothing = kept_answers_loss(logps.requires_grad_(), mask, torch.tensor([False, False]))
    nothing.backward()
    assert nothing.item() == 0.0 and torch.equal(logps.grad, torch.zeros(2, 3))


# -- training on any task: GRPO and expert iteration -------------------------------------------------


def first_digit_is_one(prompt, answer):
    """A toy reward any random model can earn sometimes: the answer starts with 1."""
    return 1.0 if answer.startswith("1") else 0.0


TOY = RewardTask(first_digit_is_one, TOKENIZER, END, max_new_tokens=3)
TRAIN = addition_problems(max_operand=9).train[:16]
VAL = addition_problems(max_operand=9).val


def test_train_grpo_learns_a_reward_and_constant_rewards_change_nothing(adder, same_weights):
    import copy

    config = FineTuneConfig(epochs=8, batch_size=4, lr=1e-2, warmup_steps=1, weight_decay=0.0, eval_every=16)
    still = copy.deepcopy(adder)  # a constant reward: every advantage is 0, so no weight moves
    history = train_grpo(still, RewardTask(lambda p, a: 1.0, TOKENIZER, END, 3), TRAIN, config, GRPOConfig(),
                         progress=False)  # fmt: skip
    assert same_weights(still, adder) and history.train_loss == [0.0, 0.0]
    assert history.zero_contrast == [1.0] * 32 and history.all_right == [1.0] * 32

    learner = copy.deepcopy(adder)
    history = train_grpo(learner, TOY, TRAIN, config, GRPOConfig(), val_prompts=VAL, progress=False)
    assert history.steps == [16, 32] and len(history.step_reward) == 32 and len(history.val_accuracy) == 2
    assert all(0 <= right <= same <= 1 for right, same in zip(history.all_right, history.zero_contrast))
    assert history.train_accuracy[-1] > history.train_accuracy[0] + 0.2, history.train_accuracy


def test_expert_iteration_learns_from_its_right_answers(adder):
    import copy

    config = FineTuneConfig(epochs=8, batch_size=4, lr=1e-2, warmup_steps=1, weight_decay=0.0, eval_every=16)
    learner = copy.deepcopy(adder)
    history = train_expert_iteration(learner, TOY, TRAIN, config, SamplingConfig(), progress=False)
    assert history.train_accuracy[-1] > history.train_accuracy[0] + 0.2, history.train_accuracy
    assert all(loss >= 0 for loss in history.train_loss)  # a cross-entropy


def test_train_grpo_with_a_kl_leash_stays_nearer_the_reference(adder):
    import copy

    config = FineTuneConfig(epochs=4, batch_size=4, lr=1e-2, warmup_steps=1, weight_decay=0.0, eval_every=16)
    drift = {}
    for beta in (0.0, 1.0):
        model = copy.deepcopy(adder)
        train_grpo(model, TOY, TRAIN, config, GRPOConfig(beta=beta), reference=adder, progress=False)
        drift[beta] = sum((p - q).norm() ** 2 for p, q in zip(model.parameters(), adder.parameters())).item()
    assert drift[1.0] < drift[0.0]


def test_nothing_is_built_off_the_models_device(adder):
    """A model on the meta device fails at the first tensor built elsewhere: sampling and the losses
    must build theirs on the model's device (a CPU hides that bug; a GPU would not)."""
    from course_lib.preference import token_logprobs

    meta = adder.to("meta")
    rows = [(TOKENIZER.encode("1+2=3\n"), 4), (TOKENIZER.encode("9+9=81\n"), 4)]
    logps, mask = token_logprobs(meta, rows, END, 16)
    assert logps.device.type == "meta" and mask.device.type == "meta"
    loss = kept_answers_loss(logps, mask, torch.tensor([True, False], device="meta"))
    assert loss.device.type == "meta"


# -- chapter 13's start, on every kernel path -------------------------------------------------------

START = """
import json
from course_lib.rl import RewardTask, addition_start, greedy_pass_at_1
from course_lib.runtime import start
from course_lib.tasks import ADDITION_CHARACTERS, addition_problems, addition_reward
from course_lib.tokenization import CharTokenizer

start(seed=0)
tokenizer = CharTokenizer(list(ADDITION_CHARACTERS))
task = RewardTask(addition_reward, tokenizer, tokenizer.stoi["\\n"], max_new_tokens=8)
problems = addition_problems()
model, history = addition_start(task, problems, progress=False)
print(json.dumps({"steps": history.steps, "val": history.val_accuracy,
                  "test": greedy_pass_at_1(model, task, problems.test)}))
"""


@pytest.fixture(scope="module")
def profiles():
    return cpu_profiles()


@pytest.mark.parametrize("profile", CPU_PROFILES)
def test_chapter_13_starts_at_partial_skill_on_every_cpu_profile(profile, profiles):
    """Notebook 13 rests on a model that is right about half the time. Stopped at a fixed step, the
    supervised run landed anywhere from 0.36 to 0.76 depending on the CPU's float32 kernels; stopped
    on the criterion it must land in the band on each CPU profile this machine can act as (as the
    notebook runs: 2 threads, seed 0). The step it stops at is the kernels' to choose (from 370 to
    570 on the CPUs tried): the notebook prints it, and promises only what is asserted here."""
    if profile not in profiles:
        pytest.skip(f"this CPU cannot act as the {profile} profile (it lacks the instructions to hold back)")
    env = {**os.environ, **CPU_PROFILES[profile], THREADS_ENV: "2"}
    out = subprocess.run([sys.executable, "-c", START], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    start = json.loads(out.stdout.strip().splitlines()[-1])
    steps, val = start["steps"], start["val"]
    stop = {"step": steps[-1], "val": val[-1], "test": start["test"]}
    assert val[-1] >= 0.5 and all(v < 0.5 for v in val[:-1]), stop  # the first evaluation at 0.5 or more
    assert val[-1] < 0.7, stop  # just above it: partial skill, not more
    assert steps[-1] < 1000, stop  # by the criterion, not by running out of the cosine's 1,000 steps
    assert 0.4 <= start["test"] <= 0.7, stop  # and the test problems agree: partial skill
