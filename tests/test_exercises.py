"""The checker: what a student sees for a right answer, a typical mistake, a starter function, a banned
function or an input changed in place; and every exercise's solution and typical mistakes (the
instructors' key, course_lib/grading/keys/chNN.py) against its visible cases.
"""

import json
import math
import re
from pathlib import Path

import pytest
import torch

from course_lib import exercises
from course_lib.exercises import EXERCISES, BannedFunction, Case, banned, check, exercise
from course_lib.grading.keys import MISTAKES, SOLUTIONS
from course_lib.grading.keys.ch08 import adamw_by_torch

ROOT = Path(__file__).resolve().parents[1]


# == the checks ============================================================================


@pytest.fixture
def fresh_kernel(monkeypatch):
    """No failed attempt yet: the checker's memory of earlier failures, emptied."""
    monkeypatch.setattr(exercises.core, "FAILURES", {})


def test_a_starter_function_gets_one_neutral_line_with_no_case_and_no_hint(fresh_kernel):
    def starter(ids, vocab_size):
        raise NotImplementedError("your code here")

    result = check("trigram-counts", starter)
    assert not result and repr(result) == "✏️ trigram-counts: not attempted yet; write your function and run this cell"
    assert exercises.core.FAILURES == {}  # not a failed attempt: the first real failure still gets the nudge only


def test_an_exception_after_the_first_case_is_explained(fresh_kernel):
    def broken(ids, vocab_size):
        if ids == [2, 2, 2, 2]:  # the second case
            raise NotImplementedError("todo")
        return SOLUTIONS["trigram-counts"](ids, vocab_size)

    def unreadable(ids, vocab_size):
        raise ValueError("no idea")

    assert "case 2 of 5 failed" in repr(check("trigram-counts", broken))
    assert "raised ValueError: no idea" in repr(check("trigram-counts", unreadable))


def test_hints_come_in_steps_one_more_after_each_failure(fresh_kernel):
    steps = EXERCISES["logsumexp"].hints
    n = len(steps)
    wrong = MISTAKES["logsumexp"][0]
    for shown in (*range(1, n + 1), n):
        message = repr(check("logsumexp", wrong))
        assert [s in message for s in steps] == [True] * shown + [False] * (n - shown)
        assert ("each failed run shows one more step" in message) == (shown < n)
    assert check("logsumexp", SOLUTIONS["logsumexp"])  # passing leaves the count alone: no harm


def test_a_failure_says_where_expected_and_got_first_differ(fresh_kernel):
    message = repr(check("split-windows", MISTAKES["split-windows"][0]))  # windows shuffled, then split
    assert "\n  differs:  element 0 of the tuple: first at index [0, 0]: expected 0, got 14 (20 of 24" in message
    message = repr(check("longest-match", MISTAKES["longest-match"][0]))
    assert "\n  differs:  element 0 of the list: expected 'hell', got 'he'" in message
    message = repr(check("chunk-pair-counts", MISTAKES["chunk-pair-counts"][0]))
    assert "\n  differs:  at key (1, 2): expected 3, got 2" in message
    message = repr(check("chunk-pair-counts", lambda chunks: {**SOLUTIONS["chunk-pair-counts"](chunks), (9, 9): 1}))
    assert "\n  differs:  at key (9, 9): expected no such key, got 1" in message
    message = repr(check("chunk-pair-counts", lambda chunks: {}))
    assert "\n  differs:  at key (1, 2): expected 3, got no such key" in message


def test_a_right_answer_in_another_dtype_is_told_as_a_dtype_mismatch(fresh_kernel):
    message = repr(check("answer-loss", lambda logits, targets: SOLUTIONS["answer-loss"](logits.double(), targets)))
    assert "\n  differs:  the dtype: expected torch.float32, got torch.float64 (the values agree)" in message
    assert "\n  hint 1:   the values are right: return them as torch.float32, as the statement says" in message
    assert EXERCISES["answer-loss"].hints[0] not in message  # not a nudge towards a bug that is not there


def test_the_hint_is_chosen_by_the_case_that_failed(fresh_kernel):
    def eps_outside(x, weight, eps):
        return (x.double() / (x.double().pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * (1 + weight)).to(x.dtype)

    steps = EXERCISES["rms-norm"].hints
    message = repr(check("rms-norm", eps_outside))
    assert "case 4 of " in message and f"hint 1:   {steps[2]}" in message and steps[0] not in message
    message = repr(check("logsumexp", MISTAKES["logsumexp"][2]))  # exp, sum, log: overflows
    assert "case 2 of " in message and "hint 1:   exp(1000) is far above float32's largest" in message
    message = repr(check("rms-norm", MISTAKES["rms-norm"][7]))  # .view(-1, C)
    assert "(a non-contiguous" in message and "hint 1:   this batch is not contiguous" in message
    message = repr(check("answer-loss", MISTAKES["answer-loss"][1]))  # log(exp / sum)
    assert "(large logits" in message and "hint 1:   exp(200) overflows" in message


PREDICTIONS = [  # exercises whose visible answers are the numbers the student is asked to predict
    "accumulated-grad", "embedding-grad", "score-scale", "min-training-loss", "loss-share",
    "bradley-terry", "pass-at-k", "majority-right", "zero-contrast-share", "draft-acceptance",
    "uniform-previous-token-score",
]  # fmt: skip


@pytest.mark.parametrize("name", PREDICTIONS)
def test_a_prediction_does_not_show_the_number_to_be_predicted(name, fresh_kernel):
    answers = [EXERCISES[name].expected(case) for case in EXERCISES[name].cases()]
    for wrong in MISTAKES[name]:
        message = repr(check(name, wrong))
        k = int(re.search(r"case (\d+) of", message).group(1))
        assert "expected: not shown" in message and f"expected: {exercises._show(answers[k - 1])}" not in message


def test_a_banned_function_fails_passed_called_or_imported_and_comes_back_afterwards():
    from torch import logsumexp as imported

    def by_its_own_name(x):
        return imported(x, dim=-1)

    for fn in (torch.logsumexp, lambda x: torch.logsumexp(x, -1), lambda x: x.logsumexp(-1), by_its_own_name):
        message = repr(check("logsumexp", fn))
        assert message.startswith("❌ logsumexp: case 1 of") and "torch." in message and "ban" in message
    assert torch.logsumexp is imported and by_its_own_name(torch.zeros(2)).item() == pytest.approx(math.log(2))
    assert torch.zeros(2).logsumexp(0).item() == pytest.approx(math.log(2))
    assert "logsumexp" not in torch.Tensor.__dict__  # the method is the C one again


def test_an_input_changed_in_place_fails_the_case_in_check_and_in_the_grader():
    from course_lib.grading.keys.ch15 import mean_ablate_in_place as in_place
    from course_lib.grading.student_process import _result

    message = repr(check("mean-ablate", in_place))
    assert "case 1 of" in message and "changed its input `z` in place" in message
    header, payload = _result(in_place, EXERCISES["mean-ablate"].cases()[0].args, [])
    assert "changed its input `z` in place" in header["error"] and payload == b""


def test_a_return_the_grader_refuses_fails_the_check_with_the_same_words(fresh_kernel):
    from course_lib.grading.student_process import _result

    numpy_array = MISTAKES["dead-fraction"][3]  # (...).float().mean().numpy(): a 0-d ndarray
    message = repr(check("dead-fraction", numpy_array))
    refused = "returned an object of type ndarray, not a tensor or a plain value"
    assert "case 1 of" in message and f"got:      {refused}" in message
    header, payload = _result(numpy_array, EXERCISES["dead-fraction"].cases()[0].args, [])
    assert f"returned {header['unsent']}".startswith(refused) and payload == b""
    assert check("dead-fraction", lambda h: torch.tensor(SOLUTIONS["dead-fraction"](h)).item())  # a float: passes


def test_each_case_gets_its_own_copy_of_inputs_shared_between_cases():
    seen = []

    def records(logits, previous, penalty):
        seen.append(logits)
        return SOLUTIONS["repetition-penalty"](logits, previous, penalty)

    cases = EXERCISES["repetition-penalty"].cases()
    assert cases[0].args[0] is cases[1].args[0]  # the cases share one logits tensor
    assert check("repetition-penalty", records)
    assert len({id(t) for t in seen}) == len(seen) == len(cases)  # each call its own copy


def test_a_ban_names_itself_and_is_lifted_even_when_the_check_fails():
    with pytest.raises(BannedFunction, match="torch.nn.functional.layer_norm is banned"):
        with banned(["torch.nn.functional.layer_norm"]):
            torch.nn.LayerNorm(4)(torch.ones(2, 4))  # the module calls the banned function too
    assert torch.nn.LayerNorm(4)(torch.ones(2, 4)).shape == (2, 4)
    with pytest.raises(AttributeError, match="no such function"):
        exercise("misspelt-ban", hint="", bans=["torch.logsumexpp"])


def test_every_exercise_without_a_reference_answers_each_case_itself():
    for name, ex in EXERCISES.items():
        if ex.reference is None:
            assert all(c.expected is not exercises._FROM_REFERENCE for c in ex.cases()), name


def test_unknown_exercise_lists_the_known_ones():
    with pytest.raises(KeyError, match="known exercises: accumulated-grad, accumulated-gradient, adamw-first-step"):
        check("no-such-exercise", lambda: None)


def test_exercises_are_defined_in_the_order_the_notebooks_use_them():
    used = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                used += re.findall(r'check\("([a-z0-9-]+)"', "".join(cell["source"]))
    assert list(dict.fromkeys(used)) == list(EXERCISES)


def test_an_exercise_name_is_defined_once():
    with pytest.raises(ValueError, match="'trigram-counts' is defined twice"):
        exercise("trigram-counts", reference=list, hint="")(lambda: [Case(([1, 2],))])
    assert EXERCISES["trigram-counts"].hint().startswith("a trigram is three tokens")


def test_every_solution_is_shown_to_an_instructor(capsys):
    from course_lib.grading.keys.__main__ import main

    assert main(list(EXERCISES)) == 0
    shown = capsys.readouterr().out
    for name, solution in SOLUTIONS.items():
        assert f"# == {name} ==\n" in shown and f"def {solution.__name__}(" in shown, name


# == the key's solutions against the course ==============================================


def test_the_adamw_prediction_is_what_torch_does():
    g = torch.Generator().manual_seed(0)
    for lr, wd in [(1e-3, 0.1), (0.5, 0.0), (3e-4, 1.0)]:
        w, grad = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g) * 10
        assert torch.allclose(SOLUTIONS["adamw-first-step"](w, grad, lr, wd), adamw_by_torch(w, grad, lr, wd))


def test_the_accumulated_gradient_prediction_is_what_torch_does():
    for x0, times in [(2.0, 1), (0.5, 4), (-4.0, 3)]:
        x = torch.tensor(x0, requires_grad=True)
        for _ in range(times):
            (x**3 - 2 * x).backward()
        assert math.isclose(SOLUTIONS["accumulated-grad"](x0, times), x.grad.item(), rel_tol=1e-6)


def test_holm_adjusted_is_statsmodels_holm_sidak():
    from statsmodels.stats.multitest import multipletests

    g = torch.Generator().manual_seed(0)
    for m in (1, 2, 3, 9, 40):
        p = (torch.rand(m, generator=g, dtype=torch.float64) ** 3).tolist()
        assert SOLUTIONS["holm-adjusted"](p) == pytest.approx(list(multipletests(p, method="holm-sidak")[1]))


def test_the_corrected_wilson_interval_is_newcombes_closed_form():
    z = 1.96
    for k, n in [(0, 1), (1, 1), (0, 10), (3, 7), (5, 10), (46, 65), (69, 135), (999, 1000), (130, 130)]:
        p, twice = k / n, 2 * (n + z * z)
        low = 2 * n * p + z * z - 1 - z * math.sqrt(z * z - 2 - 1 / n + 4 * p * (n * (1 - p) + 1))
        high = 2 * n * p + z * z + 1 + z * math.sqrt(z * z + 2 - 1 / n + 4 * p * (n * (1 - p) - 1)) if k < n else twice
        expected = (low / twice if k else 0.0, high / twice)
        assert SOLUTIONS["wilson-interval"](k, n) == pytest.approx(expected, abs=1e-12)


def test_ipo_loss_is_smallest_at_the_target_margin():
    margins = torch.linspace(0, 10, 101)  # 0.1 apart
    zero = torch.zeros(101)
    losses = torch.stack([SOLUTIONS["ipo-loss"](m[None], zero[:1], zero[:1], zero[:1], 0.1) for m in margins])
    assert margins[losses.argmin()].item() == pytest.approx(5.0) and losses.min().item() == pytest.approx(0.0)


def test_the_addition_checker_is_the_courses_reward():
    from course_lib.tasks import addition_reward

    for case in EXERCISES["addition-checker"].cases():
        assert addition_reward(*case.args) == case.expected == SOLUTIONS["addition-checker"](*case.args)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor, torch.quantize_per_channel")
def test_int8_zero_point_is_pytorchs_per_channel_affine_quantization():
    g = torch.Generator().manual_seed(0)
    for w in (torch.randn(32, 64, generator=g) * 0.05 + 0.02, torch.rand(8, 16, generator=g), -torch.rand(4, 8)):
        q, scale, zero_point = SOLUTIONS["int8-zero-point"](w)
        theirs = torch.quantize_per_channel(w, scale.double(), zero_point, 0, torch.quint8).int_repr()
        assert (theirs.int() - q.int()).abs().max() <= 1 and (theirs == q).float().mean() > 0.99  # ties may round apart
        w_hat = (q.float() - zero_point[:, None]) * scale[:, None]
        assert ((w - w_hat).abs() <= scale[:, None] / 2 * (1 + 1e-4)).all()  # within half a step
        assert (w_hat[w == 0] == 0).all()


def test_the_acceptance_rate_is_what_the_acceptance_rule_does():
    from course_lib.speculative import accept_draft

    p = torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])
    q = torch.tensor([[0.1, 0.1, 0.1, 0.3, 0.4]])
    g, n = torch.Generator().manual_seed(0), 4000
    kept = sum(accept_draft(p, q, [int(torch.multinomial(q[0], 1, generator=g))], g)[0] for _ in range(n))
    rate = SOLUTIONS["draft-acceptance"](p[0], q[0]).item()
    assert abs(kept / n - rate) < 5 * (rate * (1 - rate) / n) ** 0.5


def test_residual_rows_is_the_courses_residual_distribution():
    from course_lib.speculative import residual_distribution

    for case in EXERCISES["residual-rows"].cases():
        p, q, draft_ids = case.args
        full = torch.zeros_like(p).index_copy(-1, draft_ids, q)  # the draft's q in the target's vocabulary
        assert torch.allclose(residual_distribution(p, full), case.expected)


# == every solution and every typical mistake against the visible cases ==================


def test_every_exercise_has_a_solution_and_mistakes():
    assert set(SOLUTIONS) == set(EXERCISES) == set(MISTAKES)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_checker_accepts_a_correct_solution(name):
    result = check(name, SOLUTIONS[name])
    assert result, repr(result)
    assert repr(result).startswith(f"✅ {name}: all ")


@pytest.mark.parametrize("name, k", [(n, k) for n, ms in MISTAKES.items() for k in range(len(ms))])
@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom:UserWarning")  # a mistake on a 1-wide case
def test_checker_rejects_typical_mistakes(name, k):
    """Each typical mistake fails a VISIBLE case: a student's ✅ means what the grader will say."""
    result = check(name, MISTAKES[name][k])
    assert not result
    message = repr(result)
    assert message.startswith(f"❌ {name}: case ")
    for part in ("input:", "expected:", "got:", "hint"):
        assert part in message
