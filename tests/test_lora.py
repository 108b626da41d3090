"""LoRA from scratch, checked against its definition, against merging, and against peft."""

import pytest
import torch
import torch.nn as nn

from course_lib.lora import LoRALinear, apply_lora, merge_lora
from course_lib.model import count_trainable

TARGETS = ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]


def test_a_wrapped_layer_starts_identical_and_scales_by_alpha_over_r():
    torch.manual_seed(0)
    base = nn.Linear(12, 7)
    lora = LoRALinear(base, r=4, alpha=10)
    x = torch.randn(3, 5, 12)
    assert torch.equal(lora(x), base(x))  # B = 0: the update is zero
    assert lora.lora_A.abs().sum() > 0 and not base.weight.requires_grad
    with torch.no_grad():
        lora.lora_B.normal_()
    expected = x @ base.weight.T + base.bias + (10 / 4) * x @ lora.lora_A.T @ lora.lora_B.T
    torch.testing.assert_close(lora(x), expected)
    torch.testing.assert_close(lora.delta_weight(), 2.5 * lora.lora_B @ lora.lora_A)


def test_merging_folds_the_update_into_the_weight(tiny_gpt):
    model = tiny_gpt(vocab_size=50).eval()
    apply_lora(model, TARGETS, r=4, alpha=8)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)
    idx = torch.randint(0, 50, (2, 16))
    before = model(idx)
    assert merge_lora(model) == 2 * len(TARGETS)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    torch.testing.assert_close(model(idx), before, atol=1e-5, rtol=1e-5)


def test_apply_lora_trains_only_the_low_rank_matrices(tiny_gpt):
    model = tiny_gpt(vocab_size=50).eval()
    _, total = count_trainable(model)
    names = apply_lora(model, ["attn.c_attn", "mlp.c_fc"], r=2)
    assert names == ["transformer.h.0.attn.c_attn", "transformer.h.0.mlp.c_fc",
                     "transformer.h.1.attn.c_attn", "transformer.h.1.mlp.c_fc"]  # fmt: skip
    trainable, total_after = count_trainable(model)
    assert trainable == 2 * (2 * (32 + 96) + 2 * (32 + 128))  # r * (in + out) per wrapped layer
    assert total_after == total + trainable
    assert all(("lora_" in n) == p.requires_grad for n, p in model.named_parameters())


def test_lora_errors_name_the_problem(tiny_gpt):
    with pytest.raises(ValueError, match="rank r must be a positive integer, got 0"):
        LoRALinear(nn.Linear(4, 4), r=0)
    with pytest.raises(TypeError, match="wraps an nn.Linear, got Embedding"):
        LoRALinear(nn.Embedding(4, 4))
    with pytest.raises(ValueError, match=r"no linear layer of this model is named like \['attn.q_proj'\].*attn.c_attn"):
        apply_lora(tiny_gpt(vocab_size=50).eval(), ["attn.q_proj"])


def test_same_outputs_and_gradients_as_peft(tiny_gpt):
    peft = pytest.importorskip("peft")
    ours, theirs = tiny_gpt(vocab_size=50).eval(), tiny_gpt(vocab_size=50).eval()
    apply_lora(ours, TARGETS, r=4, alpha=16)
    theirs = peft.get_peft_model(
        theirs, peft.LoraConfig(r=4, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0, bias="none")
    )
    with torch.no_grad():
        for name, module in ours.named_modules():
            if isinstance(module, LoRALinear):
                module.lora_B.normal_(std=0.1)  # a trained-looking B, so the update is not zero
                peft_layer = theirs.base_model.model.get_submodule(name)
                peft_layer.lora_A["default"].weight.copy_(module.lora_A)
                peft_layer.lora_B["default"].weight.copy_(module.lora_B)
    idx = torch.randint(0, 50, (2, 16))
    out_ours, out_theirs = ours(idx), theirs(idx)
    torch.testing.assert_close(out_ours, out_theirs, atol=1e-5, rtol=1e-5)
    out_ours.square().mean().backward()
    out_theirs.square().mean().backward()
    for name, module in ours.named_modules():
        if isinstance(module, LoRALinear):
            peft_layer = theirs.base_model.model.get_submodule(name)
            torch.testing.assert_close(
                module.lora_A.grad, peft_layer.lora_A["default"].weight.grad, atol=1e-6, rtol=1e-4
            )
            torch.testing.assert_close(
                module.lora_B.grad, peft_layer.lora_B["default"].weight.grad, atol=1e-6, rtol=1e-4
            )
    assert count_trainable(ours)[0] == sum(p.numel() for p in theirs.parameters() if p.requires_grad)
