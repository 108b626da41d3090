"""Speculative decoding: greedy output identical to the target's, the acceptance rule keeping the
target's distribution (tested statistically with fixed seeds), prompt lookup, the speed-up
formula, and bad input."""

import itertools
import math

import pytest
import torch

from course_lib.generation import generate
from course_lib.model import GPT, GPTConfig
from course_lib.speculative import (
    ModelDraft,
    PromptLookupDraft,
    accept_draft,
    expected_tokens_per_pass,
    predicted_speedup,
    prompt_lookup,
    residual_distribution,
    speculative_generate,
    step_costs,
)

SMALL = dict(vocab_size=12, context_length=48, n_layers=1, n_heads=2, d_model=16)


def gpt(seed: int, **config) -> GPT:
    """A float64 GPT: near-ties between two logits, which float32 could break differently in a
    batched and a one-token pass, are then too rare to matter."""
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**SMALL, **config})).double().eval()


def greedy(model, prompt, n, eos_id=None):
    out = generate(model, torch.tensor([prompt]), n, greedy=True, eos_id=eos_id)
    return out[0, len(prompt) :].tolist()


# == by hand ===============================================================================


def test_residual_distribution_by_hand():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.5, 0.3])
    assert torch.allclose(residual_distribution(p, q), torch.tensor([1.0, 0.0, 0.0]))
    p, q = torch.tensor([0.4, 0.4, 0.2]), torch.tensor([0.1, 0.2, 0.7])
    assert torch.allclose(residual_distribution(p, q), torch.tensor([0.6, 0.4, 0.0]))
    assert torch.equal(residual_distribution(p, p), p)  # nothing left over: never drawn from


def test_prompt_lookup_by_hand():
    assert prompt_lookup([1, 2, 3, 4, 1, 2], 2) == [3, 4]  # "1 2" occurred before: copy what followed
    assert prompt_lookup([1, 2, 3, 9, 2, 3, 7, 8, 2, 3], 3) == [7, 8, 2]  # the most recent occurrence
    assert prompt_lookup([5, 1, 2, 6, 9, 1, 2], 4, max_ngram=2) == [6, 9, 1, 2]
    assert prompt_lookup([7, 3, 4, 8, 1, 3, 4], 1, max_ngram=3) == [8]  # "1 3 4" is new, "3 4" is not
    assert prompt_lookup([1, 2, 3], 2) == []  # nothing repeats
    assert prompt_lookup([4, 4, 4], 2) == [4]  # the match may overlap the end
    assert prompt_lookup([1, 2, 1, 2], 0) == []


def test_speedup_formula():
    assert expected_tokens_per_pass(0.0, 4) == 1.0 and expected_tokens_per_pass(1.0, 4) == 5.0
    assert math.isclose(expected_tokens_per_pass(0.5, 2), 1.75)
    assert math.isclose(predicted_speedup(0.8, 4, 0.1), (1 - 0.8**5) / 0.2 / 1.4)
    assert math.isclose(predicted_speedup(0.5, 2, 0.0, 1.25), 1.4)
    with pytest.raises(ValueError, match="acceptance_rate"):
        expected_tokens_per_pass(1.5, 2)


# == greedy: exactly the target's tokens ===================================================


@pytest.mark.parametrize("seed, k", [(0, 1), (1, 3), (2, 4), (3, 6)])
def test_greedy_output_is_the_targets_with_a_model_draft(seed, k, one_thread):
    target, draft = gpt(seed, n_layers=2, d_model=32), gpt(seed + 100)
    prompt = torch.randint(0, 12, (5,), generator=torch.Generator().manual_seed(seed)).tolist()
    out, stats = speculative_generate(target, ModelDraft(draft), prompt, 30, k=k, greedy=True)
    assert out == greedy(target, prompt, 30)
    assert stats.new_tokens == len(out) == sum(stats.per_pass) == 30
    assert stats.accepted <= stats.examined <= stats.proposed and stats.passes == len(stats.per_pass)
    assert 1 <= max(stats.per_pass) <= k + 1


def test_greedy_with_prompt_lookup_and_an_end_of_text(one_thread):
    target = gpt(5, n_layers=2, d_model=32)
    prompt = [3, 4, 5, 3, 4, 5, 3, 4]
    reference = greedy(target, prompt, 25)
    out, stats = speculative_generate(target, PromptLookupDraft(), prompt, 25, k=3, greedy=True)
    assert out == reference
    eos = reference[6]
    out, _ = speculative_generate(target, PromptLookupDraft(), prompt, 25, k=3, greedy=True, eos_id=eos)
    assert out == greedy(target, prompt, 25, eos_id=eos) and out[-1] == eos


def test_a_draft_identical_to_the_target_is_always_accepted(one_thread):
    target = gpt(7)
    out, stats = speculative_generate(target, ModelDraft(gpt(7)), [1, 2, 3], 20, k=4, greedy=True)
    assert stats.acceptance_rate == 1.0 and stats.per_pass == [5, 5, 5, 5]
    assert out == greedy(target, [1, 2, 3], 20)


# == sampling: the target's distribution, whatever the draft ===============================


def test_accept_draft_keeps_the_target_distribution():
    """One round of k = 2 with fixed distributions (a toy target and draft that ignore the context):
    the first token produced must follow p[0] whatever q proposes, and when the first draft token
    survives, the second token must follow p[1]. 20,000 rounds drawn from a fixed seed; the
    tolerance is 5 standard errors of each frequency (a deviation of that size has a chance of about
    1 in 1.7 million per cell; the seed makes the run itself repeatable)."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [0.1, 0.1, 0.3, 0.3, 0.2], [0.2, 0.2, 0.2, 0.2, 0.2]])
    q = torch.tensor([[0.1, 0.1, 0.1, 0.3, 0.4], [0.6, 0.1, 0.1, 0.1, 0.1]])
    n = 20_000
    first, second = torch.zeros(5), torch.zeros(5)
    for _ in range(n):
        draft = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(2)]
        accepted, following = accept_draft(p, q, draft, g)
        produced = draft[:accepted] + [following]
        first[produced[0]] += 1
        if len(produced) > 1:
            second[produced[1]] += 1
    for counts, target in ((first, p[0]), (second, p[1])):
        m = counts.sum()
        frequency = counts / m
        tolerance = 5 * (target * (1 - target) / m).sqrt() + 1e-9
        assert ((frequency - target).abs() <= tolerance).all(), (frequency, target)
    assert first[4] == 0  # a token the target never produces is never produced
    naive = q[0]  # accepting every draft would follow q: the test tells that apart by far
    assert ((naive - p[0]).abs() > 10 * (p[0] * (1 - p[0]) / n).sqrt()).any()


def test_speculative_sampling_follows_the_targets_joint_distribution(one_thread):
    """Two new tokens from tiny GPTs (vocabulary 4): the frequency of each of the 16 pairs against
    the target's exact probability, from 4,000 seeded runs; 5 standard errors per cell."""
    config = dict(vocab_size=4, context_length=16, d_model=16)
    target, draft = gpt(11, **config), gpt(12, **config)
    with torch.no_grad():  # far from uniform, and far from each other
        target.transformer.wte.weight.mul_(4)
        draft.transformer.wte.weight.mul_(4)
    prompt = [1, 3, 0]
    with torch.no_grad():
        first = torch.softmax(target(torch.tensor([prompt]))[0, -1].float(), -1)  # (4,)
        proposed = torch.softmax(draft(torch.tensor([prompt]))[0, -1].float(), -1)
        exact = {
            (a, b): float(first[a] * torch.softmax(target(torch.tensor([prompt + [a]]))[0, -1].float(), -1)[b])
            for a, b in itertools.product(range(4), repeat=2)
        }
    assert (first - proposed).abs().sum() / 2 > 0.2  # a rule that kept the draft's tokens would fail
    g, n = torch.Generator().manual_seed(0), 4000
    counts = dict.fromkeys(exact, 0)
    drafted = ModelDraft(draft)
    for _ in range(n):
        out, _ = speculative_generate(target, drafted, prompt, 2, k=2, generator=g)
        counts[tuple(out)] += 1
    for pair, probability in exact.items():
        tolerance = 5 * math.sqrt(probability * (1 - probability) / n) + 1e-9
        assert abs(counts[pair] / n - probability) <= tolerance, (pair, counts[pair] / n, probability)


def test_sampling_with_a_fixed_seed_is_repeatable_and_stops_at_the_end(one_thread):
    target, draft = gpt(3), gpt(4)
    runs = [
        speculative_generate(
            target,
            ModelDraft(draft),
            [1, 2],
            20,
            k=3,
            temperature=0.8,
            top_k=6,
            generator=torch.Generator().manual_seed(5),
        )[0]
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and len(runs[0]) == 20 and all(0 <= t < 12 for t in runs[0])
    out, _ = speculative_generate(
        target,
        PromptLookupDraft(),
        [1, 2, 1, 2],
        20,
        k=3,
        generator=torch.Generator().manual_seed(0),
        eos_id=runs[0][0],
    )
    assert out.count(runs[0][0]) <= 1 and (len(out) == 20 or out[-1] == runs[0][0])


def test_step_costs_are_positive_numbers(one_thread):
    target, draft = gpt(0, n_layers=2), gpt(1)
    draft_cost, verify_cost = step_costs(target, draft, [1, 2, 3], 3)
    assert draft_cost > 0 and verify_cost > 0
    assert step_costs(target, None, [1, 2, 3], 3)[0] == 0.0  # prompt lookup: no model to run


# == bad input =============================================================================


def test_bad_input_is_named():
    target = gpt(0)
    with pytest.raises(ValueError, match="exceed the context of 48 tokens"):
        speculative_generate(target, PromptLookupDraft(), [1] * 40, 10, k=4, greedy=True)
    with pytest.raises(ValueError, match="k >= 1"):
        speculative_generate(target, PromptLookupDraft(), [1, 2], 5, k=0, greedy=True)
    with pytest.raises(ValueError, match="prompt is empty"):
        speculative_generate(target, PromptLookupDraft(), [], 5, greedy=True)
    with pytest.raises(ValueError, match="temperature must be positive"):
        speculative_generate(target, PromptLookupDraft(), [1], 5, temperature=0)
    with pytest.raises(TypeError, match="must be a course_lib GPT"):
        speculative_generate(torch.nn.Linear(2, 2), PromptLookupDraft(), [1], 5)
    with pytest.raises(TypeError, match="model draft must be a course_lib GPT"):
        ModelDraft(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"p must be \(k \+ 1, V\)"):
        accept_draft(torch.ones(2, 3) / 3, torch.ones(2, 3) / 3, [0, 1])
    with pytest.raises(ValueError, match="same shape"):
        residual_distribution(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="min_ngram"):
        prompt_lookup([1, 2], 2, max_ngram=1, min_ngram=2)
