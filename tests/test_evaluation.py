"""Scoring answers: expected forms, exact match, areas named, and the log-probabilities of options."""

import pytest
import torch
import torch.nn.functional as F

from course_lib.evaluation import (
    accuracy_text,
    areas_named,
    exact_match,
    has_expected_form,
    option_scores,
    wilson_interval,
)
from course_lib.model import GPT, GPTConfig
from course_lib.tasks import DOCSTRING_AREAS


def test_expected_forms():
    assert has_expected_form({"kind": "describe"}, "Return the square root of x.")
    assert not has_expected_form({"kind": "describe"}, "Return the square root of")
    assert has_expected_form({"kind": "name"}, "`math.sqrt()`") and has_expected_form({"kind": "name"}, "`os.Path`")
    assert not has_expected_form({"kind": "name"}, "math.sqrt()") and not has_expected_form({"kind": "name"}, "`a b`")
    assert all(has_expected_form({"kind": "area"}, area) for area in DOCSTRING_AREAS)
    assert not has_expected_form({"kind": "area"}, "maths")
    assert exact_match(" text\n", "text") and not exact_match("Text", "text")
    with pytest.raises(ValueError, match="no expected form"):
        has_expected_form({"kind": "poem"}, "x")
    assert areas_named("This is about Networking.") == ["networking"]
    assert areas_named("Text, or dates and time?") == ["text", "dates and time"] and areas_named("no idea") == []


def test_option_scores_are_log_probabilities_of_the_options():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=12, context_length=16, n_layers=1, n_heads=2, d_model=8)).eval()
    prompt, options = [1, 2, 3], [[4], [5, 6]]
    scores = option_scores(model, prompt, options, per_token=False)
    with torch.no_grad():
        logp = F.log_softmax(model(torch.tensor([[1, 2, 3, 5, 6]])), dim=-1)[0]
    assert scores[1] == pytest.approx((logp[2, 5] + logp[3, 6]).item(), abs=1e-5)
    assert option_scores(model, prompt, options)[1] == pytest.approx(scores[1] / 2, abs=1e-6)
    assert sum(torch.tensor(option_scores(model, prompt, [[t] for t in range(12)], per_token=False)).exp()) == (
        pytest.approx(1.0, abs=1e-5)
    )  # one-token options: a probability distribution over the vocabulary
    with pytest.raises(ValueError, match="at least one token"):
        option_scores(model, prompt, [[4], []])


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_scores_from_a_cached_prefix_equal_scoring_everything_at_once(positional, tiny_gpt):
    model = tiny_gpt(context_length=64, d_model=16, positional=positional).eval()
    prefix, prompt, options = [1, 2, 3, 4, 5], [6, 7], [[8], [9, 10, 11], [12, 13]]
    for per_token in (True, False):
        expected = option_scores(model, prefix + prompt, options, per_token)
        cache = model.new_cache()
        model(torch.tensor([prefix]), cache=cache)
        got = option_scores(model, prompt, options, per_token, cache=cache)
        assert got == pytest.approx(expected, abs=1e-5) and cache.length == len(prefix)  # the cache is left as it was
        assert option_scores(model, prompt, options, per_token, cache=cache) == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="cannot truncate a cache of 5 positions to 9"):
        cache.truncate(9)


@pytest.mark.parametrize(
    "correct, n, low, high",
    [(46, 65, 0.5880, 0.8042), (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (50, 100, 0.4038, 0.5962)],
)
def test_wilson_interval_known_values(correct, n, low, high):
    """Values from the closed form (Wilson, 1927; e.g. statsmodels' proportion_confint method='wilson')."""
    assert wilson_interval(correct, n) == pytest.approx((low, high), abs=1e-4)
    assert accuracy_text(correct, n).endswith(f"({correct}/{n})")


def test_wilson_interval_refuses_impossible_counts():
    for correct, n in [(1, 0), (-1, 5), (6, 5)]:
        with pytest.raises(ValueError, match="need 0 <= correct <= n"):
            wilson_interval(correct, n)
