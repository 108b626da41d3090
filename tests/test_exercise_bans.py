"""Bans that hold: each function here computes its exercise's right answer with a function the exercise
bans, reached by a route other than calling it by its name (a default argument, a container, torch's
private namespaces, a re-export under another module's name). The check and the grader both refuse it,
saying what was reached; the right answer written by hand still passes."""

import math
import sys

import pytest
import torch
import torch.nn.functional as F

from course_lib import attention, classification, evaluation, model, positional, quantization, rl, speculative, tasks
from course_lib.exercises import EXERCISES, _same, call, check

TOOLS = {"cross_entropy": F.cross_entropy}  # a banned function kept in a container


def holm_by_default(p_values, holm=evaluation.holm):
    return holm(p_values)


def mcnemar_by_default(a, b, p=evaluation.mcnemar_p):
    return p(sum(x > y for x, y in zip(a, b)), sum(x < y for x, y in zip(a, b)))


def last_real_by_default(features, lengths, side, last=classification.last_real_token):
    return features[:, -1] if side == "left" else last(features, lengths)


def unpack_by_default(packed, *, unpack=quantization.unpack_int4):
    return unpack(packed)


def checker_by_default(prompt, answer, right=tasks.addition_answer):
    return 1.0 if answer.strip() == right(prompt) else 0.0


def alibi_by_default(slopes, T, bias=positional.alibi_bias):  # course_lib's bias, rescaled, the future masked
    H = len(slopes)
    distance = bias(H, T, dtype=torch.float64) / positional.alibi_slopes(H).double()[:, None, None]  # -(i - j)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return (slopes.double()[:, None, None] * distance).masked_fill(future, float("-inf")).to(slopes.dtype)


def llama_by_default(V, C, L, h, formula=model.parameter_formula, config=model.GPTConfig):
    shape = dict(vocab_size=V, d_model=C, n_layers=L, n_heads=1, ffn_hidden=h, bias=False, tie_weights=False)
    return formula(config(**shape, positional="rope", norm="rmsnorm", ffn="swiglu"))["total"]


def smoothed_by_default(logits, targets, eps, ce=F.cross_entropy):
    return ce(logits.double(), targets, label_smoothing=eps).to(logits.dtype)


def smoothed_from_a_container(logits, targets, eps):
    return TOOLS["cross_entropy"](logits.double(), targets, label_smoothing=eps).to(logits.dtype)


def smoothed_by_torch_c(logits, targets, eps):
    return torch._C._nn.cross_entropy_loss(logits.double(), targets, None, 1, -100, eps).to(logits.dtype)


def answer_loss_by_torch_c(logits, targets):
    logp = logits.double().log_softmax(dim=-1).transpose(1, 2)  # (B, V, T)
    return torch._C._nn.nll_loss_nd(logp, targets, None, 1, -100).to(logits.dtype)


def logsumexp_by_aten(x):
    return torch.ops.aten.logsumexp(x, [-1])


def rms_norm_by_aten(x, weight, eps):
    return torch.ops.aten.rms_norm(x, [x.shape[-1]], weight, eps)


def stretch_by_torch_c(table, new_length):
    return torch._C._nn.upsample_linear1d(table.T[None], [new_length], True, None)[0].T


def accumulated_by_the_engine(x0, times):
    x, engine = torch.tensor(x0, requires_grad=True), torch.autograd.Variable._execution_engine
    for _ in range(times):
        y = x**3 - 2 * x
        engine.run_backward((y,), (torch.ones_like(y),), False, False, (), True, True)
    return x.grad.item()


def adamw_by_another_module(w, g, lr, weight_decay):
    p = torch.nn.Parameter(w.clone())
    p.grad = g.clone()
    sys.modules["torch.optim.adamw"].AdamW([p], lr=lr, weight_decay=weight_decay).step()
    return p.detach()


def adamw_by_its_fused_kernel(w, g, lr, weight_decay):
    w, step = w.clone(), torch.tensor(1.0)  # the step count after this step, as AdamW passes it
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    torch._fused_adamw_(
        [w], [g.clone()], [m], [v], [], [step], lr=lr, beta1=0.9, beta2=0.999,
        weight_decay=weight_decay, eps=1e-8, amsgrad=False, maximize=False,
    )  # fmt: skip
    return w


def wilson_by_a_reexport(correct, n):  # the continuity-corrected ends, each Wilson's at half a count off
    low = rl.wilson_interval(correct - 0.5, n)[0] if correct > 0 else 0.0
    return low, rl.wilson_interval(correct + 0.5, n)[1] if correct < n else 1.0


def top_p_by_a_reexport(logits, p, keep):  # the nucleus or the `keep` most likely, whichever is larger
    return torch.maximum(speculative.filter_logits(logits, top_p=p), speculative.filter_logits(logits, top_k=keep))


def mha_by_torchs_class(d_model, n_heads):  # torch's attention has the same weights and biases
    return sum(p.numel() for p in torch.nn.MultiheadAttention(d_model, n_heads).parameters())


def mha_by_one_head(d_model, n_heads):  # course_lib's head, with biases, counted n_heads times
    head = attention.AttentionHead(d_model, d_model // n_heads, 1, bias=True)
    return n_heads * sum(p.numel() for p in head.parameters()) + d_model * d_model + d_model


def helper_that_calls_it(x):  # the student's own helper reaches the banned function
    return logsumexp_by_aten(x)


BYPASSES = [
    ("holm-adjusted", holm_by_default, "holm"),
    ("mcnemar-exact", mcnemar_by_default, "mcnemar_p"),
    ("alibi-bias", alibi_by_default, "alibi_bias"),
    ("llama-parameters", llama_by_default, "parameter_formula"),
    ("last-real-token", last_real_by_default, "last_real_token"),
    ("int4-unpack", unpack_by_default, "unpack_int4"),
    ("addition-checker", checker_by_default, "addition_answer"),
    ("label-smoothing", smoothed_by_default, "cross_entropy"),
    ("label-smoothing", smoothed_from_a_container, "cross_entropy"),
    ("label-smoothing", smoothed_by_torch_c, "_C"),
    ("answer-loss", answer_loss_by_torch_c, "_C"),
    ("logsumexp", logsumexp_by_aten, "ops"),
    ("logsumexp", helper_that_calls_it, "ops"),
    ("rms-norm", rms_norm_by_aten, "ops"),
    ("stretch-positions", stretch_by_torch_c, "_C"),
    ("accumulated-grad", accumulated_by_the_engine, "_execution_engine"),
    ("adamw-first-step", adamw_by_another_module, "AdamW"),
    ("adamw-first-step", adamw_by_its_fused_kernel, "_fused_adamw_"),
    ("wilson-interval", wilson_by_a_reexport, "wilson_interval"),
    ("top-p-min-keep", top_p_by_a_reexport, "filter_logits"),
    ("mha-parameters", mha_by_torchs_class, "MultiheadAttention"),
    ("mha-parameters", mha_by_one_head, "AttentionHead"),
]


@pytest.mark.parametrize("name, fn, reached", BYPASSES, ids=[f"{n}-{fn.__name__}" for n, fn, _ in BYPASSES])
def test_a_banned_function_reached_another_way_fails_the_check(name, fn, reached):
    message = repr(check(name, fn))
    assert message.startswith(f"❌ {name}: case 1 of"), message
    assert reached in message and "ban" in message, message


@pytest.mark.parametrize("name, fn, reached", BYPASSES, ids=[f"{n}-{fn.__name__}" for n, fn, _ in BYPASSES])
def test_the_grader_reports_the_bypass_it_detects(name, fn, reached):
    from course_lib.grading.student_process import _result

    header, payload = _result(fn, EXERCISES[name].cases()[0].args, list(EXERCISES[name].bans))
    assert payload == b"" and reached in header["error"] and "ban" in header["error"], header


def test_a_bypass_computes_the_right_answer_when_nothing_is_banned():
    """Each route above really answers its exercise: only the ban tells it from a right answer."""
    assert holm_by_default([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert accumulated_by_the_engine(2.0, 3) == pytest.approx(30.0)
    assert math.isclose(logsumexp_by_aten(torch.zeros(2)).item(), math.log(2), rel_tol=1e-6)
    named = [("alibi-bias", alibi_by_default), ("llama-parameters", llama_by_default)]
    named += [("mha-parameters", mha_by_torchs_class), ("mha-parameters", mha_by_one_head)]
    for name, fn in named:
        assert all(_same(call(fn, case.args), EXERCISES[name].expected(case)) for case in EXERCISES[name].cases())
    w, g = torch.tensor([1.0, -2.0]), torch.tensor([0.5, -30.0])
    assert torch.allclose(adamw_by_its_fused_kernel(w, g, 0.1, 0.5), adamw_by_another_module(w, g, 0.1, 0.5))


def test_a_right_answer_with_private_looking_names_of_its_own_still_passes():
    _cache = {}

    def logsumexp(x, _scale=1.0):
        _cache["m"] = m = x.max(dim=-1, keepdim=True).values
        m = torch.where(m == float("-inf"), 0.0, m)
        return (m + ((x - m) * _scale).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)

    assert check("logsumexp", logsumexp)
