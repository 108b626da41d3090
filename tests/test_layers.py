"""Norms, activations and feed-forward layers, against PyTorch's own and the fused paths."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib import layers


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_matches_torch(bias, randn):
    ours, ref = layers.LayerNorm(10, bias=bias), nn.LayerNorm(10, bias=bias)
    with torch.no_grad():
        ours.weight.copy_(randn(10))
        ref.weight.copy_(ours.weight)
        if bias:
            ours.bias.copy_(randn(10))
            ref.bias.copy_(ours.bias)
    x = randn(4, 5, 10) * 3 + 7
    assert torch.allclose(ours(x), ref(x), atol=1e-5)
    y = layers.LayerNorm(10)(x)
    assert torch.allclose(y.mean(-1), torch.zeros(4, 5), atol=1e-5)
    assert torch.allclose(y.var(-1, unbiased=False), torch.ones(4, 5), atol=1e-3)


def test_rmsnorm_matches_torch(randn):
    ours, ref = layers.RMSNorm(10, eps=1e-6), torch.nn.RMSNorm(10, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(randn(10))
        ref.weight.copy_(ours.weight)
    x = randn(3, 10) * 5
    assert torch.allclose(ours(x), ref(x), atol=1e-5)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(approximate):
    x = torch.linspace(-8, 8, 1001)
    assert torch.allclose(layers.gelu(x, approximate), F.gelu(x, approximate=approximate), atol=1e-6)


def test_other_activations_and_errors():
    x = torch.linspace(-3, 3, 61)
    assert torch.equal(layers.relu(x), F.relu(x))
    assert torch.allclose(layers.silu(x), F.silu(x), atol=1e-6)
    with pytest.raises(ValueError, match="approximate must be"):
        layers.gelu(x, "erf")
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        layers.FeedForward(4, activation="swish")


def test_feedforward_and_swiglu_shapes_and_formula(randn):
    torch.manual_seed(0)
    ff = layers.FeedForward(8)
    x = randn(2, 3, 8)
    assert ff.c_fc.out_features == 32
    assert torch.allclose(ff(x), ff.c_proj(F.gelu(ff.c_fc(x), approximate="tanh")), atol=1e-6)
    sw = layers.SwiGLU(12)
    assert sw.gate_proj.out_features == 32
    x = randn(2, 3, 12)
    assert torch.allclose(sw(x), sw.down_proj(F.silu(sw.gate_proj(x)) * sw.up_proj(x)), atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda fast: layers.LayerNorm(24, fast=fast),
        lambda fast: layers.LayerNorm(24, bias=False, fast=fast),
        lambda fast: layers.RMSNorm(24, fast=fast),
        lambda fast: layers.FeedForward(24, 40, "gelu_tanh", fast=fast),
        lambda fast: layers.FeedForward(24, 40, "gelu", fast=fast),
        lambda fast: layers.FeedForward(24, 40, "relu", fast=fast),
        lambda fast: layers.SwiGLU(24, 40, fast=fast),
    ],
)
def test_fused_layers_compute_the_written_out_function(make):
    torch.manual_seed(0)
    slow, fast = make(False), make(True)
    with torch.no_grad():
        for p in slow.parameters():
            p.normal_()
    fast.load_state_dict(slow.state_dict())
    x = torch.randn(3, 5, 24, requires_grad=True)
    torch.testing.assert_close(fast(x), slow(x), atol=1e-5, rtol=1e-5)
    (gx_fast,) = torch.autograd.grad(fast(x).square().sum(), x)
    (gx_slow,) = torch.autograd.grad(slow(x).square().sum(), x)
    # float32 rounds relative to the terms of a sum, not to its result: an entry where large terms
    # cancel carries an error of the largest entries' size (4e-4 on an AVX2 CPU's kernels, here ~1e3)
    scale = gx_slow.abs().max().item()
    torch.testing.assert_close(gx_fast, gx_slow, atol=1e-6 * scale, rtol=1e-4)
