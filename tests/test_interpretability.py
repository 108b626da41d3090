"""course_lib.interpretability against TransformerLens (a test-only reference), by hand, and on bad input.

TransformerLens 4 replaced HookedTransformer by TransformerBridge: its hook points (hook_resid_pre,
hook_pattern, hook_z, ...) put on a Hugging Face model itself, with no weight processing unless
compatibility mode is asked for. So one random Hugging Face GPT-2 (and one LLaMA with RoPE and
grouped-query attention) is loaded into a course GPT and wrapped in a bridge, and both must cache,
ablate and patch the same numbers.
"""

import copy
import math

import numpy
import pytest
import torch
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformer_lens.FactoredMatrix import FactoredMatrix
from transformer_lens.head_detector import detect_head
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.patching import get_act_patch_attn_head_out_all_pos
from transformer_lens.utilities.matrix import composition_scores as composition_scores_tl

from course_lib import interpretability as interp
from course_lib.evaluation import t_quantile, wilson_interval
from course_lib.interpretability import (
    Cache,
    ProbeResult,
    ablate_heads,
    balanced_selectivity,
    capture,
    composition_score,
    composition_scores,
    control_task,
    copying_scores,
    fit_linear_probe,
    fraction_recovered,
    head_circuits,
    head_means,
    induction_scores,
    logit_attribution,
    logit_difference,
    logit_lens,
    patch_each_head,
    patch_heads,
    patch_resid,
    per_token_loss,
    previous_token_scores,
    probe,
    random_composition_scores,
    repeated_random_tokens,
    run_with_cache,
)
from course_lib.layers import LayerNorm, RMSNorm
from course_lib.model import GPT, GPTConfig
from course_lib.pretrained import load_gpt2_state_dict, load_llama_state_dict
from course_lib.training import lm_loss

V, T, LAYERS, HEADS, WIDTH = 101, 12, 2, 4, 32
SIZE = dict(n_layers=LAYERS, n_heads=HEADS, d_model=WIDTH)
CLOSE = dict(atol=1e-5, rtol=1e-4)


def hf_gpt2(initializer_range: float = 0.02):
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=V,
        n_positions=32,
        n_embd=WIDTH,
        n_layer=LAYERS,
        n_head=HEADS,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        initializer_range=initializer_range,
    )
    hf = transformers.GPT2LMHeadModel(config).eval()
    ours = load_gpt2_state_dict(GPT(GPTConfig.gpt2(vocab_size=V, context_length=32, **SIZE)), hf.state_dict())
    return hf, ours.eval()


def hf_llama():
    """RoPE, RMSNorm, SwiGLU and grouped-query attention (4 query heads share 2 key/value heads)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=V,
        hidden_size=WIDTH,
        intermediate_size=88,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rope_theta=500.0,
        tie_word_embeddings=False,
    )
    hf = transformers.LlamaForCausalLM(config).eval()
    ours_config = GPTConfig.llama_like(
        vocab_size=V,
        context_length=32,
        n_kv_heads=2,
        ffn_hidden=88,
        rope_base=500.0,
        norm_eps=config.rms_norm_eps,
        **SIZE,
    )
    return hf, load_llama_state_dict(GPT(ours_config), hf.state_dict()).eval()


BUILDERS = {"gpt2": hf_gpt2, "llama": hf_llama}


def bridge_of(hf, architecture: str) -> TransformerBridge:
    """TransformerLens' bridge on ``hf``. It needs a tokenizer: a word-level one over "t0".."t100",
    built here (nothing is downloaded), that reads ids written as text."""
    vocab = {f"t{i}": i for i in range(V)}
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")), unk_token="t0"
    )
    tokenizer.backend_tokenizer.pre_tokenizer = WhitespaceSplit()
    bridge = TransformerBridge.boot_transformers(architecture, hf_model=hf, tokenizer=tokenizer)
    bridge.cfg.default_prepend_bos = False
    return bridge


@pytest.fixture(scope="module", params=list(BUILDERS))
def pair(request):
    """(course GPT, TransformerLens bridge) with the same random weights."""
    hf, ours = BUILDERS[request.param]()
    return ours, bridge_of(hf, request.param)


def ids(seed: int, batch: int = 3) -> torch.Tensor:
    return torch.randint(0, V, (batch, T), generator=torch.Generator().manual_seed(seed))


def no_hooks_left(model: torch.nn.Module) -> bool:
    return all(
        not (
            m._forward_hooks or m._forward_pre_hooks or m._forward_hooks_with_kwargs or m._forward_pre_hooks_with_kwargs
        )
        for m in model.modules()
    )


# -- against TransformerLens ------------------------------------------------------------------


def test_cache_matches_transformer_lens(pair):
    ours, bridge = pair
    idx = ids(1)
    logits, cache = run_with_cache(ours, idx)
    with torch.no_grad():
        their_logits, theirs = bridge.run_with_cache(idx)
    torch.testing.assert_close(logits, their_logits, **CLOSE)
    assert len(cache.resid) == LAYERS + 1 and len(cache.attention) == len(cache.z) == LAYERS
    for layer in range(LAYERS):
        torch.testing.assert_close(cache.resid[layer], theirs[f"blocks.{layer}.hook_resid_pre"], **CLOSE)
        torch.testing.assert_close(cache.attention[layer], theirs[f"blocks.{layer}.attn.hook_pattern"], **CLOSE)
        torch.testing.assert_close(cache.z[layer], theirs[f"blocks.{layer}.attn.hook_z"], **CLOSE)
        # TransformerLens' per-head results, z_h @ W_O[h], stacked (heads of layers < layer + 1, B, T, C)
        results = theirs.stack_head_results(layer=layer + 1)[layer * HEADS :]  # (H, B, T, C)
        torch.testing.assert_close(cache.head_outputs(layer), results.permute(1, 2, 0, 3), **CLOSE)
    torch.testing.assert_close(cache.resid[LAYERS], theirs[f"blocks.{LAYERS - 1}.hook_resid_post"], **CLOSE)
    torch.testing.assert_close(cache.resid[LAYERS], theirs["ln_final.hook_in"], **CLOSE)


def test_logit_lens_matches_transformer_lens(pair):
    ours, bridge = pair
    idx = ids(2)
    logits, cache = run_with_cache(ours, idx)
    lens = logit_lens(ours, cache)
    assert lens.shape == (LAYERS + 1, 3, T, V)
    with torch.no_grad():
        _, theirs = bridge.run_with_cache(idx)
        for layer in range(LAYERS + 1):
            name = f"blocks.{layer}.hook_resid_pre" if layer < LAYERS else "ln_final.hook_in"
            torch.testing.assert_close(lens[layer], bridge.unembed(bridge.ln_final(theirs[name])), **CLOSE)
    torch.testing.assert_close(lens[-1], logits, **CLOSE)  # the last layer read is the model's answer
    torch.testing.assert_close(logit_lens(ours, cache, positions=-1), lens[:, :, -1:])
    torch.testing.assert_close(logit_lens(ours, cache, positions=[0, 5]), lens[:, :, [0, 5]])


@pytest.mark.parametrize("how", ["zero", "mean"])
def test_ablation_matches_transformer_lens(pair, how):
    ours, bridge = pair
    idx, reference = ids(3), ids(4, batch=5)
    heads = [(0, 1), (1, 0), (1, 3)]
    means = head_means(ours, reference) if how == "mean" else None
    with torch.no_grad():
        clean = ours(idx)  # before the ablation: the run it must leave the model to
    with torch.no_grad(), ablate_heads(ours, heads, how, means):
        ablated = ours(idx)
    with torch.no_grad():
        _, their_reference = bridge.run_with_cache(reference)

        def hook(z, hook):
            layer = int(hook.name.split(".")[1])
            for head in [h for at, h in heads if at == layer]:  # z: (B, T, H, D)
                z[:, :, head] = 0.0 if how == "zero" else their_reference[hook.name][:, :, head].mean(dim=(0, 1))
            return z

        theirs = bridge.run_with_hooks(idx, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", hook) for layer in (0, 1)])
        after = ours(idx)
    torch.testing.assert_close(ablated, theirs, **CLOSE)
    assert (ablated - clean).abs().max() > 1e-3  # the ablation did something
    assert torch.equal(after, clean) and no_hooks_left(ours)  # and is gone


def test_patching_matches_transformer_lens(pair):
    ours, bridge = pair
    clean, corrupt = ids(5), ids(6)
    _, source = run_with_cache(ours, corrupt)
    with torch.no_grad():
        _, their_source = bridge.run_with_cache(corrupt)
        with patch_heads(ours, [(1, 2)], source):
            patched = ours(clean)

        def heads_hook(z, hook):
            z[:, :, 2] = their_source[hook.name][:, :, 2]
            return z

        theirs = bridge.run_with_hooks(clean, fwd_hooks=[("blocks.1.attn.hook_z", heads_hook)])
        torch.testing.assert_close(patched, theirs, **CLOSE)

        with patch_heads(ours, [(0, 1), (1, 2)], source, positions=[4, 7]):
            patched = ours(clean)

        def positions_hook(z, hook):
            head = 1 if hook.name.startswith("blocks.0") else 2
            z[:, [4, 7], head] = their_source[hook.name][:, [4, 7], head]
            return z

        hooks = [(f"blocks.{layer}.attn.hook_z", positions_hook) for layer in (0, 1)]
        theirs = bridge.run_with_hooks(clean, fwd_hooks=hooks)
        torch.testing.assert_close(patched, theirs, **CLOSE)
        unpatched = ours(clean)
        torch.testing.assert_close(patched[:, :4], unpatched[:, :4])  # before position 4 nothing changed
        assert (patched[:, 4:] - unpatched[:, 4:]).abs().amax(dim=-1).min() > 0  # from 4 on, all did

        with patch_resid(ours, 1, source, positions=[4, 7]):
            patched = ours(clean)

        def resid_hook(resid, hook):
            resid[:, [4, 7]] = their_source[hook.name][:, [4, 7]]
            return resid

        theirs = bridge.run_with_hooks(clean, fwd_hooks=[("blocks.1.hook_resid_pre", resid_hook)])
        torch.testing.assert_close(patched, theirs, **CLOSE)
    assert no_hooks_left(ours)


def test_scores_match_the_transformer_lens_head_detector():
    """TransformerLens' detector divides the attention on the detected keys by all T queries; ours
    averages over the queries that can match (t >= 1; the P of the second copy), so on one sequence
    of two copies of P distinct tokens theirs = ours * (T - 1) / T and ours * P / T. A wide
    initialisation gives peaked, unequal heads, so a key off by one would show."""
    hf, ours = hf_gpt2(initializer_range=0.5)
    bridge = bridge_of(hf, "gpt2")
    P = T // 2
    half = torch.randperm(V, generator=torch.Generator().manual_seed(0))[:P]
    tokens = torch.cat([half, half])[None]  # (1, T)
    text = " ".join(f"t{i}" for i in tokens[0].tolist())
    assert torch.equal(bridge.to_tokens(text).cpu(), tokens)
    _, cache = run_with_cache(ours, tokens)
    induction, previous = induction_scores(cache.attention, P), previous_token_scores(cache.attention)
    assert induction.max() - induction.min() > 0.05  # the heads differ
    torch.testing.assert_close(detect_head(bridge, text, "induction_head"), induction * P / T, **CLOSE)
    torch.testing.assert_close(detect_head(bridge, text, "previous_token_head"), previous * (T - 1) / T, **CLOSE)


def test_copying_scores_match_transformer_lens(pair):
    """Olsson et al.'s copying score: the eigenvalues of W_E W_OV W_U, TransformerLens's
    FactoredMatrix (unprocessed weights on both sides: no norm folded in)."""
    ours, bridge = pair
    with torch.no_grad():
        eigenvalues = (bridge.W_E @ bridge.OV @ bridge.W_U).eigenvalues  # (L, H, D)
    theirs = (eigenvalues.sum(dim=-1) / eigenvalues.abs().sum(dim=-1)).real
    scores = copying_scores(ours)
    assert scores.shape == (LAYERS, HEADS) and scores.std() > 0.01
    torch.testing.assert_close(scores, theirs.float(), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("kind", ["Q", "K", "V"])
def test_composition_scores_match_transformer_lens(pair, kind):
    ours, bridge = pair
    with torch.no_grad():
        theirs = bridge.all_composition_scores(kind)[0, :, 1, :]  # (H, H): layer 0 into layer 1
    scores = composition_scores(ours, kind)
    assert scores.shape == (HEADS, HEADS)
    torch.testing.assert_close(scores, torch.as_tensor(theirs).float(), **CLOSE)
    W_QK, W_OV = head_circuits(ours, 1, 2)
    torch.testing.assert_close(W_QK, bridge.QK[1, 2].AB.detach(), **CLOSE)
    torch.testing.assert_close(W_OV, bridge.OV[1, 2].AB.detach(), **CLOSE)


def test_random_composition_scores_are_the_baseline():
    """Unrelated heads score about 1 / sqrt(C) (0.125 at C = 64), not 0; each score is
    TransformerLens's composition score of the same two factored matrices."""
    scores = random_composition_scores(64, 16, 400, torch.Generator().manual_seed(0))
    assert scores.shape == (400,) and abs(scores.mean() - 1 / math.sqrt(64)) < 0.01
    factors = torch.randn(4, 64, 16, generator=torch.Generator().manual_seed(1))
    a, b = factors[0] @ factors[1].T, factors[2] @ factors[3].T
    theirs = composition_scores_tl(FactoredMatrix(factors[0], factors[1].T), FactoredMatrix(factors[2], factors[3].T))
    assert composition_score(a, b) == pytest.approx(float(theirs), rel=1e-4)


def test_logit_attribution_matches_transformer_lens(pair):
    ours, bridge = pair
    idx, right, wrong = ids(12), torch.tensor([3, 50, 7]), torch.tensor([9, 2, 60])
    logits, cache = run_with_cache(ours, idx)
    parts = logit_attribution(ours, cache, right, wrong)
    torch.testing.assert_close(parts.total, logit_difference(logits, right, wrong), **CLOSE)
    with torch.no_grad():
        _, theirs = bridge.run_with_cache(idx)
        heads = theirs.stack_head_results(layer=-1, pos_slice=-1)  # (L * H, B, C)
        their_heads = theirs.logit_attrs(heads, tokens=right, incorrect_tokens=wrong, pos_slice=-1)
        stack, labels = theirs.decompose_resid(layer=-1, pos_slice=-1, return_labels=True)  # embeddings, attn, mlp
        their_parts = dict(zip(labels, theirs.logit_attrs(stack, tokens=right, incorrect_tokens=wrong, pos_slice=-1)))
    torch.testing.assert_close(parts.heads.flatten(0, 1), their_heads, **CLOSE)
    embeddings = their_parts["embed"] + their_parts.get("pos_embed", 0)
    torch.testing.assert_close(parts.embeddings, embeddings, **CLOSE)
    for layer in range(LAYERS):
        torch.testing.assert_close(parts.attention[layer], their_parts[f"{layer}_attn_out"], **CLOSE)
        torch.testing.assert_close(parts.mlp[layer], their_parts[f"{layer}_mlp_out"], **CLOSE)


@pytest.mark.parametrize("builder", list(BUILDERS))
def test_logit_attribution_adds_up_to_the_logit(builder):
    """With norm gains and biases that are not 1 and 0 (which TransformerLens would fold away),
    the parts still add up to the logit, of one token or of a difference."""
    _, model = BUILDERS[builder]()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (LayerNorm, RMSNorm)):
                module.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(2))
                if getattr(module, "bias", None) is not None:
                    module.bias.normal_(0, 0.3, generator=torch.Generator().manual_seed(3))
    idx = ids(13)
    logits, cache = run_with_cache(model, idx)
    one = logit_attribution(model, cache, 5, position=4)
    torch.testing.assert_close(one.total, logits[:, 4, 5], **CLOSE)
    assert one.heads.shape == (LAYERS, HEADS, 3) and one.mlp.shape == one.attention.shape == (LAYERS, 3)
    difference = logit_attribution(model, cache, torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    torch.testing.assert_close(difference.total, logit_difference(logits, [1, 2, 3], [4, 5, 6]), **CLOSE)
    right, wrong = torch.randint(0, V, (2, 3, 2), generator=torch.Generator().manual_seed(4))  # (B, P) each
    at_two = logit_difference(logits, right, wrong, position=[2, 6])  # (B, P)
    assert at_two.shape == (3, 2)
    torch.testing.assert_close(
        at_two[:, 1], logits[:, 6].gather(1, right[:, 1:]).squeeze(1) - logits[:, 6].gather(1, wrong[:, 1:]).squeeze(1)
    )


def test_head_patching_matches_transformer_lens(pair):
    """Denoising (each head of the clean run patched into the corrupt run) and noising (the
    reverse), head by head, against TransformerLens's patching sweep, on one normalised scale."""
    ours, bridge = pair
    clean, corrupt = ids(14), ids(15)
    clean_logits, clean_cache = run_with_cache(ours, clean)
    corrupt_logits, corrupt_cache = run_with_cache(ours, corrupt)
    right, wrong = clean_logits[:, -1].argmax(dim=-1), corrupt_logits[:, -1].argmax(dim=-1)  # each run's answer

    def metric(logits):
        return logit_difference(logits, right, wrong).mean()

    denoised = patch_each_head(ours, corrupt, clean_cache, metric)
    noised = patch_each_head(ours, clean, corrupt_cache, metric)
    with torch.no_grad():
        _, their_clean = bridge.run_with_cache(clean)
        _, their_corrupt = bridge.run_with_cache(corrupt)
        their_denoised = get_act_patch_attn_head_out_all_pos(bridge, corrupt, their_clean, metric)
        their_noised = get_act_patch_attn_head_out_all_pos(bridge, clean, their_corrupt, metric)
    torch.testing.assert_close(denoised, their_denoised.float(), **CLOSE)
    torch.testing.assert_close(noised, their_noised.float(), **CLOSE)
    high, low = metric(clean_logits), metric(corrupt_logits)
    assert high - low > 0.1
    recovered = fraction_recovered(denoised, high, low)
    assert recovered.shape == (LAYERS, HEADS) and (recovered - fraction_recovered(noised, high, low)).abs().max() > 0
    per_item = patch_each_head(ours, corrupt, clean_cache, lambda logits: logit_difference(logits, right, wrong))
    assert per_item.shape == (LAYERS, HEADS, 3)
    torch.testing.assert_close(per_item.mean(dim=-1), denoised, **CLOSE)
    with torch.no_grad(), patch_resid(ours, LAYERS, clean_cache):  # the last residual stream denoised: all of it
        assert float(fraction_recovered(metric(ours(corrupt)), high, low)) == pytest.approx(1.0, abs=1e-4)
    with torch.no_grad(), patch_resid(ours, LAYERS, corrupt_cache):  # noised: none of it left
        assert float(fraction_recovered(metric(ours(clean)), high, low)) == pytest.approx(0.0, abs=1e-4)


# -- by hand ----------------------------------------------------------------------------------


def one_layer() -> GPT:
    """1 layer, 2 heads of width 4: queries and keys zero, so every query attends uniformly to
    itself and all earlier tokens; values copy their input (the identity); c_proj the identity."""
    torch.manual_seed(0)
    model = GPT(GPTConfig.gpt2(vocab_size=10, context_length=8, n_layers=1, n_heads=2, d_model=8)).eval()
    attn = model.transformer.h[0].attn
    with torch.no_grad():
        attn.c_attn.weight.zero_()
        attn.c_attn.weight[16:].copy_(torch.eye(8))  # rows 16..23 make the values
        attn.c_attn.bias.zero_()
        attn.c_proj.weight.copy_(torch.eye(8))
        attn.c_proj.bias.fill_(0.5)
    return model


def test_a_uniform_head_by_hand():
    model, n = one_layer(), 6
    idx = torch.arange(n)[None]  # (1, 6)
    _, cache = run_with_cache(model, idx)
    counts = torch.arange(1, n + 1, dtype=torch.float)  # query t sees t + 1 tokens
    uniform = torch.tril(torch.ones(n, n)) / counts[:, None]  # (T, T)
    torch.testing.assert_close(cache.attention[0][0], uniform.expand(2, n, n))
    x = model.transformer.h[0].ln_1(cache.resid[0])[0]  # (T, C): the values, as v = x
    means = x.cumsum(0) / counts[:, None]  # (T, C): each query's running mean
    torch.testing.assert_close(cache.z[0][0], means.view(n, 2, 4))
    # c_proj is the identity: head h writes its z into its own 4 coordinates, nothing elsewhere
    outputs = cache.head_outputs(0)[0]  # (T, H, C)
    torch.testing.assert_close(outputs[:, 0, :4], means[:, :4])
    torch.testing.assert_close(outputs[:, 1, 4:], means[:, 4:])
    assert outputs[:, 0, 4:].abs().max() == 0 and outputs[:, 1, :4].abs().max() == 0
    # the scores of a uniform head: mean over t >= 1 of 1 / (t + 1); induction with period 3 over t = 3..5
    expected = sum(1 / (t + 1) for t in range(1, n)) / (n - 1)
    torch.testing.assert_close(previous_token_scores(cache.attention), torch.full((1, 2), expected))
    expected = sum(1 / (t + 1) for t in range(3, 6)) / 3
    torch.testing.assert_close(induction_scores(cache.attention, 3), torch.full((1, 2), expected))


def test_zero_ablation_leaves_the_bias_by_hand():
    model = one_layer()
    block = model.transformer.h[0]
    idx = torch.arange(6)[None]
    with ablate_heads(model, [(0, 0), (0, 1)]):
        _, cache = run_with_cache(model, idx)
    assert cache.z[0].abs().max() == 0  # a capture records what the ablation left
    with torch.no_grad():
        after_attention = cache.resid[0] + block.attn.c_proj.bias  # (1, T, C): no head writes, the bias stays
        torch.testing.assert_close(cache.resid[1], after_attention + block.mlp(block.ln_2(after_attention)))


def test_mean_ablation_puts_the_mean_in():
    model = one_layer()
    idx = torch.randint(0, 10, (4, 6), generator=torch.Generator().manual_seed(0))
    _, clean = run_with_cache(model, idx)
    means = head_means(model, idx)
    torch.testing.assert_close(means[0], clean.z[0].mean(dim=(0, 1)))
    with ablate_heads(model, [(0, 1)], "mean", means):
        _, cache = run_with_cache(model, idx)
    torch.testing.assert_close(cache.z[0][:, :, 1], means[0][1].expand(4, 6, 4))
    torch.testing.assert_close(cache.z[0][:, :, 0], clean.z[0][:, :, 0])  # the other head untouched


def test_patching_is_causal_and_local():
    model = GPT(GPTConfig.gpt2(vocab_size=V, context_length=32, **SIZE)).eval()
    clean, corrupt = ids(7), ids(8)
    clean_logits, clean_cache = run_with_cache(model, clean)
    corrupt_logits, source = run_with_cache(model, corrupt)
    with patch_resid(model, 1, source, positions=[5]):
        logits, cache = run_with_cache(model, clean)
    torch.testing.assert_close(cache.resid[1][:, 5], source.resid[1][:, 5])
    torch.testing.assert_close(logits[:, :5], clean_logits[:, :5])  # earlier positions cannot see position 5
    assert (logits[:, 5:] - clean_logits[:, 5:]).abs().amax(dim=-1).min() > 0  # every later position moved
    with patch_resid(model, 0, source):  # the whole embedding patched: the corrupt run
        torch.testing.assert_close(run_with_cache(model, clean)[0], corrupt_logits)
    everything = [(layer, head) for layer in range(LAYERS) for head in range(HEADS)]
    with patch_heads(model, everything, clean_cache):  # patching a run into itself changes nothing
        torch.testing.assert_close(run_with_cache(model, clean)[0], clean_logits)


def test_scores_of_known_patterns():
    period, n = 4, 9  # a BOS token, then two copies of 4 tokens
    previous = torch.zeros(n, n)
    previous[0, 0] = 1.0
    previous[torch.arange(1, n), torch.arange(n - 1)] = 1.0  # each token attends to the one before
    induction = torch.eye(n)
    queries = torch.arange(n - period, n)
    induction[queries] = 0.0
    induction[queries, queries - period + 1] = 1.0  # the token after the earlier copy
    attention = torch.stack([previous, induction])[None, None].expand(1, 2, 2, n, n)  # (L, B, H, T, T)
    torch.testing.assert_close(previous_token_scores(attention), torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(induction_scores(attention, period), torch.tensor([[0.0, 1.0]]))
    torch.testing.assert_close(induction_scores(list(attention), period), torch.tensor([[0.0, 1.0]]))


def test_repeated_random_tokens():
    gen = torch.Generator().manual_seed(0)
    tokens = repeated_random_tokens(64, 10, 5, gen)
    assert tokens.shape == (64, 20) and torch.equal(tokens[:, :10], tokens[:, 10:])
    assert set(tokens.unique().tolist()) == {0, 1, 2, 3, 4}
    with_bos = repeated_random_tokens(64, 10, 5, gen, bos=2)
    assert with_bos.shape == (64, 21) and (with_bos[:, 0] == 2).all() and (with_bos[:, 1:] != 2).all()
    assert torch.equal(with_bos[:, 1:11], with_bos[:, 11:])
    again = repeated_random_tokens(64, 10, 5, torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens)


def test_per_token_loss_is_the_training_loss_item_by_item():
    model = GPT(GPTConfig.gpt2(vocab_size=V, context_length=32, **SIZE)).eval()
    idx = ids(9)
    with torch.no_grad():
        losses = per_token_loss(model(idx), idx)
        assert losses.shape == (3, T - 1)
        torch.testing.assert_close(losses.mean(), lm_loss(model, idx[:, :-1], idx[:, 1:]))


# -- the paths of attention -------------------------------------------------------------------


def test_fast_and_readable_paths_capture_the_same():
    fast = GPT(GPTConfig.gpt2(vocab_size=V, context_length=32, fast=True, **SIZE)).eval()
    readable = copy.deepcopy(fast)
    readable.config.fast = False
    for block in readable.transformer.h:
        block.attn.fast = False
    idx = ids(10)
    with torch.no_grad():
        plain = fast(idx)
        with capture(fast, attention=False) as cache:
            untouched = fast(idx)
    assert torch.equal(untouched, plain) and cache.attention == []  # no weights asked: the fast path ran
    fast_logits, fast_cache = run_with_cache(fast, idx)
    readable_logits, readable_cache = run_with_cache(readable, idx)
    torch.testing.assert_close(fast_logits, plain, **CLOSE)
    torch.testing.assert_close(fast_logits, readable_logits, **CLOSE)
    for name in ("resid", "attention", "z"):
        for a, b in zip(getattr(fast_cache, name), getattr(readable_cache, name)):
            torch.testing.assert_close(a, b, **CLOSE)


@pytest.mark.parametrize(
    "config",
    [
        GPTConfig.gpt2(vocab_size=V, context_length=32, **SIZE),
        GPTConfig.llama_like(vocab_size=V, context_length=32, n_kv_heads=2, **SIZE),  # RoPE, grouped queries
        GPTConfig.llama_like(vocab_size=V, context_length=32, n_kv_heads=1, **SIZE),  # one key/value head
    ],
    ids=["learned", "rope-gqa", "rope-mqa"],
)
def test_captured_weights_are_the_attentions_own(config):
    torch.manual_seed(0)
    model = GPT(config).eval()
    _, cache = run_with_cache(model, ids(11))
    with torch.no_grad():
        for layer, block in enumerate(model.transformer.h):
            out, weights = block.attn(block.ln_1(cache.resid[layer]), return_weights=True)
            torch.testing.assert_close(cache.attention[layer], weights)
            heads = cache.head_outputs(layer).sum(dim=2)  # (B, T, C): the heads' writes add up to the output
            torch.testing.assert_close(heads + (block.attn.c_proj.bias if config.bias else 0), out, **CLOSE)
            rows = cache.attention[layer].sum(dim=-1)
            torch.testing.assert_close(rows, torch.ones_like(rows))


def test_the_cache_holds_the_latest_pass():
    model = one_layer()
    with capture(model) as cache:
        assert cache.resid == [] and cache.z == []
        model(torch.zeros(2, 5, dtype=torch.long))
        model(torch.zeros(1, 3, dtype=torch.long))
    assert [tuple(r.shape) for r in cache.resid] == [(1, 3, 8)] * 2 and cache.attention[0].shape == (1, 2, 3, 3)
    assert repr(cache) == "Cache(resid=2 x (1, 3, 8), attention=1 x (1, 2, 3, 3), z=1 x (1, 3, 2, 4))"
    with ablate_heads(model, [(torch.tensor(0), numpy.int64(1))]), capture(model) as ablated:  # any whole number
        model(torch.zeros(1, 3, dtype=torch.long))
    assert ablated.z[0][:, :, 1].abs().max() == 0 and ablated.z[0][:, :, 0].abs().max() > 0


# -- hooks always go ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "intervention",
    [
        lambda m, s: capture(m),
        lambda m, s: ablate_heads(m, [(0, 1)]),
        lambda m, s: patch_heads(m, [(0, 1)], s),
        lambda m, s: patch_resid(m, 1, s),
    ],
    ids=["capture", "ablate", "patch_heads", "patch_resid"],
)
def test_hooks_are_removed_even_after_an_exception(intervention):
    model = one_layer()
    idx = torch.arange(6)[None]
    clean, source = run_with_cache(model, idx)
    with pytest.raises(RuntimeError, match="inside"):
        with intervention(model, source):
            model(idx)
            raise RuntimeError("inside")
    assert no_hooks_left(model)
    with pytest.raises(ValueError, match="shape"):  # an error raised by a hook itself
        with patch_heads(model, [(0, 1)], source):
            model(torch.arange(5)[None])
    assert no_hooks_left(model)
    torch.testing.assert_close(model(idx), clean)


# -- bad input ----------------------------------------------------------------------------------


def test_bad_input_is_named():
    model = one_layer()
    idx = torch.arange(6)[None]
    _, source = run_with_cache(model, idx)
    with pytest.raises(ValueError, match="layer 1 is out of range"):
        ablate_heads(model, [(1, 0)]).__enter__()
    with pytest.raises(ValueError, match="head 2 is out of range"):
        patch_heads(model, [(0, 2)], source).__enter__()
    with pytest.raises(ValueError, match="layer -1 is out of range"):
        ablate_heads(model, [(-1, 0)]).__enter__()
    with pytest.raises(ValueError, match="layer 2 is out of range"):
        patch_resid(model, 2, source).__enter__()
    with pytest.raises(ValueError, match=r"\(layer, head\) pairs, got 0"):
        ablate_heads(model, (0, 1)).__enter__()  # one head, not wrapped in a list
    with pytest.raises(ValueError, match="head must be a whole number, got 0.5"):
        ablate_heads(model, [(0, 0.5)]).__enter__()
    with pytest.raises(ValueError, match="layer 1 is out of range"):
        source.head_outputs(1)
    with pytest.raises(ValueError, match="unknown ablation 'random'"):
        ablate_heads(model, [(0, 0)], how="random").__enter__()
    with pytest.raises(ValueError, match="needs the heads' means"):
        ablate_heads(model, [(0, 0)], how="mean").__enter__()
    with pytest.raises(ValueError, match=r"\(n_heads, head_dim\)"):
        ablate_heads(model, [(0, 0)], how="mean", means=[torch.zeros(2, 3)]).__enter__()
    with pytest.raises(ValueError, match="holds 2 layers"):
        patch_heads(model, [(0, 0)], Cache(z=[source.z[0]] * 2)).__enter__()
    with pytest.raises(ValueError, match=r"shape \(1, 6, 2, 4\) but this run's has \(2, 6, 2, 4\)"):
        with patch_heads(model, [(0, 0)], source):
            model(torch.zeros(2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="residual stream 1 has shape"):
        with patch_resid(model, 1, source):
            model(torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="positions .* out of range"):
        with patch_resid(model, 0, source, positions=[6]):
            model(idx)
    with pytest.raises(ValueError, match="period of 4 needs at least 8 positions"):
        induction_scores(source.attention, 4)
    with pytest.raises(ValueError, match="no attention weights"):
        previous_token_scores([])
    with pytest.raises(ValueError, match="must agree"):
        per_token_loss(torch.zeros(1, 6, 10), torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(TypeError, match="course_lib GPT"):
        capture(torch.nn.Linear(2, 2)).__enter__()
    assert no_hooks_left(model)


def test_a_batch_on_another_device_is_named():
    model = one_layer()
    elsewhere = torch.zeros(1, 6, dtype=torch.long, device="meta")
    with pytest.raises(ValueError, match="the batch is on meta but the model is on cpu"):
        run_with_cache(model, elsewhere)
    with pytest.raises(ValueError, match="the batch is on meta"):
        head_means(model, elsewhere)
    with pytest.raises(ValueError, match="the batch is on meta"):
        with ablate_heads(model, [(0, 0)]):
            model(elsewhere)
    assert no_hooks_left(model)


# -- probing ------------------------------------------------------------------------------------


def test_the_linear_probe_is_logistic_regression():
    """The fitted probabilities equal statsmodels' maximum-likelihood multinomial logit."""
    sm = pytest.importorskip("statsmodels.api")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(400, 3, generator=gen, dtype=torch.float64)
    logits = torch.stack([torch.zeros(400), x[:, 0] - x[:, 1], 0.5 * x[:, 2] + 0.3], dim=1)
    y = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=gen).squeeze(1)  # (400,) in 0..2
    ours = torch.softmax(fit_linear_probe(x, y, l2=0.0)(x.float()), dim=-1)
    reference = sm.MNLogit(y.numpy(), sm.add_constant(x.numpy())).fit(disp=0, method="newton")
    theirs = torch.tensor(reference.predict(sm.add_constant(x.numpy())), dtype=torch.float32)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


def test_control_task_gives_each_type_one_label_from_the_task_distribution():
    gen = torch.Generator().manual_seed(0)
    types = torch.randint(0, 2000, (20_000,), generator=gen)
    labels = (torch.rand(20_000, generator=gen) < 0.2).long()  # 20% ones
    control = control_task(types, labels, torch.Generator().manual_seed(1))
    per_type = torch.zeros(2000, dtype=torch.long)
    per_type[types] = control  # one write per occurrence: consistent only if a type has one label
    assert torch.equal(per_type[types], control)
    share = per_type[types.unique()].float().mean().item()  # the share of types labelled 1
    assert abs(share - labels.float().mean().item()) < 4 * math.sqrt(0.2 * 0.8 / 2000)


def test_probe_separates_information_from_memorisation():
    gen = torch.Generator().manual_seed(0)
    n, types = 600, torch.randint(0, 30, (600,), generator=gen)
    embedding = torch.randn(30, 16, generator=gen)  # each type's own direction
    signal = torch.randn(n, generator=gen)
    features = embedding[types] + torch.outer(signal, torch.ones(16))  # (N, 16)
    labels = (signal > 0).long()  # readable from the features, whatever the type
    control = control_task(types, labels, torch.Generator().manual_seed(1))
    result = probe(features, labels, control, seed=0)
    assert result.n == 180 and len(result.control_correct) == 180
    low, high = result.task_interval
    assert low <= result.task_accuracy <= high and result.task_accuracy > 0.9
    assert result.control_accuracy > 0.9  # every type was seen in training: its label is memorised
    # the same probe on a test set of unseen types cannot memorise: the control falls to chance
    unseen = types >= 24
    result = probe(features, labels, control, test=unseen)
    assert result.n == int(unseen.sum())
    assert result.selectivity.low > 0.2 and result.selectivity.n == result.n
    assert result.task_accuracy - result.control_accuracy == pytest.approx(result.selectivity.difference)
    assert "selectivity" in str(result)
    # on one floor: balanced accuracies, the control at chance on unseen types
    assert len(result.task_labels) == len(result.control_labels) == result.n
    assert result.majority_accuracy == max(result.task_labels.count(y) for y in (0, 1)) / result.n
    assert result.balanced_accuracy("task")[0] > 0.9 and abs(result.balanced_accuracy("control")[0] - 0.5) < 0.15
    assert result.balanced_selectivity.low > 0.2
    with pytest.raises(ValueError, match="must agree"):
        probe(features, labels[:-1], control)
    with pytest.raises(ValueError, match="both training and test items"):
        probe(features, labels, control, test=torch.ones(n, dtype=torch.bool))


def test_probe_results_by_hand():
    items = ProbeResult(task_correct=[1, 1, 0, 1], control_correct=[0, 1, 0, 0])
    assert (items.n, items.n_groups, items.task_accuracy, items.control_accuracy) == (4, 4, 0.75, 0.25)
    assert items.task_interval == wilson_interval(3, 4)
    assert (items.selectivity.difference, items.selectivity.a_only, items.selectivity.b_only) == (0.5, 2, 0)
    # answers from three sequences of two tokens each
    grouped = ProbeResult([1, 1, 0, 1, 1, 1], [1, 0, 0, 0, 1, 0], groups=[0, 0, 1, 1, 2, 2])
    assert (grouped.n, grouped.n_groups, grouped.task_accuracy, grouped.control_accuracy) == (6, 3, 5 / 6, 2 / 6)
    # clustered by hand: the residuals from 5/6 sum to 1/3, -2/3, 1/3 per sequence; the CR1 error is
    # sqrt(3 / 2 * (1/9 + 4/9 + 1/9)) / 6 = 1/6, and t with 2 degrees of freedom is 4.303
    assert t_quantile(0.95, 2) == pytest.approx(4.303, abs=1e-3)
    assert grouped.task_interval == pytest.approx((5 / 6 - t_quantile(0.95, 2) / 6, 1.0))  # capped at 1
    assert grouped.selectivity.difference == 0.5 and grouped.selectivity.n == 6
    assert grouped.selectivity.low == grouped.selectivity.high == 0.5  # every sequence differs by exactly 1/2
    assert "6 items in 3 groups" in str(grouped)


def test_balanced_accuracy_and_selectivity_by_hand():
    """Task labels 0, 0, 1, 0: always guessing 0 scores 3/4, a balanced accuracy of 1/2."""
    seed0 = ProbeResult([1, 1, 0, 1], [0, 1, 0, 0], task_labels=[0, 0, 1, 0], control_labels=[1, 0, 0, 0])
    assert seed0.majority_accuracy == 0.75 and seed0.task_accuracy == 0.75
    assert seed0.balanced_accuracy("task")[0] == pytest.approx(0.5)  # recall 1 on class 0, 0 on class 1
    assert seed0.balanced_accuracy("control")[0] == pytest.approx(1 / 6)  # recall 0 and 1/3
    assert seed0.balanced_selectivity.difference == pytest.approx(0.5 - 1 / 6)
    # a second control seed (recall 1 and 0: 1/2) on the same items: the control is their mean, 1/3
    seed1 = ProbeResult([1, 1, 0, 1], [1, 1, 1, 0], task_labels=[0, 0, 1, 0], control_labels=[0, 0, 0, 1])
    both = balanced_selectivity([seed0, seed1])
    assert both.difference == pytest.approx(0.5 - 1 / 3) and both.n == 4
    with pytest.raises(ValueError, match="share one task probe"):
        balanced_selectivity([seed0, ProbeResult([0, 1, 0, 1], [1, 1, 1, 0], None, [0, 0, 1, 0], [0, 0, 0, 1])])
    with pytest.raises(ValueError, match="no labels"):
        ProbeResult([1], [1]).majority_accuracy


def test_probe_keeps_a_group_on_one_side():
    gen = torch.Generator().manual_seed(0)
    groups = torch.arange(40).repeat_interleave(10)  # 40 sequences of 10 tokens
    features = torch.randn(400, 4, generator=gen)
    labels = (features[:, 0] > 0).long()
    control = control_task(torch.randint(0, 20, (400,), generator=gen), labels, gen)
    result = probe(features, labels, control, groups=groups, test_fraction=0.25)
    assert result.n == 100 and result.n_groups == 10  # 10 whole sequences held out
    assert result.selectivity.interval == "t over 10 clusters, 9 df" and result.task_accuracy > 0.9
    with pytest.raises(ValueError, match=r"groups \[0\] have items in both training and test"):
        probe(features, labels, control, groups=groups, test=torch.arange(400) < 5)


def test_the_module_docstring_lists_the_api():
    public = [name for name, value in vars(interp).items() if callable(value) and value.__module__ == interp.__name__]
    missing = [name for name in public if not name.startswith("_") and f"`{name}`" not in interp.__doc__]
    assert not missing, f"the module docstring does not name {missing}"
