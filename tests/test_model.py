import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.model import (
    GPT,
    GPTConfig,
    count_parameters,
    gpt3_weight_table,
    parameter_formula,
    tie_weights,
)

TINY = dict(vocab_size=101, context_length=32, n_layers=2, n_heads=4, d_model=32)


def test_grouped_query_attention_shares_key_value_heads():
    config = GPTConfig.llama_like(vocab_size=50, context_length=16, n_layers=1, n_heads=6, n_kv_heads=2, d_model=24)
    attn = GPT(config).transformer.h[0].attn
    assert attn.c_attn.weight.shape == (24 + 2 * 2 * 4, 24)  # queries 6 x 4, keys and values 2 x 4 each
    cache = GPT(config).new_cache()
    GPT(config)(torch.zeros(1, 5, dtype=torch.long), cache=cache)
    assert cache.layers[0].keys.shape[1] == 2  # the cache holds the 2 shared heads, not 6
    with pytest.raises(ValueError, match="n_heads=6 is not a multiple of n_kv_heads=4"):
        GPTConfig.llama_like(n_heads=6, n_kv_heads=4, d_model=24)


# -- behaviour ------------------------------------------------------------------------------------


@pytest.mark.parametrize("positional", ["none", "learned", "sinusoidal", "rope", "alibi"])
@pytest.mark.parametrize("pre_norm", [True, False])
def test_every_variant_is_causal(positional, pre_norm):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY, positional=positional, pre_norm=pre_norm)).eval()
    a = torch.randint(0, 101, (1, 20), generator=torch.Generator().manual_seed(4))
    b = a.clone()
    b[0, 12:] = (b[0, 12:] + 1) % 101
    with torch.no_grad():
        assert torch.allclose(model(a)[0, :12], model(b)[0, :12], atol=1e-5)


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "alibi"])
def test_fast_and_teaching_paths_agree(positional):
    torch.manual_seed(0)
    fast = GPT(GPTConfig(**TINY, positional=positional, fast=True)).eval()
    slow = GPT(GPTConfig(**TINY, positional=positional, fast=False)).eval()
    slow.load_state_dict(fast.state_dict())
    idx = torch.randint(0, 101, (2, 24), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.allclose(fast(idx), slow(idx), atol=1e-5)


def test_untrained_loss_is_near_log_vocab():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=500, context_length=64, n_layers=2, n_heads=4, d_model=64)).eval()
    idx = torch.randint(0, 500, (4, 64), generator=torch.Generator().manual_seed(6))
    loss = F.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
    assert abs(loss.item() - math.log(500)) < 0.1


def test_weight_tying_shares_one_tensor():
    model = GPT(GPTConfig(**TINY))
    assert model.lm_head.weight is model.transformer.wte.weight
    untied = GPT(GPTConfig(**TINY, tie_weights=False))
    assert untied.lm_head.weight is not untied.transformer.wte.weight


def test_extrapolation_beyond_context():
    torch.manual_seed(0)
    long = torch.randint(0, 101, (1, 48), generator=torch.Generator().manual_seed(7))
    for positional in ("none", "sinusoidal", "rope", "alibi"):
        assert GPT(GPTConfig(**TINY, positional=positional))(long).shape == (1, 48, 101)
    with pytest.raises(ValueError, match="learned position embeddings stop at 31"):
        GPT(GPTConfig(**TINY, positional="learned"))(long)


# -- counting --------------------------------------------------------------------------------------


def test_gpt2_small_has_124m_parameters():
    model = GPT(GPTConfig.gpt2())
    counts = count_parameters(model)
    assert counts["total"] == model.num_parameters() == 124_439_808
    assert counts == parameter_formula(GPTConfig.gpt2())
    assert counts["token embedding"] == 50257 * 768 and counts["LM head"] == 0


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tie_weights": False},
        {"bias": False},
        {"norm": "rmsnorm"},
        {"ffn": "swiglu"},
        {"positional": "rope"},
        {"pre_norm": False},
    ],
)
def test_formula_matches_model_for_every_variant(overrides):
    config = GPTConfig(**TINY, **overrides)
    assert count_parameters(GPT(config)) == parameter_formula(config)


def test_gpt3_table_total():
    table = gpt3_weight_table()
    assert sum(count for _, _, count in table) == 175_181_291_520
    assert dict((n, c) for n, _, c in table)["Up-projection"] == 57_982_058_496


# -- bad configurations -------------------------------------------------------------------------------


def test_bad_configs_raise_clear_errors():
    with pytest.raises(ValueError, match="head dimension must be even.*= 5"):
        GPTConfig(vocab_size=10, d_model=20, n_heads=4, positional="rope")
    with pytest.raises(ValueError, match="unknown positional 'absolute'; choose one of none, learned"):
        GPTConfig(positional="absolute")
    with pytest.raises(ValueError, match="unknown norm"):
        GPTConfig(norm="batchnorm")
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_heads=4"):
        GPTConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="unknown GPT-2 size"):
        GPTConfig.gpt2("gpt2-huge")
    model = GPT(GPTConfig(**TINY, tie_weights=False))
    model.lm_head = torch.nn.Linear(16, 101, bias=False)
    with pytest.raises(ValueError, match=r"cannot tie the LM head \(101, 16\) to the token embedding \(101, 32\)"):
        tie_weights(model)
