import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib.attention import (
    AttentionHead,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    causal_mask,
    scaled_dot_product_attention,
    softmax,
)

# -- softmax -----------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 10.0, 1000.0])
def test_softmax_matches_torch_even_for_large_logits(scale, randn):
    x = randn(4, 7) * scale
    assert torch.allclose(softmax(x), torch.softmax(x, dim=-1), atol=1e-6)
    assert torch.allclose(softmax(x, dim=0), torch.softmax(x, dim=0), atol=1e-6)
    assert torch.isfinite(softmax(x)).all()


def test_softmax_of_fully_masked_row_is_zero_not_nan():
    x = torch.tensor([[0.0, float("-inf")], [float("-inf"), float("-inf")]])
    assert softmax(x).tolist() == [[1.0, 0.0], [0.0, 0.0]]


def test_scaling_sharpens_softmax():
    scores = torch.tensor([1.0, 2.0, 3.0])
    assert softmax(scores * 10).max() > 0.99 > softmax(scores).max()


# -- scaled dot-product attention ------------------------------------------------------------


@pytest.mark.parametrize("mask_kind", [None, "causal", "bool", "additive"])
def test_attention_matches_pytorch(mask_kind, randn, generator):
    q, k, v = randn(2, 3, 5, 8), randn(2, 3, 5, 8), randn(2, 3, 5, 6)
    mask = {
        None: None,
        "causal": causal_mask(5),
        # random per-batch mask (broadcast over heads); the diagonal keeps every row non-empty
        "bool": (torch.rand(2, 1, 5, 5, generator=generator) > 0.3) | torch.eye(5, dtype=torch.bool),
        "additive": randn(5, 5),
    }[mask_kind]
    ours = scaled_dot_product_attention(q, k, v, mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_attention_with_large_logits_stays_finite(randn):
    q, k, v = randn(1, 4, 16) * 100, randn(1, 4, 16) * 100, randn(1, 4, 16)
    ours = scaled_dot_product_attention(q, k, v, causal_mask(4))
    assert torch.isfinite(ours).all()
    assert torch.allclose(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-4)


def test_attention_returns_weights_that_are_distributions(randn):
    q, k, v = randn(2, 5, 4), randn(2, 5, 4), randn(2, 5, 4)
    out, weights = scaled_dot_product_attention(q, k, v, causal_mask(5), return_weights=True)
    assert weights.shape == (2, 5, 5)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 5))
    assert (weights.triu(1) == 0).all()  # no weight on the future
    assert torch.allclose(out, weights @ v)


def test_attention_dropout_zeroes_weights_and_rescales():
    torch.manual_seed(0)
    q = k = torch.zeros(1, 200, 4)
    v = torch.ones(1, 200, 1)
    out = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    # Uniform weights 1/200, half dropped and the rest doubled: the mean output stays near 1.
    assert 0.8 < out.mean().item() < 1.2 and out.std().item() > 0.01


def test_mask_that_does_not_broadcast_raises(randn):
    q = randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not broadcast to the scores' shape \(2, 5, 5\)"):
        scaled_dot_product_attention(q, q, q, causal_mask(4))


def test_causal_mask_is_lower_triangular():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]


# -- modules -------------------------------------------------------------------------------------


def make_modules(causal=True, bias=True, d_model=12, n_heads=3, T=10):
    torch.manual_seed(0)
    wrapper = MultiHeadAttentionWrapper(d_model, n_heads, T, causal=causal, bias=bias)
    fused = MultiHeadAttention.from_wrapper(wrapper)
    fast = MultiHeadAttention.from_wrapper(wrapper, fast=True)
    return wrapper, fused, fast


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_wrapper_fused_and_fast_compute_the_same_function(causal, bias, randn):
    modules = make_modules(causal, bias)
    x = randn(2, 7, 12)
    outputs, grads = [], []
    for module in modules:
        xi = x.clone().requires_grad_()
        out = module(xi)
        (out * torch.arange(out.numel()).view_as(out).sin()).sum().backward()
        outputs.append(out)
        grads.append(xi.grad)
    for out, grad in zip(outputs[1:], grads[1:]):
        assert torch.allclose(out, outputs[0], atol=1e-5)
        assert torch.allclose(grad, grads[0], atol=1e-5)
    # Parameter gradients agree too: the fused projection's rows are the heads' rows.
    wrapper, fused, fast = modules
    q_rows = torch.cat([h.query.weight.grad for h in wrapper.heads])
    assert torch.allclose(fused.c_attn.weight.grad[:12], q_rows, atol=1e-5)
    assert torch.allclose(fast.c_attn.weight.grad, fused.c_attn.weight.grad, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_fused_matches_torch_multihead_attention(causal, randn):
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4, context_length=8, causal=causal).eval()
    ref = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.c_attn.weight)
        ref.in_proj_bias.copy_(ours.c_attn.bias)
        ref.out_proj.weight.copy_(ours.c_proj.weight)
        ref.out_proj.bias.copy_(ours.c_proj.bias)
    x = randn(3, 8, 16)
    forbidden = ~causal_mask(8) if causal else None  # nn.MultiheadAttention: True = not allowed
    expected, expected_weights = ref(x, x, x, attn_mask=forbidden, average_attn_weights=False)
    out, weights = ours(x, return_weights=True)
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.allclose(weights, expected_weights, atol=1e-6)


@pytest.mark.parametrize("fast", [False, True])
def test_causality_future_tokens_never_change_the_past(fast, randn):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, context_length=12, fast=fast).eval()
    x = randn(2, 12, 16)
    changed = x.clone()
    t = 5
    changed[:, t + 1 :] = randn(2, 12 - t - 1, 16)
    assert torch.allclose(mha(x)[:, : t + 1], mha(changed)[:, : t + 1], atol=1e-6)
    assert not torch.allclose(mha(x)[:, t + 1 :], mha(changed)[:, t + 1 :])


@pytest.mark.parametrize("module", ["head", "fused", "fast"])
def test_without_positions_attention_is_permutation_equivariant(module, randn, generator):
    torch.manual_seed(0)
    m = {
        "head": AttentionHead(16, 8, 10, causal=False),
        "fused": MultiHeadAttention(16, 4, 10, causal=False),
        "fast": MultiHeadAttention(16, 4, 10, causal=False, fast=True),
    }[module].eval()
    x = randn(2, 10, 16)
    perm = torch.randperm(10, generator=generator)
    assert torch.allclose(m(x)[:, perm], m(x[:, perm]), atol=1e-5)


def test_single_head_module_matches_functional_attention(randn):
    torch.manual_seed(0)
    head = AttentionHead(8, 4, context_length=6)
    x = randn(2, 6, 8)
    expected = F.scaled_dot_product_attention(head.query(x), head.key(x), head.value(x), is_causal=True)
    assert torch.allclose(head(x), expected, atol=1e-6)


def test_dropout_only_in_training_mode(randn):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, context_length=8, dropout=0.5)
    x = randn(2, 8, 16)
    mha.train()
    assert not torch.allclose(mha(x), mha(x))
    mha.eval()
    assert torch.allclose(mha(x), mha(x))


def test_bad_configurations_raise(randn):
    with pytest.raises(ValueError, match="d_model=10 is not divisible by n_heads=3"):
        MultiHeadAttention(10, 3, context_length=8)
    with pytest.raises(ValueError, match="d_model=10 is not divisible by n_heads=4"):
        MultiHeadAttentionWrapper(10, 4, context_length=8)
    mha = MultiHeadAttention(8, 2, context_length=4)
    with pytest.raises(ValueError, match="sequence of 5 tokens is longer than the context length 4"):
        mha(randn(1, 5, 8))
    with pytest.raises(ValueError, match="longer than the context length 4"):
        AttentionHead(8, 4, context_length=4)(randn(1, 5, 8))
    with pytest.raises(ValueError, match="same width"):
        scaled_dot_product_attention(randn(2, 3), randn(2, 4), randn(2, 4))
