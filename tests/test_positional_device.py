"""Positional tables are built on the device (and dtype) of what they meet.

There is no GPU in CI, so these tests use the ``meta`` device: a tensor built on the CPU next to
a module on ``meta`` either raises (as it would on CUDA: "Expected all tensors to be on the same
device") or lands on the CPU, and both are caught here. The case that failed on a GPU was a
rotary table regrown for a window longer than the one the model was built for (notebook 06).
"""

import pytest
import torch

from course_lib.attention import MultiHeadAttention
from course_lib.model import GPT, GPTConfig
from course_lib.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    rope_frequencies,
    rope_interleaved,
    sinusoidal_encoding,
)

META = torch.device("meta")


def test_rotary_table_regrows_on_the_modules_device():
    rope = RotaryEmbedding(head_dim=8, max_positions=4).to(META)
    q = torch.empty(2, 3, 10, 8, device=META)  # (B, H, T, D): T = 10 > the 4 positions built
    q_rot, k_rot = rope(q, q)
    assert q_rot.device == META and k_rot.device == META
    assert rope.cos.device == META and rope.sin.device == META
    assert rope.cos.shape[0] >= 10


def test_rotary_table_regrows_with_an_offset_on_the_modules_device():
    rope = RotaryEmbedding(head_dim=8, max_positions=4).to(META)
    x = torch.empty(1, 1, 1, 8, device=META)  # one new token at position 6 (a KV cache step)
    assert rope.rotate(x, offset=6).device == META
    assert rope.cos.device == META


def test_rotary_regrown_table_keeps_dtype_and_is_computed_in_float32():
    rope = RotaryEmbedding(head_dim=8, max_positions=4).to(torch.bfloat16)
    reference = RotaryEmbedding(head_dim=8, max_positions=64)  # float32 from the start
    x = torch.randn(1, 1, 20, 8, generator=torch.Generator().manual_seed(0))
    out = rope.rotate(x.to(torch.bfloat16))  # regrows the table past 4 positions
    assert out.dtype == torch.bfloat16
    assert rope.cos.dtype == torch.bfloat16
    n = rope.cos.shape[0]
    # the same values a float32 table gives, rounded once (not angles from a bf16 inv_freq)
    assert torch.equal(rope.cos, reference.cos[:n].to(torch.bfloat16))
    assert torch.equal(rope.sin, reference.sin[:n].to(torch.bfloat16))


def test_regrown_rotary_table_equals_one_built_long_enough():
    short, long = RotaryEmbedding(16, max_positions=3), RotaryEmbedding(16, max_positions=40)
    q = torch.randn(2, 2, 25, 16, generator=torch.Generator().manual_seed(1))
    assert torch.equal(short.rotate(q), long.rotate(q))


def test_functions_build_on_the_device_they_are_given():
    assert sinusoidal_encoding(10, 8, device=META).device == META
    assert sinusoidal_encoding(10, 8, dtype=torch.bfloat16).dtype == torch.bfloat16
    assert alibi_slopes(4, device=META).device == META
    bias = alibi_bias(4, 5, offset=3, device=META, dtype=torch.bfloat16)
    assert bias.device == META and bias.dtype == torch.bfloat16 and bias.shape == (4, 5, 8)
    assert rope_frequencies(8, device=META).device == META
    x = torch.empty(1, 6, 8, device=META)  # (B, T, D)
    assert rope_interleaved(x, torch.arange(6)).device == META  # CPU positions follow x


def test_device_arguments_do_not_change_the_values():
    assert torch.equal(sinusoidal_encoding(7, 6, device="cpu"), sinusoidal_encoding(7, 6))
    assert torch.equal(alibi_bias(2, 4, device="cpu"), alibi_bias(2, 4))


def test_learned_positions_follow_the_module():
    wpe = LearnedPositionalEmbedding(8, 4).to(META)
    assert wpe(5).device == META
    with pytest.raises(ValueError, match="stop at 7"):
        wpe(9)


@pytest.mark.parametrize("alibi, rotary", [(True, False), (False, True)])
def test_attention_past_its_context_on_meta(alibi, rotary):
    attn = MultiHeadAttention(16, 4, context_length=8, alibi=alibi, rotary=rotary, extrapolate=True)
    attn = attn.to(META)
    x = torch.empty(2, 20, 16, device=META)  # (B, T, C): T = 20 > context 8
    assert attn(x).shape == (2, 20, 16) and attn(x).device == META
    out, weights = attn(x, return_weights=True)  # the readable path builds its own mask
    assert out.device == META and weights.shape == (2, 4, 20, 20)


def tiny_gpt(positional: str) -> GPT:
    config = GPTConfig(vocab_size=50, context_length=8, n_layers=2, n_heads=2, d_model=16, positional=positional)
    return GPT(config)


@pytest.mark.parametrize("positional", ["none", "sinusoidal", "rope", "alibi"])
def test_gpt_on_meta_evaluated_past_its_window(positional):
    gpt = tiny_gpt(positional).to(META)
    for T in (8, 24, 64):  # the window it was built for, then 3x and 8x longer
        idx = torch.zeros(2, T, dtype=torch.long, device=META)  # (B, T)
        logits = gpt(idx)  # (B, T, V)
        assert logits.device == META and logits.shape == (2, T, 50)
    for name, buffer in gpt.named_buffers():
        assert buffer.device == META, name


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "alibi"])
def test_gpt_on_meta_with_a_cache_longer_than_its_window(positional):
    gpt = tiny_gpt(positional).to(META)
    cache = gpt.new_cache(max_length=20)
    assert gpt(torch.zeros(1, 6, dtype=torch.long, device=META), cache=cache).device == META
    for _ in range(10):  # one token at a time, on to position 15 (the window is 8)
        step = gpt(torch.zeros(1, 1, dtype=torch.long, device=META), cache=cache)  # (1, 1, V)
        assert step.device == META
    assert cache.length == 16


def test_learned_gpt_on_meta_refuses_a_longer_window_clearly():
    gpt = tiny_gpt("learned").to(META)
    assert gpt(torch.zeros(1, 8, dtype=torch.long, device=META)).device == META
    with pytest.raises(ValueError, match="context|stop at"):
        gpt(torch.zeros(1, 9, dtype=torch.long, device=META))


def test_gpt_on_cpu_past_its_window_matches_a_model_built_long_enough():
    """Regrowing the rotary table gives the numbers a table built long enough gives."""
    torch.manual_seed(0)
    short = tiny_gpt("rope")
    long = GPT(GPTConfig(**{**short.config.__dict__, "context_length": 64}))
    long.load_state_dict(short.state_dict())
    idx = torch.randint(0, 50, (2, 30), generator=torch.Generator().manual_seed(2))  # (B, T)
    assert torch.allclose(short(idx), long(idx), atol=1e-5)
