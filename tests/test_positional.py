"""Position information: sinusoidal, learned, RoPE (both pairing conventions), ALiBi."""

import math

import pytest
import torch

from course_lib import positional
from course_lib.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    interleaved_to_halves,
    rope_interleaved,
    sinusoidal_encoding,
)

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


def test_rope_matches_the_rotation_matrix_written_out(randn):
    D, m = 6, 3
    x = randn(1, D)
    theta = 10000 ** (-torch.arange(0, D, 2) / D)
    R = torch.zeros(D, D)
    for i, t in enumerate(theta.tolist()):
        c, s = math.cos(m * t), math.sin(m * t)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    rotated = rope_interleaved(x.view(1, 1, D).expand(1, m + 1, D).contiguous(), torch.arange(m + 1))[0, m]
    assert torch.allclose(rotated, R @ x[0], atol=1e-6)


def test_rope_conventions_are_a_permutation_apart(randn):
    D = 8
    x = randn(2, 3, 5, D)
    perm = interleaved_to_halves(D)
    interleaved = rope_interleaved(x, torch.arange(5))
    halves = RotaryEmbedding(D).rotate(x[..., perm])
    assert torch.allclose(halves, interleaved[..., perm], atol=1e-6)


@pytest.mark.parametrize("rotate", ["halves", "interleaved"])
def test_rope_score_depends_only_on_relative_position(rotate, randn):
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


def test_rope_offset_equals_full_sequence_and_cache_grows(randn):
    rope = RotaryEmbedding(8, max_positions=4)
    q, k = randn(1, 2, 10, 8), randn(1, 2, 10, 8)
    full_q, full_k = rope(q, k)  # longer than the cache: it grows
    part_q, part_k = rope(q[:, :, 6:], k[:, :, 6:], offset=6)
    assert torch.allclose(full_q[:, :, 6:], part_q) and torch.allclose(full_k[:, :, 6:], part_k)
    assert rope.cos.shape[0] >= 10


def test_rope_keeps_norms_and_needs_even_dimension(randn):
    x = randn(3, 7, 8)
    assert torch.allclose(RotaryEmbedding(8).rotate(x).norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    with pytest.raises(ValueError, match="even dimension"):
        RotaryEmbedding(7)


def test_module_docstring_documents_the_pairing_convention():
    assert "halves" in positional.__doc__ and "interleaved" in positional.__doc__


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
