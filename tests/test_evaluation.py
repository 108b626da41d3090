"""Scoring answers: expected forms, exact match, areas named, and the log-probabilities of options;
intervals, two systems compared on the same items, contrasts, families, recipes and power (against
scipy and statsmodels, test-only, and published worked examples)."""

import random

import pytest
import torch
import torch.nn.functional as F

from course_lib.evaluation import (
    accuracy_text,
    areas_named,
    clustered_difference,
    compare_family,
    compare_recipes,
    contrast,
    exact_match,
    has_expected_form,
    holm,
    items_needed,
    mcnemar_p,
    mcnemar_power,
    mean_interval,
    multiple_choice_right,
    newcombe_interval,
    option_scores,
    outside_range_probability,
    paired_difference,
    per_item_mean,
    recipe_difference,
    seeds_power,
    t_quantile,
    t_two_sided_p,
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
    assert accuracy_text(correct, n) == f"{correct / n:.3f} [{low:.2f}, {high:.2f}] ({correct}/{n})"


def test_wilson_interval_refuses_impossible_counts():
    for correct, n in [(1, 0), (-1, 5), (6, 5)]:
        with pytest.raises(ValueError, match="need 0 <= correct <= n"):
            wilson_interval(correct, n)


# -- Student's t, without scipy ----------------------------------------------------------------------


@pytest.mark.parametrize("df", [1, 2, 3.7, 7, 30, 129, 2000])
def test_t_distribution_matches_scipy(df):
    from scipy import stats

    assert t_quantile(0.95, df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)
    assert t_quantile(0.8, df) == pytest.approx(stats.t.ppf(0.9, df), rel=1e-9)
    for t in (0.0, 0.3, 2.1, -2.1, 9.0, 40.0):
        assert t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9, abs=1e-300)
    with pytest.raises(ValueError, match="df > 0"):
        t_quantile(0.95, 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        t_quantile(95, 7)


def test_mean_interval_is_a_t_interval():
    from statsmodels.stats.weightstats import DescrStatsW

    values = [0.41, 0.52, 0.38, 0.61, 0.45, 0.50, 0.33, 0.58]  # 8 windows: t(7) = 2.36, not 1.96
    mean, interval = mean_interval(values)
    assert mean == pytest.approx(sum(values) / 8)
    assert interval == pytest.approx(DescrStatsW(values).tconfint_mean(alpha=0.05), rel=1e-9)
    with pytest.raises(ValueError, match="at least 2 values"):
        mean_interval([0.5])


# -- two systems on the same items -------------------------------------------------------------------

# Newcombe (1998), "Improved confidence intervals for the difference between binomial proportions based
# on paired data", Statistics in Medicine 17, Table III, method 10: cells e (both right), f (first
# alone), g (second alone), h (neither), and the printed 95% limits of (f - g) / n.
NEWCOMBE_1998_TABLE_III = [
    (36, 12, 2, 0, 0.0569, 0.3404),
    (20, 12, 2, 16, 0.0562, 0.3292),
    (18, 12, 2, 18, 0.0562, 0.3290),
    (36, 14, 0, 0, 0.1528, 0.4167),
    (35, 14, 0, 1, 0.1461, 0.4175),
    (18, 14, 0, 18, 0.1441, 0.3963),
    (2, 97, 1, 0, 0.8721, 0.9854),
    (0, 29, 1, 0, 0.6666, 0.9882),
    (2, 98, 0, 0, 0.9178, 0.9945),
    (1, 98, 0, 1, 0.9171, 0.9916),
    (0, 30, 0, 0, 0.8395, 1.0000),
    (54, 0, 0, 0, -0.0664, 0.0664),
    (53, 0, 0, 1, -0.0729, 0.0729),
    (30, 0, 0, 24, -0.0358, 0.0358),
    (27, 0, 0, 27, -0.0351, 0.0351),
]


@pytest.mark.parametrize("both, a_only, b_only, neither, low, high", NEWCOMBE_1998_TABLE_III)
def test_the_score_interval_reproduces_newcombe_1998(both, a_only, b_only, neither, low, high):
    assert newcombe_interval(both, a_only, b_only, neither) == pytest.approx((low, high), abs=0.5e-4)
    a = [1] * both + [1] * a_only + [0] * b_only + [0] * neither  # the same table, item by item
    b = [1] * both + [0] * a_only + [1] * b_only + [0] * neither
    result = paired_difference(a, b)
    assert (result.low, result.high) == pytest.approx((low, high), abs=0.5e-4)
    assert result.difference == pytest.approx((a_only - b_only) / len(a))


def test_a_paired_difference_by_hand():
    a, b = [1, 1, 0, 1, 0], [0, 1, 0, 0, 0]  # A alone right on items 0 and 3, B alone on none
    result = paired_difference(a, b)
    assert result.difference == pytest.approx(0.4)
    assert (result.low, result.high) == pytest.approx(newcombe_interval(1, 2, 0, 2))
    assert (result.a_only, result.b_only, result.n) == (2, 0, 5)
    assert result.p_value == pytest.approx(0.5)  # two disagreements, both for A: 2 x (1/2)^2
    assert not result.a_better and not result.b_better  # 5 items cannot tell them apart
    assert str(result) == "+0.400 [-0.163, +0.726] (Newcombe score), p = 0.5; n = 5, only A right 2, only B 0"


def test_no_disagreement_is_not_a_zero_width_interval():
    """The slip the normal interval makes: 0 or 1 disagreeing questions print +0.000 [+0.000, +0.000]."""
    same = [1] * 40 + [0] * 24
    for b in (same, [1] * 39 + [0] * 25):
        result = paired_difference(same, b)
        assert result.high - result.low > 0.05 and result.low < 0 < result.high
        assert not result.a_better and not result.b_better and result.p_value == 1.0


def test_no_verdict_from_differences_that_never_vary():
    """Every difference the same: a t interval of width 0 measured no noise, so it gives no verdict."""
    result = paired_difference([1.5, 2.5], [1.0, 2.0])
    assert result.low == result.high == pytest.approx(0.5) and result.p_value == 1.0
    assert not result.a_better and not result.b_better
    gains = contrast(([1, 1, 1], [0, 0, 0]), ([0, 0, 0], [0, 0, 0]))
    assert gains.difference == 1 and not gains.a_better and gains.p_value == 1.0
    family = compare_family({"A": [1.5, 2.5, 3.5], "B": [1.0, 2.0, 3.0]})
    assert not family.above("A", "B") and not family.above("B", "A")


def test_a_verdict_at_a_level_is_a_test_at_one_minus_that_level():
    a = [1] * 8 + [0] * 2 + [0] * 40
    b = [0] * 8 + [1] * 2 + [0] * 40  # 8 items for A alone, 2 for B alone: McNemar's p = 0.11
    assert mcnemar_p(8, 2) == pytest.approx(0.109375)
    at_95, at_80 = paired_difference(a, b), paired_difference(a, b, level=0.8)
    assert not at_95.a_better and at_80.a_better and at_80.level == 0.8
    rng = random.Random(9)
    x = [rng.gauss(0.3, 1) for _ in range(40)]
    for level in (0.8, 0.9, 0.95, 0.99):  # a t interval excludes 0 exactly when p < 1 - level
        result = paired_difference(x, [0.0] * 40, level=level)
        assert result.a_better == (result.p_value < 1 - level) == (result.low > 0)
    scores = {"A": a, "B": b}
    assert compare_family(scores, level=0.8).above("A", "B") and not compare_family(scores).above("A", "B")
    assert str(compare_family(scores, level=0.9)).startswith("all pairs (A - B): 1 comparisons, 90% intervals")


def test_with_few_disagreements_the_exact_test_guards_the_interval():
    a, b = [1] * 12 + [1] * 9 + [0] * 2 + [0] * 13, [1] * 12 + [0] * 9 + [1] * 2 + [0] * 13
    result = paired_difference(a, b)  # 9 to 2 of 36: the score interval excludes 0, McNemar's p = 0.065
    assert result.low > 0 and result.p_value == pytest.approx(2 * (1 + 11 + 55) / 2**11)
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
    assert result.interval == "Newcombe score" and result.low <= result.difference <= result.high
    scores = [x + rng.random() for x in a]  # not right/wrong: a mean score per item
    result = paired_difference(scores, b)
    differences = DescrStatsW([x - y for x, y in zip(scores, b)])
    assert (result.low, result.high) == pytest.approx(differences.tconfint_mean(alpha=0.05), rel=1e-9)
    assert result.p_value == pytest.approx(differences.ttest_mean()[1], rel=1e-6)
    assert (result.a_only, result.b_only, result.interval) == (None, None, f"t, {n - 1} df")


def test_eight_windows_get_a_t_interval():
    a = [4.02, 3.95, 4.10, 3.99, 4.07, 4.01, 3.97, 4.05]
    b = [4.00, 3.96, 4.05, 3.99, 4.03, 4.02, 3.95, 4.01]
    result = paired_difference(a, b)
    d = [x - y for x, y in zip(a, b)]
    mean, se = sum(d) / 8, (sum((x - sum(d) / 8) ** 2 for x in d) / 7 / 8) ** 0.5
    assert (result.low, result.high) == pytest.approx((mean - 2.364624 * se, mean + 2.364624 * se), rel=1e-5)
    assert mean - 1.96 * se > 0 and result.low < 0  # the normal interval would call it a real loss
    assert str(result) == "+0.019 [-0.001, +0.038] (t, 7 df), p = 0.059, n = 8"


def test_items_that_do_not_pair_up_are_refused():
    with pytest.raises(ValueError, match="one score of each system per item, got 3 and 2"):
        paired_difference([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="at least 2 items"):
        paired_difference([1], [0])
    with pytest.raises(ValueError, match="four counts of 0 or more"):
        newcombe_interval(3, -1, 0, 2)


def test_mcnemar_known_values():
    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(5, 5) == 1.0
    assert mcnemar_p(10, 0) == pytest.approx(2 / 2**10)
    assert mcnemar_p(3, 9) == mcnemar_p(9, 3) == pytest.approx(2 * (1 + 12 + 66 + 220) / 2**12)
    with pytest.raises(ValueError, match="0 or more"):
        mcnemar_p(-1, 3)


# -- clustered items ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_clustered_difference_matches_statsmodels_cluster_robust_ols(seed):
    import numpy as np
    import statsmodels.api as sm

    rng = random.Random(seed)
    windows = rng.randint(3, 12)
    clusters = [w for w in range(windows) for _ in range(rng.randint(5, 60))]  # tokens within windows
    shift = {w: rng.gauss(0, 0.3) for w in range(windows)}  # each window moves its tokens together
    a = [rng.gauss(shift[w], 1) for w in clusters]
    b = [rng.gauss(0, 1) for _ in clusters]
    result = clustered_difference(a, b, clusters)
    d = np.array(a) - np.array(b)
    fit = sm.OLS(d, np.ones((len(d), 1))).fit(cov_type="cluster", cov_kwds={"groups": np.array(clusters)}, use_t=True)
    assert (result.low, result.high) == pytest.approx(tuple(fit.conf_int(0.05)[0]), rel=1e-9)
    assert result.p_value == pytest.approx(fit.pvalues[0], rel=1e-6)
    assert result.interval == f"t over {windows} clusters, {windows - 1} df"


def test_clustering_widens_the_interval_of_items_that_move_together():
    rng = random.Random(0)
    clusters = [w for w in range(8) for _ in range(256)]  # 2,048 tokens in 8 windows
    shift = [rng.gauss(0, 0.5) for _ in range(8)]
    a = [shift[w] + rng.gauss(0, 0.2) for w in clusters]
    b = [0.0] * len(a)
    naive, clustered = paired_difference(a, b), clustered_difference(a, b, clusters)
    assert clustered.high - clustered.low > 5 * (naive.high - naive.low)
    right_a, right_b = [int(x > 0) for x in a], [int(rng.random() < 0.5) for _ in a]
    counted = clustered_difference(right_a, right_b, clusters)
    unclustered = paired_difference(right_a, right_b)
    assert (counted.a_only, counted.b_only) == (unclustered.a_only, unclustered.b_only)
    with pytest.raises(ValueError, match="one label per item"):
        clustered_difference(a, b, clusters[:-1])
    with pytest.raises(ValueError, match="at least 2 clusters"):
        clustered_difference(a, b, [0] * len(a))


# -- contrasts ---------------------------------------------------------------------------------------


def test_a_contrast_of_two_groups_is_one_welch_interval():
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

    rng = random.Random(1)
    far = ([rng.random() for _ in range(58)], [rng.random() * 0.8 for _ in range(58)])
    near = ([rng.random() for _ in range(193)], [rng.random() for _ in range(193)])
    result = contrast(far, near)
    gains = [DescrStatsW([x - y for x, y in zip(*group)]) for group in (far, near)]
    compared = CompareMeans(*gains)
    assert (result.low, result.high) == pytest.approx(compared.tconfint_diff(alpha=0.05, usevar="unequal"), rel=1e-9)
    assert result.p_value == pytest.approx(compared.ttest_ind(usevar="unequal")[1], rel=1e-6)
    assert result.difference == pytest.approx(gains[0].mean - gains[1].mean)
    assert result.interval.startswith("Welch t") and result.n == 58 + 193


def test_significant_here_not_there_is_not_a_contrast():
    """The same gain, +0.10, is "significant" on the larger group and not on the smaller: the two
    separate tests fall either side of 0.05, yet the contrast between the groups is 0."""
    rng = random.Random(2)
    noise = [rng.gauss(0, 1) for _ in range(400)]
    big = [x - sum(noise) / 400 + 0.10 for x in noise]
    small = big[:60]
    small = [x - sum(small) / 60 + 0.10 for x in small]
    zeros = lambda k: [0.0] * k  # noqa: E731
    assert paired_difference(big, zeros(400)).a_better and not paired_difference(small, zeros(60)).a_better
    result = contrast((big, zeros(400)), (small, zeros(60)))
    assert result.difference == pytest.approx(0.0, abs=1e-12) and result.p_value > 0.99


def test_a_contrast_on_the_same_items_is_a_paired_t():
    from statsmodels.stats.weightstats import DescrStatsW

    rng = random.Random(3)
    a1, b1, a2, b2 = ([rng.random() for _ in range(30)] for _ in range(4))
    result = contrast((a1, b1), (a2, b2), same_items=True)
    interaction = DescrStatsW([(w - x) - (y - z) for w, x, y, z in zip(a1, b1, a2, b2)])
    assert (result.low, result.high) == pytest.approx(interaction.tconfint_mean(alpha=0.05), rel=1e-9)
    assert result.interval == "paired t, 29 df"
    with pytest.raises(ValueError, match="same items in both groups"):
        contrast((a1, b1), (a2[:-1], b2[:-1]), same_items=True)
    with pytest.raises(ValueError, match="one score of each system per item"):
        contrast((a1, b1[:-1]), (a2, b2))


# -- families ----------------------------------------------------------------------------------------


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = random.Random(0)
    for m in (1, 2, 5, 9):
        p = [rng.random() ** 3 for _ in range(m)]
        assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    with pytest.raises(ValueError, match="between 0 and 1"):
        holm([0.2, 1.5])


def test_a_family_is_every_pair_or_each_against_a_named_baseline():
    from statsmodels.stats.multitest import multipletests

    rng = random.Random(4)
    skill = {"none": 0.5, "learned": 0.6, "sinusoidal": 0.62, "rope": 0.7}
    scores = {name: [int(rng.random() < s) for _ in range(300)] for name, s in skill.items()}
    family = compare_family(scores)
    assert list(family.differences) == [(a, b) for i, a in enumerate(skill) for b in list(skill)[i + 1 :]]
    p = [paired_difference(scores[a], scores[b]).p_value for a, b in family.differences]
    assert list(family.adjusted.values()) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert family.above("rope", "none") == family.above("rope", "none") and not family.above("none", "rope")
    text = str(family)
    assert text.startswith("all pairs (A - B): 6 comparisons, 95% intervals unadjusted, p Holm-adjusted")
    assert "rope - none" not in text and "none - rope" in text and "only A" in text
    against = compare_family(scores, baseline="none")
    assert list(against.differences) == [("learned", "none"), ("sinusoidal", "none"), ("rope", "none")]
    assert str(against).startswith("each against none (A - B): 3 comparisons")
    with pytest.raises(ValueError, match="baseline 'best' is not among"):
        compare_family(scores, baseline="best")
    with pytest.raises(ValueError, match="at least 2 systems"):
        compare_family({"rope": scores["rope"]})
    with pytest.raises(KeyError, match="not in this family"):
        against.above("rope", "learned")


def test_a_family_of_all_pairs_keeps_false_claims_near_five_percent():
    """Four equal systems: six unadjusted tests at 5% would claim a difference far more often."""
    rng = random.Random(5)
    claims = raw = 0
    for _ in range(200):
        scores = {k: [int(rng.random() < 0.6) for _ in range(120)] for k in "ABCD"}
        family = compare_family(scores)
        claims += any(p < 0.05 for p in family.adjusted.values())
        raw += any(d.p_value < 0.05 for d in family.differences.values())
    assert claims / 200 <= 0.06 < raw / 200


# -- recipes and seeds -------------------------------------------------------------------------------


def test_seeds_are_averaged_within_each_item():
    assert per_item_mean([[1, 0, 1], [1, 1, 0], [0, 0, 1]]) == pytest.approx([2 / 3, 1 / 3, 2 / 3])
    with pytest.raises(ValueError, match="same length"):
        per_item_mean([[1, 0], [1]])
    with pytest.raises(ValueError, match="same length"):
        per_item_mean([])


def _runs(rng: random.Random, ease: list[float], shift: float, spread: float, seeds: int) -> list[list[int]]:
    """Seeds of one recipe on the same items: each run lands higher or lower as a whole (a normal
    shift with sd ``spread``), then each item is right with its ease plus that shift."""
    runs = []
    for _ in range(seeds):
        lift = shift + rng.gauss(0, spread)
        runs.append([int(rng.random() < e + lift) for e in ease])
    return runs


@pytest.mark.parametrize("seed", range(10))
def test_a_recipe_difference_is_welch_on_run_means_and_keeps_the_item_interval(seed):
    from scipy import stats
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

    rng = random.Random(seed)
    ease = [rng.uniform(0.2, 0.8) for _ in range(130)]
    runs_a = _runs(rng, ease, 0.05, 0.03, rng.randint(2, 5))
    runs_b = _runs(rng, ease, 0.0, 0.05, rng.randint(2, 5))
    modules = [k // 5 for k in range(130)]
    result = recipe_difference(runs_a, runs_b, clusters=modules)
    means_a, means_b = [sum(r) / 130 for r in runs_a], [sum(r) / 130 for r in runs_b]
    welch = CompareMeans(DescrStatsW(means_a), DescrStatsW(means_b))
    assert (result.recipes.low, result.recipes.high) == pytest.approx(
        welch.tconfint_diff(alpha=0.05, usevar="unequal"), rel=1e-9
    )
    assert result.recipes.p_value == pytest.approx(stats.ttest_ind(means_a, means_b, equal_var=False).pvalue, rel=1e-6)
    assert result.recipes.interval.startswith("Welch t on run means") and result.recipes.n == len(runs_a) + len(runs_b)
    assert result.a_better == result.recipes.a_better and result.b_better == result.recipes.b_better
    assert result.these_runs == clustered_difference(per_item_mean(runs_a), per_item_mean(runs_b), modules)
    assert result.seeds_a == pytest.approx(means_a)
    lines = str(result).splitlines()
    assert lines[0] == f"recipes (seeds drawn): {result.recipes}"
    assert lines[1] == f"these runs (items drawn, seeds fixed): {result.these_runs}"
    assert f"B {min(means_b):.3f} to {max(means_b):.3f} ({len(runs_b)} seeds)" in lines[2]
    with pytest.raises(ValueError, match="at least 2 seeds of one"):
        recipe_difference(runs_a[:1], runs_b[:1])


def test_a_recipe_against_one_fixed_model_is_a_one_sample_t_on_its_run_means():
    from scipy import stats

    rng = random.Random(13)
    ease = [rng.uniform(0.2, 0.8) for _ in range(120)]
    start, runs = _runs(rng, ease, 0.0, 0.0, 1), _runs(rng, ease, 0.08, 0.03, 3)
    result = recipe_difference(runs, start)
    means, fixed = [sum(r) / 120 for r in runs], sum(start[0]) / 120
    expected = stats.ttest_1samp(means, fixed)
    assert result.recipes.p_value == pytest.approx(expected.pvalue, rel=1e-6)
    assert result.recipes.difference == pytest.approx(sum(means) / 3 - fixed)
    assert result.recipes.interval == "t on run means against one model, 2 df"
    flipped = recipe_difference(start, runs)
    assert flipped.recipes.difference == pytest.approx(-result.recipes.difference)
    assert flipped.recipes.p_value == pytest.approx(result.recipes.p_value)


def test_a_family_of_recipes_is_holm_over_their_recipe_verdicts():
    from statsmodels.stats.multitest import multipletests

    rng = random.Random(12)
    ease = [rng.uniform(0.2, 0.8) for _ in range(100)]
    runs = {name: _runs(rng, ease, shift, 0.02, 3) for name, shift in (("none", 0.0), ("rope", 0.1), ("alibi", 0.02))}
    family = compare_recipes(runs)
    assert list(family.differences) == [("none", "rope"), ("none", "alibi"), ("rope", "alibi")]
    for (a, b), d in family.differences.items():
        assert d == recipe_difference(runs[a], runs[b]).recipes
    p = [d.p_value for d in family.differences.values()]
    assert list(family.adjusted.values()) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert str(family).startswith("all pairs of recipes, seeds drawn (A - B): 3 comparisons, 95% intervals")
    against = compare_recipes(runs, baseline="none", level=0.9)
    assert list(against.differences) == [("rope", "none"), ("alibi", "none")] and against.level == 0.9


def test_two_identical_recipes_are_told_apart_at_the_nominal_rate():
    """The issue's simulation: two identical recipes, 3 seeds each, 135 right/wrong items, runs that
    shift as a whole by a spread of 0.04. The verdict on run means claims a winner at most 5% of
    the time (Welch's t with 3 + 3 runs is a little conservative: 3.5% here); the item-level
    interval of these runs, which holds the seeds fixed, far more often (17%). Fixed seeds, so the
    rates are the same on every run; 2,000 simulations put a 99.9% interval of about ±0.014 around
    each rate."""
    rng = random.Random(11)
    simulations, recipe_claims, run_claims = 2000, 0, 0
    for _ in range(simulations):
        ease = [rng.uniform(0.2, 0.85) for _ in range(135)]
        result = recipe_difference(_runs(rng, ease, 0.0, 0.04, 3), _runs(rng, ease, 0.0, 0.04, 3))
        recipe_claims += result.a_better or result.b_better
        run_claims += result.these_runs.a_better or result.these_runs.b_better
    low, high = wilson_interval(recipe_claims, simulations, z=3.29)
    assert low <= 0.05 and high >= 0.025  # not above the level, and not far below it
    assert wilson_interval(run_claims, simulations, z=3.29)[0] > 0.10  # the pooled interval's old verdict


def test_a_new_run_falls_outside_the_range_of_earlier_ones():
    assert outside_range_probability(3) == 0.5 and outside_range_probability(1) == 1.0
    assert outside_range_probability(19) == pytest.approx(0.1)
    rng = random.Random(7)
    outside = 0
    for _ in range(20_000):
        runs = [rng.gauss(0, 1) for _ in range(4)]  # 3 seeds, then a fourth
        outside += not min(runs[:3]) <= runs[3] <= max(runs[:3])
    assert outside / 20_000 == pytest.approx(0.5, abs=0.015)
    with pytest.raises(ValueError, match="at least one earlier run"):
        outside_range_probability(0)


# -- power -------------------------------------------------------------------------------------------


def _exact_mcnemar_power(n: int, difference: float, rate: float, alpha: float = 0.05) -> float:
    """P(McNemar's exact p < alpha) over n items: D ~ Binomial(n, rate) disagree, and of those
    A alone is right on Binomial(D, (1 + difference / rate) / 2); each p from scipy's binomial."""
    import numpy as np
    from scipy import stats

    favour, power = (1 + difference / rate) / 2, 0.0
    for d in range(n + 1):
        k = np.arange(d + 1)
        p = np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(k, d - k), d, 0.5))
        power += stats.binom.pmf(d, n, rate) * stats.binom.pmf(k[p < alpha], d, favour).sum()
    return power


@pytest.mark.parametrize(
    "effect, rate, power", [(0.1, 0.2, 0.8), (0.099, 0.28, 0.8), (0.08, 0.18, 0.8), (-0.15, 0.3, 0.9), (0.2, 0.3, 0.5)]
)
def test_items_needed_is_where_the_exact_test_reaches_its_power(effect, rate, power):
    n = items_needed(effect, rate, power=power)
    assert _exact_mcnemar_power(n, effect, rate) >= power > _exact_mcnemar_power(n - 1, effect, rate)
    assert mcnemar_power(n, effect, rate) == pytest.approx(_exact_mcnemar_power(n, effect, rate), abs=1e-9)


def test_items_needed_is_more_than_connors_approximation():
    # Connor's formula by hand: (1.95996 * sqrt(0.2) + 0.84162 * sqrt(0.2 - 0.1**2))**2 / 0.1**2 = 154.6,
    # where the exact test has power 0.77: it needs 168 items
    assert _exact_mcnemar_power(155, 0.1, 0.2) < 0.78
    assert items_needed(0.1, 0.2) == 168
    assert items_needed(-0.1, 0.2) == 168  # the sign says which system is ahead, not how many items
    assert items_needed(0.05, 0.2) > 3.5 * items_needed(0.1, 0.2)  # half the difference, four times the items
    with pytest.raises(ValueError, match="at most the disagreement rate"):
        items_needed(0.3, 0.2)
    with pytest.raises(ValueError, match="nonzero"):
        items_needed(0.0, 0.2)
    with pytest.raises(ValueError, match=r"share of the items in \(0, 1\]"):
        items_needed(0.1, 1.5)


@pytest.mark.parametrize(
    "difference, spread, seeds", [(0.05, 0.02, 3), (0.03, 0.03, 3), (0.1, 0.04, 2), (0.02, 0.03, 10)]
)
def test_seeds_power_is_the_two_sample_t_tests(difference, spread, seeds):
    from statsmodels.stats.power import TTestIndPower

    expected = TTestIndPower().power(effect_size=difference / spread, nobs1=seeds, alpha=0.05)
    assert seeds_power(difference, spread, seeds) == pytest.approx(expected, abs=1e-6)
    assert seeds_power(-difference, spread, seeds) == pytest.approx(expected, abs=1e-6)


def test_three_seeds_find_only_differences_of_about_three_spreads():
    assert seeds_power(2 * 0.03, 0.03, 3) < 0.5 < 0.8 < seeds_power(3.2 * 0.03, 0.03, 3)
    assert seeds_power(0.0, 0.03, 3) == pytest.approx(0.05, abs=1e-6)  # no difference: the level
    with pytest.raises(ValueError, match="at least 2 seeds"):
        seeds_power(0.1, 0.03, 1)
