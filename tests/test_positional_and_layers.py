import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib import layers, positional
from course_lib.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    interleaved_to_halves,
    rope_interleaved,
    sinusoidal_encoding,
)

g = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=g)


# -- sinusoidal ----------------------------------------------------------------------------------


def test_sinusoidal_known_values():
    pe = sinusoidal_encoding(4, 6)
    assert pe.shape == (4, 6)
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))  # sin 0, cos 0
    assert pe[1, 0].item() == pytest.approx(math.sin(1.0))
    assert pe[3, 2].item() == pytest.approx(math.sin(3 / 10000 ** (2 / 6)))
    assert pe[3, 5].item() == pytest.approx(math.cos(3 / 10000 ** (4 / 6)))


@pytest.mark.parametrize("k", [1, 5, 17])
def test_sinusoidal_shift_is_a_fixed_rotation(k):
    d = 16
    pe = sinusoidal_encoding(60, d)
    freqs = 10000 ** (-torch.arange(0, d, 2) / d)
    M = torch.zeros(d, d)  # block-diagonal rotation by k * freq_i, independent of the position
    for i, w in enumerate(freqs.tolist()):
        c, s = math.cos(k * w), math.sin(k * w)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])  # row vector (sin, cos) @ M
    assert torch.allclose(pe[:-k] @ M, pe[k:], atol=1e-4)
    # and a least-squares fit finds the same single matrix for every position
    fitted = torch.linalg.lstsq(pe[:-k].double(), pe[k:].double()).solution
    assert torch.allclose(pe[:-k].double() @ fitted, pe[k:].double(), atol=1e-5)


def test_sinusoidal_offset_and_odd_dimension():
    assert torch.allclose(sinusoidal_encoding(5, 8, offset=3), sinusoidal_encoding(8, 8)[3:])
    with pytest.raises(ValueError, match="even dimension"):
        sinusoidal_encoding(4, 7)


# -- learned -------------------------------------------------------------------------------------


def test_learned_positions_and_their_limit():
    emb = LearnedPositionalEmbedding(8, 4)
    assert torch.equal(emb(3, offset=2), emb.weight[2:5])
    with pytest.raises(ValueError, match="asked for positions 6..8, but learned position embeddings stop at 7"):
        emb(3, offset=6)


# -- RoPE -------------------------------------------------------------------------------------------


def test_rope_matches_the_rotation_matrix_written_out():
    D, m = 6, 3
    x = randn(1, D)
    theta = 10000 ** (-torch.arange(0, D, 2) / D)
    R = torch.zeros(D, D)
    for i, t in enumerate(theta.tolist()):
        c, s = math.cos(m * t), math.sin(m * t)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    rotated = rope_interleaved(x.view(1, 1, D).expand(1, m + 1, D).contiguous(), torch.arange(m + 1))[0, m]
    assert torch.allclose(rotated, R @ x[0], atol=1e-6)


def test_rope_conventions_are_a_permutation_apart():
    D = 8
    x = randn(2, 3, 5, D)
    perm = interleaved_to_halves(D)
    interleaved = rope_interleaved(x, torch.arange(5))
    halves = RotaryEmbedding(D).rotate(x[..., perm])
    assert torch.allclose(halves, interleaved[..., perm], atol=1e-6)


@pytest.mark.parametrize("rotate", ["halves", "interleaved"])
def test_rope_score_depends_only_on_relative_position(rotate):
    D = 16
    q, k = randn(D), randn(D)
    rope = RotaryEmbedding(D, max_positions=64)

    def at(v, pos):
        x = v.view(1, 1, 1, D)
        if rotate == "halves":
            return rope.rotate(x, offset=pos).flatten()
        return rope_interleaved(v.expand(pos + 1, D), torch.arange(pos + 1))[pos]

    for m, n in [(5, 2), (20, 17), (40, 37)]:  # same distance 3
        assert (at(q, m) @ at(k, n)).item() == pytest.approx((at(q, 3) @ at(k, 0)).item(), abs=1e-4)
    assert (at(q, 9) @ at(k, 0)).item() != pytest.approx((at(q, 3) @ at(k, 0)).item(), abs=1e-3)


def test_rope_offset_equals_full_sequence_and_cache_grows():
    rope = RotaryEmbedding(8, max_positions=4)
    q, k = randn(1, 2, 10, 8), randn(1, 2, 10, 8)
    full_q, full_k = rope(q, k)  # longer than the cache: it grows
    part_q, part_k = rope(q[:, :, 6:], k[:, :, 6:], offset=6)
    assert torch.allclose(full_q[:, :, 6:], part_q) and torch.allclose(full_k[:, :, 6:], part_k)
    assert rope.cos.shape[0] >= 10


def test_rope_keeps_norms_and_needs_even_dimension():
    x = randn(3, 7, 8)
    assert torch.allclose(RotaryEmbedding(8).rotate(x).norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    with pytest.raises(ValueError, match="even dimension"):
        RotaryEmbedding(7)


# -- ALiBi ------------------------------------------------------------------------------------------


def test_alibi_slopes_match_the_paper():
    assert alibi_slopes(8).tolist() == pytest.approx([2 ** -(i + 1) for i in range(8)])
    assert alibi_slopes(4).tolist() == pytest.approx([2 ** -(2 * (i + 1)) for i in range(4)])
    six = alibi_slopes(6).tolist()
    assert six[:4] == pytest.approx(alibi_slopes(4).tolist()) and six[4:] == pytest.approx(
        alibi_slopes(8).tolist()[0:4:2]
    )


def test_alibi_bias_penalises_distance():
    bias = alibi_bias(2, 4)
    assert bias.shape == (2, 4, 4)
    assert bias[0, 3].tolist() == pytest.approx([-3 * 2**-4, -2 * 2**-4, -1 * 2**-4, 0])
    assert torch.allclose(alibi_bias(2, 2, offset=2), bias[:, 2:])


# -- layers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_matches_torch(bias):
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


def test_rmsnorm_matches_torch():
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


def test_feedforward_and_swiglu_shapes_and_formula():
    torch.manual_seed(0)
    ff = layers.FeedForward(8)
    x = randn(2, 3, 8)
    assert ff.c_fc.out_features == 32
    assert torch.allclose(ff(x), ff.c_proj(F.gelu(ff.c_fc(x), approximate="tanh")), atol=1e-6)
    sw = layers.SwiGLU(12)
    assert sw.gate_proj.out_features == 32
    x = randn(2, 3, 12)
    assert torch.allclose(sw(x), sw.down_proj(F.silu(sw.gate_proj(x)) * sw.up_proj(x)), atol=1e-6)


def test_module_docstring_documents_the_pairing_convention():
    assert "halves" in positional.__doc__ and "interleaved" in positional.__doc__


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
    torch.testing.assert_close(gx_fast, gx_slow, atol=1e-4, rtol=1e-4)
