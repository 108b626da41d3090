"""Scoring answers: expected forms, exact match, areas named, and the log-probabilities of options;
intervals, and two systems compared on the same items (against statsmodels, test-only)."""

import random

import pytest
import torch
import torch.nn.functional as F

from course_lib.evaluation import (
    accuracy_text,
    areas_named,
    exact_match,
    has_expected_form,
    holm,
    mcnemar_p,
    multiple_choice_right,
    option_scores,
    paired_difference,
    per_item_mean,
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
    assert areas_named("It reads the context of the file.") == []  # "text" inside "context" is not a name


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


def test_multiple_choice_right_picks_the_best_scored_option(course):
    model, tokenizer, _ = course
    options = [" statement", " value", " zzzz qqq"]
    scores = option_scores(model, tokenizer.encode("The return:"), [tokenizer.encode(o) for o in options])
    best = max(range(3), key=scores.__getitem__)
    questions = [{"question": "The return", "options": options, "answer": answer} for answer in range(3)]
    prompt_of = lambda question: question + ":"  # noqa: E731
    assert multiple_choice_right(model, tokenizer, questions, prompt_of) == [int(a == best) for a in range(3)]


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


# -- two systems on the same items -------------------------------------------------------------------


def test_a_paired_difference_by_hand():
    a, b = [1, 1, 0, 1, 0], [0, 1, 0, 0, 0]  # A alone right on items 0 and 3, B alone on none
    result = paired_difference(a, b)
    se = (0.3 / 5) ** 0.5  # the differences 1, 0, 0, 1, 0: variance 0.3 (divided by n - 1)
    assert result.difference == pytest.approx(0.4)
    assert (result.low, result.high) == pytest.approx((0.4 - 1.96 * se, 0.4 + 1.96 * se))
    assert (result.a_only, result.b_only, result.n) == (2, 0, 5)
    assert result.p_value == pytest.approx(0.5)  # two disagreements, both for A: 2 x (1/2)^2
    assert not result.a_better and not result.b_better  # 5 items cannot tell them apart
    assert str(result) == "+0.400 [-0.080, +0.880], p = 0.5, n = 5"


def test_with_few_disagreements_the_exact_test_guards_the_interval():
    a, b = [1] * 4 + [0] * 12, [0] * 16  # 16 items, A alone right on 4: the normal interval is too narrow
    result = paired_difference(a, b)
    assert result.low > 0 and result.p_value == pytest.approx(2 / 2**4)
    assert not result.a_better
    assert paired_difference([1] * 6 + [0] * 10, [0] * 16).a_better  # 6 to 0: p = 0.03


def test_overlapping_intervals_can_hide_a_real_difference():
    """The course's old rule, "overlapping intervals are level", fails here: 60% against 50% of 200
    items, intervals overlapping, and A right on every item B gets right."""
    a = [1] * 120 + [0] * 80
    b = [1] * 100 + [0] * 100
    assert wilson_interval(100, 200)[1] > wilson_interval(120, 200)[0]  # the intervals overlap
    result = paired_difference(a, b)
    assert result.a_better and result.p_value < 1e-5 and (result.a_only, result.b_only) == (20, 0)


@pytest.mark.parametrize("seed", range(20))
def test_paired_difference_matches_statsmodels(seed):
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.weightstats import DescrStatsW

    rng = random.Random(seed)
    n, skill = rng.randint(5, 400), rng.random()
    a = [int(rng.random() < skill) for _ in range(n)]
    b = [x if rng.random() < 0.7 else int(rng.random() < 0.5) for x in a]  # correlated, as on shared items
    result = paired_difference(a, b)
    table = [[sum(x & y for x, y in zip(a, b)), result.a_only], [result.b_only, sum(1 - (x | y) for x, y in zip(a, b))]]
    assert result.p_value == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-9)
    differences = DescrStatsW([x - y for x, y in zip(a, b)])
    if result.a_only + result.b_only:
        assert (result.low, result.high) == pytest.approx(differences.zconfint_mean(alpha=0.05), abs=2e-4)
    scores = [x + rng.random() for x in a]  # not right/wrong: a mean score per item
    result = paired_difference(scores, b)
    assert result.p_value == pytest.approx(DescrStatsW([x - y for x, y in zip(scores, b)]).ztest_mean()[1], abs=2e-4)
    assert (result.a_only, result.b_only) == (None, None)


def test_mcnemar_known_values():
    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(5, 5) == 1.0
    assert mcnemar_p(10, 0) == pytest.approx(2 / 2**10)
    assert mcnemar_p(3, 9) == mcnemar_p(9, 3) == pytest.approx(2 * (1 + 12 + 66 + 220) / 2**12)
    with pytest.raises(ValueError, match="0 or more"):
        mcnemar_p(-1, 3)


def test_seeds_are_averaged_within_each_item():
    assert per_item_mean([[1, 0, 1], [1, 1, 0], [0, 0, 1]]) == pytest.approx([2 / 3, 1 / 3, 2 / 3])
    with pytest.raises(ValueError, match="same length"):
        per_item_mean([[1, 0], [1]])
    with pytest.raises(ValueError, match="same length"):
        per_item_mean([])


def test_items_that_do_not_pair_up_are_refused():
    with pytest.raises(ValueError, match="one score of each system per item, got 3 and 2"):
        paired_difference([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="at least 2 items"):
        paired_difference([1], [0])


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = random.Random(0)
    for m in (1, 2, 5, 9):
        p = [rng.random() ** 3 for _ in range(m)]
        assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
