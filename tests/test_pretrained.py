"""Weights from elsewhere and the GPT that ships with course_lib: GPT-2 and LLaMA state dicts
checked against Hugging Face transformers; the shipped model small, loadable offline, and as good as
its card says."""

import re

import pytest
import torch

from course_lib.data import prepare_data, stdlib_docs, stdlib_docs_sha256
from course_lib.generation import generate
from course_lib.model import GPT, GPTConfig, parameter_formula
from course_lib.ngram import NGramLanguageModel
from course_lib.pretrained import (
    CARD_PATH,
    CONFIG_PATH,
    MODEL_PATH,
    gpt2_from_pretrained,
    load_gpt2_state_dict,
    load_llama_state_dict,
)
from course_lib.tokenization import ENDOFTEXT
from course_lib.training import estimate_loss

TINY = dict(vocab_size=101, context_length=32, n_layers=2, n_heads=4, d_model=32)


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")  # test-only dependency (requirements-test.txt)


@pytest.fixture
def tiny_hf_gpt2(transformers):
    """A GPT-2 of Hugging Face transformers with the shape of TINY, without dropout."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=101,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("fast", [True, False])
def test_matches_huggingface_gpt2(fast, tiny_hf_gpt2):
    hf = tiny_hf_gpt2
    ours = load_gpt2_state_dict(GPT(GPTConfig.gpt2(**TINY, fast=fast)), hf.state_dict()).eval()
    idx = torch.randint(0, 101, (3, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(ours(idx), hf(idx).logits, atol=1e-5)


def test_gpt2_names_and_shapes_map_one_to_one(tiny_hf_gpt2):
    hf = tiny_hf_gpt2.state_dict()
    ours = dict(GPT(GPTConfig.gpt2(**TINY)).state_dict())
    for name, value in ours.items():
        theirs = hf[name]
        assert value.shape == (
            theirs.t().shape if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) else theirs.shape
        ), name


def test_loading_from_a_safetensors_file_without_the_prefix(tmp_path, tiny_hf_gpt2):
    from safetensors.torch import save_file

    hf = tiny_hf_gpt2
    stripped = {
        k.removeprefix("transformer."): v.contiguous() for k, v in hf.state_dict().items() if k != "lm_head.weight"
    }
    save_file(stripped, str(tmp_path / "tiny.safetensors"))
    from safetensors.torch import load_file

    ours = load_gpt2_state_dict(GPT(GPTConfig.gpt2(**TINY)), load_file(str(tmp_path / "tiny.safetensors"))).eval()
    idx = torch.randint(0, 101, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(ours(idx), hf(idx).logits, atol=1e-5)


def test_loading_a_mismatched_state_dict_says_what_is_wrong(tiny_hf_gpt2):
    hf = tiny_hf_gpt2.state_dict()
    with pytest.raises(ValueError, match="missing .*transformer.h.2"):
        load_gpt2_state_dict(GPT(GPTConfig.gpt2(**{**TINY, "n_layers": 3})), hf)
    with pytest.raises(ValueError, match="shape"):
        load_gpt2_state_dict(GPT(GPTConfig.gpt2(**{**TINY, "vocab_size": 102})), hf)


def test_pretrained_download_offline_is_a_clear_error(tmp_path, monkeypatch):
    from course_lib import pretrained
    from course_lib.files import DatasetUnavailableError

    def offline(url, path, sha256, timeout=30.0):
        raise DatasetUnavailableError(f"could not download {url} (offline). Are you offline?")

    monkeypatch.setattr(pretrained, "download", offline)
    with pytest.raises(DatasetUnavailableError, match="Are you offline"):
        gpt2_from_pretrained("gpt2", cache_dir=tmp_path)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])  # multi-head, grouped-query, multi-query
@pytest.mark.parametrize("tied", [False, True])
def test_matches_huggingface_llama(n_kv_heads, tied, transformers):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=101,
        hidden_size=32,
        intermediate_size=88,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=n_kv_heads,
        max_position_embeddings=64,
        rope_theta=500.0,
        tie_word_embeddings=tied,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    hf = transformers.LlamaForCausalLM(config).eval()
    ours_config = GPTConfig.llama_like(
        vocab_size=101,
        context_length=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=n_kv_heads,
        d_model=32,
        ffn_hidden=88,
        rope_base=500.0,
        tie_weights=tied,
        norm_eps=config.rms_norm_eps,
    )
    ours = load_llama_state_dict(GPT(ours_config), hf.state_dict()).eval()
    assert ours.num_parameters() == hf.num_parameters() == parameter_formula(ours_config)["total"]
    idx = torch.randint(0, 101, (2, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(ours(idx), hf(idx).logits, atol=1e-5)
        ours.config.fast = False  # the readable attention path agrees too
        for block in ours.transformer.h:
            block.attn.fast = False
        assert torch.allclose(ours(idx), hf(idx).logits, atol=1e-5)


# -- the shipped model ------------------------------------------------------------------------------


def card_value(label: str) -> str:
    match = re.search(rf"^\| {re.escape(label)} \| (.+?) \|$", CARD_PATH.read_text(encoding="utf-8"), re.M)
    assert match, f"the model card has no row {label!r}"
    return match.group(1)


def test_it_is_small_enough_to_ship():
    assert MODEL_PATH.stat().st_size <= 10 * 1024 * 1024


def test_validation_loss_matches_the_card(course):
    """On every Python: the corpus ships with course_lib, so the card's numbers are reproducible."""
    assert card_value("Corpus SHA-256").split("`")[1] == stdlib_docs_sha256()
    model, tokenizer, notes = course
    settings = notes["settings"]
    data = prepare_data(settings["corpus"], settings["tokenizer"], settings["vocab_size"])
    assert data.tokenizer.merges == tokenizer.merges  # the corpus and tokenizer are the card's
    loss = estimate_loss(model, data.val_ids, model.config.context_length, notes["train"]["batch_size"])
    assert loss == pytest.approx(notes["results"]["val_loss"], abs=2e-3)
    assert float(card_value("Validation loss").split()[0]) == pytest.approx(loss, abs=2e-3)


def test_it_beats_the_ngram_baseline(course):
    """The shipped model, with its own tokenizer, predicts the last topics of the corpus better
    than a trigram model trained on the rest."""
    model, tokenizer, notes = course
    text = ENDOFTEXT.join(stdlib_docs())
    cut = text.find(ENDOFTEXT, int(0.9 * len(text)))
    train_ids, val_ids = (torch.tensor(tokenizer.encode(t, allowed_special="all")) for t in (text[:cut], text[cut:]))
    ngram = NGramLanguageModel(order=3, vocab_size=tokenizer.vocab_size, alpha=0.01, backoff=True).fit(train_ids)
    baseline = ngram.cross_entropy(val_ids)
    loss = estimate_loss(model, val_ids, model.config.context_length, 32)
    assert loss < baseline - 0.3, (loss, baseline)


def test_card_states_the_config_and_the_command(course):
    model, _, notes = course
    card = CARD_PATH.read_text(encoding="utf-8")
    assert f"python -m course_lib.train --config {CONFIG_PATH.relative_to(CONFIG_PATH.parents[2]).as_posix()}" in card
    assert card_value("Parameters") == f"{model.num_parameters():,}"
    assert card_value("Steps") == f"{notes['results']['steps']:,}"
    c = model.config
    assert card_value("Architecture") == (
        f"{c.n_layers} layers, {c.n_heads} heads, width {c.d_model}, context {c.context_length}, "
        f"{c.positional} positions, dropout {c.dropout}"
    )


def test_it_writes_like_the_corpus(course):
    model, tokenizer, notes = course
    prompt = torch.tensor([tokenizer.encode("The ")])
    text = tokenizer.decode(generate(model, prompt, 60, greedy=True, eos_id=notes["eos_id"])[0].tolist())
    words = re.findall(r"[a-z]+", text.lower())
    assert len(words) >= 8
    assert sum(w in {"the", "is", "a", "of", "to", "and", "in", "statement", "function", "object"} for w in words) >= 3
