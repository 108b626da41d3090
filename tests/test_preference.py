"""Preferences (chapter 13): sequence log-probabilities, the DPO loss and its NLL term, against TRL's
DPOTrainer on the same numbers and against hand-computed cases."""

import math
import sys
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from course_lib.finetuning import FineTuneConfig
from course_lib.preference import (
    PairScores,
    compare_pairs,
    disable_dropout,
    dpo_loss,
    score_pairs,
    sequence_logprobs,
    token_logprobs,
    train_dpo,
)

# The reference: trl 1.16, a test-only dependency that needs Python 3.11 or newer. Where it can be
# installed (CI included) it must be: an import error there is a failure, not a skip.
if sys.version_info >= (3, 11):
    import trl.trainer.dpo_trainer as trl_dpo
    import trl.trainer.utils as trl_utils
needs_trl = pytest.mark.skipif(sys.version_info < (3, 11), reason="trl 1.16 needs Python 3.11 or newer")


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only waits


PAD = 0
# (prompt + answer + end-of-text, prompt length): answers of different lengths after prompts of different lengths
ENCODED = [([3, 4, 5, 6, 7, PAD], 3), ([8, 9, 10, PAD], 2), ([11, 12, 13, 14, 15, 16, 17, PAD], 5)]


def trl_sequence_logprobs(model, encoded):
    """What TRL's fused LM head returns, summed: labels are the input ids outside the completion
    masked with -100, shifted by one; log-probabilities by trl's own selective_log_softmax."""
    length = max(len(ids) for ids, _ in encoded)
    input_ids = torch.full((len(encoded), length), PAD)
    completion_mask = torch.zeros(len(encoded), length, dtype=torch.long)
    for k, (ids, prompt_length) in enumerate(encoded):
        input_ids[k, : len(ids)] = torch.tensor(ids)
        completion_mask[k, prompt_length : len(ids)] = 1
    labels = input_ids.masked_fill(completion_mask == 0, -100)[:, 1:]
    with torch.no_grad():
        logits = model(input_ids)[:, :-1]  # the positions that predict labels 1..L-1
    per_token = trl_utils.selective_log_softmax(logits, labels.clamp(min=0)).masked_fill(labels == -100, 0.0)
    return per_token.sum(dim=1), per_token, completion_mask


@needs_trl
def test_sequence_logprobs_match_trl_and_mask_the_prompt(tiny_gpt):
    model = tiny_gpt(0).eval()
    expected, _, completion_mask = trl_sequence_logprobs(model, ENCODED)
    with torch.no_grad():
        got = sequence_logprobs(model, ENCODED, PAD)
        logps, mask = token_logprobs(model, ENCODED, PAD)
    assert torch.allclose(got, expected, atol=1e-5)
    # one answer token per position of the completion, the closing end-of-text included
    assert mask.sum(dim=1).tolist() == completion_mask.sum(dim=1).tolist() == [3, 2, 3]
    assert bool((logps[~mask] == 0).all()) and bool((logps[mask] < 0).all())


def test_sequence_logprobs_do_not_depend_on_the_batch(tiny_gpt):
    model = tiny_gpt(1).eval()
    with torch.no_grad():
        together = sequence_logprobs(model, ENCODED, PAD)
        alone = torch.cat([sequence_logprobs(model, [e], PAD) for e in ENCODED])
    assert torch.allclose(together, alone, atol=1e-5)


def fake_trl_self(beta):
    """The attributes DPOTrainer._compute_loss reads, for the standard ("sigmoid") DPO loss with
    the reference's log-probabilities given (precompute_ref_logps)."""
    accelerator = SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x, gather=lambda x: x)
    return SimpleNamespace(
        model=SimpleNamespace(training=False), accelerator=accelerator, aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=["sigmoid"], loss_weights=[1.0],
        beta=beta, label_smoothing=0.0, use_weighting=False, _metrics=defaultdict(lambda: defaultdict(list)),
        _total_train_tokens=0, _tp_size=1,
    )  # fmt: skip


def trl_dpo_loss(per_token, completion_mask, ref_chosen, ref_rejected, beta):
    """TRL 1.16's DPOTrainer._compute_loss on given per-token log-probabilities (rows: chosen
    answers, then rejected ones, as TRL batches them)."""
    shifted = completion_mask[:, 1:]

    def model(**kwargs):
        return SimpleNamespace(
            log_probs=per_token, entropy=torch.zeros_like(per_token), mean_logits=torch.zeros_like(per_token),
            is_top1=torch.zeros_like(shifted, dtype=torch.bool),
        )  # fmt: skip

    inputs = {
        "input_ids": torch.zeros_like(completion_mask),
        "attention_mask": torch.ones_like(completion_mask),
        "completion_mask": completion_mask,
        "ref_chosen_logps": ref_chosen,
        "ref_rejected_logps": ref_rejected,
    }
    trainer = fake_trl_self(beta)
    loss = trl_dpo.DPOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)
    return loss, trainer._metrics["eval"]


@needs_trl
@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_dpo_loss_matches_trl(tiny_gpt, beta, generator):
    model = tiny_gpt(2).eval()
    chosen = ENCODED
    rejected = [([3, 4, 5, 9, PAD], 3), ([8, 9, 12, 12, 12, PAD], 2), ([11, 12, 13, 14, 15, 20, PAD], 5)]
    both, per_token, completion_mask = trl_sequence_logprobs(model, chosen + rejected)
    noise = torch.randn(6, generator=generator)
    ref_chosen, ref_rejected = both[:3] + noise[:3], both[3:] + noise[3:]
    expected, metrics = trl_dpo_loss(per_token, completion_mask, ref_chosen, ref_rejected, beta)

    with torch.no_grad():
        logps = sequence_logprobs(model, chosen + rejected, PAD)
    loss, chosen_rewards, rejected_rewards = dpo_loss(logps[:3], logps[3:], ref_chosen, ref_rejected, beta)
    assert torch.allclose(loss, expected, atol=1e-5)
    assert math.isclose(chosen_rewards.mean().item(), metrics["rewards/chosen"][0], abs_tol=1e-5)
    assert math.isclose(rejected_rewards.mean().item(), metrics["rewards/rejected"][0], abs_tol=1e-5)
    margin = (chosen_rewards - rejected_rewards).mean().item()
    assert math.isclose(margin, metrics["rewards/margins"][0], abs_tol=1e-5)


def test_dpo_loss_by_hand():
    logps = torch.tensor([-3.0, -7.5])
    # the policy is the reference: every implicit reward is 0 and the loss is -log σ(0) = log 2
    loss, chosen, rejected = dpo_loss(logps, logps + 1, logps, logps + 1, beta=0.1)
    assert math.isclose(loss.item(), math.log(2), rel_tol=1e-6)
    assert bool((chosen == 0).all() and (rejected == 0).all())
    # one pair: log-ratios +1 (chosen) and -1 (rejected), beta 0.5 -> -log σ(0.5 * 2)
    one = dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]), beta=0.5)
    assert math.isclose(one[0].item(), -math.log(1 / (1 + math.exp(-1.0))), rel_tol=1e-6)
    assert one[1].item() == 0.5 and one[2].item() == -0.5
    # beta -> 0: whatever the log-probabilities, the loss tends to log 2
    far = dpo_loss(torch.tensor([-1.0]), torch.tensor([-30.0]), torch.tensor([-20.0]), torch.tensor([-2.0]), beta=1e-7)
    assert math.isclose(far[0].item(), math.log(2), rel_tol=1e-5)
    # a large margin in the right direction: the loss vanishes; in the wrong direction it grows linearly
    assert dpo_loss(torch.tensor([0.0]), torch.tensor([-100.0]), torch.tensor([0.0]), torch.tensor([0.0]))[0] < 1e-4
    wrong = dpo_loss(torch.tensor([-100.0]), torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([0.0]), beta=1.0)
    assert math.isclose(wrong[0].item(), 100.0, rel_tol=1e-4)


def test_dpo_gradient_raises_the_chosen_and_lowers_the_rejected():
    chosen, rejected = torch.tensor([-2.0], requires_grad=True), torch.tensor([-2.0], requires_grad=True)
    dpo_loss(chosen, rejected, torch.tensor([-2.0]), torch.tensor([-2.0]), beta=0.1)[0].backward()
    # at the start d loss / d log π = ∓ β σ(0) = ∓ 0.05
    assert math.isclose(chosen.grad.item(), -0.05, rel_tol=1e-5)
    assert math.isclose(rejected.grad.item(), 0.05, rel_tol=1e-5)


def test_dpo_loss_refuses_bad_input():
    three, two = torch.zeros(3), torch.zeros(2)
    with pytest.raises(ValueError, match="four \\(N,\\) tensors"):
        dpo_loss(three, two, three, three)
    with pytest.raises(ValueError, match="four \\(N,\\) tensors"):
        dpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="at least one pair"):
        dpo_loss(*(torch.zeros(0),) * 4)
    with pytest.raises(ValueError, match="beta must be positive"):
        dpo_loss(three, three, three, three, beta=0.0)


def test_score_pairs_and_compare_pairs(tiny_gpt):
    model = tiny_gpt(3).eval()
    pairs = [(ENCODED[0], ENCODED[1]), (ENCODED[2], ENCODED[0])]
    chosen, rejected = score_pairs(model, pairs, PAD, batch_size=1)
    with torch.no_grad():
        assert torch.allclose(chosen, sequence_logprobs(model, [ENCODED[0], ENCODED[2]], PAD), atol=1e-5)
    scores = compare_pairs(model, (chosen, rejected), pairs, PAD)
    assert isinstance(scores, PairScores) and scores.margin == 0.0  # the model is its own reference
    assert scores.prefers_chosen == int((chosen > rejected).sum())
    with pytest.raises(ValueError, match="2 pairs but 1 reference"):
        compare_pairs(model, (chosen[:1], rejected[:1]), pairs, PAD)


def test_train_dpo_learns_the_preference_and_leaves_the_reference_alone(tiny_gpt, same_weights):
    prompts = [[1, 2, k] for k in range(3, 11)]
    pairs = [((p + [20, 21, PAD], 3), (p + [30, 31, PAD], 3)) for p in prompts]  # always prefer 20 21
    policy, reference = tiny_gpt(4, dropout=0.1), tiny_gpt(4, dropout=0.1)
    config = FineTuneConfig(epochs=6, batch_size=4, lr=3e-3, warmup_steps=2, eval_every=6)
    history = train_dpo(policy, reference, pairs[:6], pairs[6:], PAD, config, beta=0.5, progress=False)
    assert same_weights(reference, tiny_gpt(4, dropout=0.1))
    assert history.steps == [6, 12] and len(history.val_accuracy) == 2
    assert history.val_loss[-1] < math.log(2) - 0.2 and history.val_accuracy[-1] == 1.0
    assert all(m.p == 0.0 for m in policy.modules() if isinstance(m, torch.nn.Dropout))
    with pytest.raises(ValueError, match="training and validation pairs"):
        train_dpo(policy, reference, pairs, [], PAD, config)


def test_disable_dropout(tiny_gpt):
    model = disable_dropout(tiny_gpt(0, dropout=0.5)).train()
    x = torch.randint(0, 40, (2, 8))
    assert torch.equal(model(x), model(x))
    assert F.dropout is not None  # the functional form is untouched


def test_the_nll_term_is_the_chosen_answers_cross_entropy(tiny_gpt):
    """With nll_weight w, a step's loss is DPO's plus w times the mean cross-entropy of the chosen
    answers' tokens (as TRL's rpo_alpha): checked on the first step, where the policy is the
    reference and DPO's part is log 2."""
    prompts = [[1, 2, k] for k in range(3, 7)]
    pairs = [((p + [20, 21, PAD], 3), (p + [30, PAD], 3)) for p in prompts]
    reference = tiny_gpt(5)
    with torch.no_grad():
        logps, mask = token_logprobs(reference, [c for c, _ in pairs], PAD)
    cross_entropy = (-logps.sum() / mask.sum()).item()
    config = FineTuneConfig(epochs=1, batch_size=4, lr=1e-9, warmup_steps=1, eval_every=1)
    for weight in (0.0, 2.0):
        history = train_dpo(tiny_gpt(5), reference, pairs, pairs, PAD, config, beta=0.1, nll_weight=weight,
                            progress=False)  # fmt: skip
        assert math.isclose(history.train_loss[0], math.log(2) + weight * cross_entropy, rel_tol=1e-5)
    with pytest.raises(ValueError, match="nll_weight must be 0 or more"):
        train_dpo(tiny_gpt(5), reference, pairs, pairs, PAD, config, nll_weight=-1.0)


def test_the_nll_term_keeps_the_chosen_answers_likely(tiny_gpt):
    """DPO alone may lower the chosen answers while it lowers the rejected ones more; with the NLL
    term the chosen answers' log-probability ends higher."""
    prompts = [[1, 2, k] for k in range(3, 11)]
    pairs = [((p + [20, 21, PAD], 3), (p + [30, 31, PAD], 3)) for p in prompts]
    reference = tiny_gpt(6)
    config = FineTuneConfig(epochs=10, batch_size=4, lr=3e-3, warmup_steps=1, eval_every=20)
    chosen = {}
    for weight in (0.0, 1.0):
        policy = tiny_gpt(6)
        train_dpo(policy, reference, pairs, pairs, PAD, config, beta=0.1, nll_weight=weight, progress=False)
        chosen[weight] = score_pairs(policy, pairs, PAD)[0].mean().item()
    assert chosen[1.0] > chosen[0.0] + 0.5, chosen
