"""Device bugs found without a GPU: every course_lib path that builds tensors beside a model
runs here with the model on PyTorch's ``meta`` device. A tensor made on the CPU (a mask, a
position table, a prompt, a padding row) then meets a meta tensor and fails, exactly where it
would fail on CUDA. Functions that read values back (``.item()``, sampling with a CPU
generator, stopping at end-of-text) cannot run on meta; ``python3 course.py test --gpu`` runs
every notebook on a real GPU for those.
"""

import pytest
import torch

from course_lib.attention import KVCache, MultiHeadAttention, causal_mask, scaled_dot_product_attention
from course_lib.classification import GPTClassifier, pad_batch
from course_lib.generation import generate
from course_lib.instruct import collate, instruction_loss
from course_lib.lora import apply_lora, merge_lora
from course_lib.mlp_lm import MLPLanguageModel
from course_lib.model import GPT, GPTConfig
from course_lib.training import lm_loss

META = torch.device("meta")
POSITIONAL = ["none", "learned", "sinusoidal", "rope", "alibi"]


def on_meta(**overrides) -> GPT:
    config = dict(vocab_size=64, context_length=16, n_layers=2, n_heads=2, d_model=16) | overrides
    return GPT(GPTConfig(**config)).to(META).eval()


def cpu_ids(*shape) -> torch.Tensor:
    return torch.randint(0, 64, shape)  # made on the CPU, as a student's prompt is


@pytest.mark.parametrize("positional", POSITIONAL)
@pytest.mark.parametrize("fast", [True, False])
def test_the_forward_pass_builds_its_masks_and_positions_on_the_models_device(positional, fast):
    model = on_meta(positional=positional, fast=fast)
    for T in (1, 7, 16):
        assert model(cpu_ids(2, T).to(META)).device == META


@pytest.mark.parametrize("positional", POSITIONAL)
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_past_the_context_follows_the_model(positional, use_cache):
    """A CPU prompt, a model elsewhere, more tokens than the context holds (the cache slides)."""
    model = on_meta(positional=positional)
    out = generate(model, cpu_ids(2, 5), 20, greedy=True, use_cache=use_cache)
    assert out.device == META and out.shape == (2, 25)


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_the_kv_cache_and_grouped_heads_live_on_the_models_device(n_kv_heads):
    model = on_meta(positional="rope", n_kv_heads=n_kv_heads)
    cache = model.new_cache()
    model(cpu_ids(1, 6).to(META), cache=cache)
    model(cpu_ids(1, 1).to(META), cache=cache)
    cache.truncate(3)
    assert model(cpu_ids(1, 2).to(META), cache=cache).device == META
    assert isinstance(cache, KVCache)


@pytest.mark.parametrize("positional", POSITIONAL)
def test_the_static_cache_and_its_masks_live_on_the_models_device(positional):
    """generate_batch's path: a CPU padding vector, a prefill of left-padded rows, decoding
    steps past the context (positions clamped), all beside a model elsewhere."""
    from course_lib.generation import decode_step

    model = on_meta(positional=positional, n_kv_heads=1)
    cache = model.new_static_cache(torch.tensor([0, 3]), 24)  # pad made on the CPU
    assert cache.keys.device == META and cache.slot.device == META
    with torch.no_grad():
        assert model(cpu_ids(2, 5).to(META), cache=cache).device == META
        for _ in range(18):  # slots 5..22: positions past the context of 16 stay in range
            assert decode_step(model, cache, cpu_ids(2, 1).to(META)).shape == (2, 64)


@pytest.mark.parametrize("scheme", [{}, {"fast": True}, {"rotary": True}, {"alibi": True}])
def test_attention_past_its_context_rebuilds_its_tables_on_its_device(scheme):
    """Notebook 06 evaluates on windows longer than training: the rotary and ALiBi tables are
    then rebuilt for the longer length, and must be built where the module lives."""
    attention = MultiHeadAttention(16, 2, context_length=8, extrapolate=True, **scheme).to(META)
    for T in (5, 20, 40):
        assert attention(torch.randn(2, T, 16, device=META)).device == META
    q = k = v = torch.randn(2, 5, 8, device=META)
    assert scaled_dot_product_attention(q, k, v, causal_mask(5, device=META)).device == META


def test_the_classifier_reads_cpu_lengths_beside_a_model_elsewhere():
    classifier = GPTClassifier(on_meta(positional="rope"), 3).to(META)
    ids, lengths = pad_batch([[1, 2, 3], [4, 5]], 0, 16)  # both on the CPU
    assert classifier(ids.to(META), lengths).shape == (2, 3)


def test_lora_layers_are_made_and_merged_on_the_models_device():
    model = on_meta()
    apply_lora(model, ["c_attn"], r=2)
    assert all(p.device == META for p in model.parameters())
    assert model(cpu_ids(1, 4).to(META)).device == META
    merge_lora(model)
    assert all(p.device == META for p in model.parameters())


def test_losses_of_the_training_loops_on_another_device():
    model = on_meta()
    x, y = cpu_ids(2, 8).to(META), cpu_ids(2, 8).to(META)
    assert lm_loss(model, x, y).device == META
    inputs, targets = collate([([1, 2, 3, 4], 2), ([5, 6, 7], 1)], pad_id=0)
    assert instruction_loss(model, inputs.to(META), targets.to(META)).device == META


def test_the_mlp_language_model_on_another_device():
    model = MLPLanguageModel(vocab_size=64, context=3).to(META)
    assert model(cpu_ids(2, 3).to(META)).device == META
