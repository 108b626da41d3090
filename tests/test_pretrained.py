"""The GPT that ships with course_lib: small, loadable offline, and as good as its card says."""

import re

import pytest
import torch

from course_lib.data import prepare_data, stdlib_docs, stdlib_docs_sha256
from course_lib.generation import generate
from course_lib.ngram import NGramLanguageModel
from course_lib.pretrained import CARD_PATH, CONFIG_PATH, MODEL_PATH, load_pretrained
from course_lib.tokenization import ENDOFTEXT
from course_lib.training import estimate_loss


@pytest.fixture(scope="module")
def shipped():
    return load_pretrained()


def card_value(label: str) -> str:
    match = re.search(rf"^\| {re.escape(label)} \| (.+?) \|$", CARD_PATH.read_text(encoding="utf-8"), re.M)
    assert match, f"the model card has no row {label!r}"
    return match.group(1)


def test_it_is_small_enough_to_ship():
    assert MODEL_PATH.stat().st_size <= 10 * 1024 * 1024


def test_validation_loss_matches_the_card(shipped):
    """On every Python: the corpus ships with course_lib, so the card's numbers are reproducible."""
    assert card_value("Corpus SHA-256").split("`")[1] == stdlib_docs_sha256()
    model, tokenizer, notes = shipped
    settings = notes["settings"]
    data = prepare_data(settings["corpus"], settings["tokenizer"], settings["vocab_size"])
    assert data.tokenizer.merges == tokenizer.merges  # the corpus and tokenizer are the card's
    loss = estimate_loss(model, data.val_ids, model.config.context_length, notes["train"]["batch_size"])
    assert loss == pytest.approx(notes["results"]["val_loss"], abs=2e-3)
    assert float(card_value("Validation loss").split()[0]) == pytest.approx(loss, abs=2e-3)


def test_it_beats_the_ngram_baseline(shipped):
    """The shipped model, with its own tokenizer, predicts the last topics of the corpus better
    than a trigram model trained on the rest."""
    model, tokenizer, notes = shipped
    text = ENDOFTEXT.join(stdlib_docs())
    cut = text.find(ENDOFTEXT, int(0.9 * len(text)))
    train_ids, val_ids = (torch.tensor(tokenizer.encode(t, allowed_special="all")) for t in (text[:cut], text[cut:]))
    ngram = NGramLanguageModel(order=3, vocab_size=tokenizer.vocab_size, alpha=0.01, backoff=True).fit(train_ids)
    baseline = ngram.cross_entropy(val_ids)
    loss = estimate_loss(model, val_ids, model.config.context_length, 32)
    assert loss < baseline - 0.3, (loss, baseline)


def test_card_states_the_config_and_the_command(shipped):
    model, _, notes = shipped
    card = CARD_PATH.read_text(encoding="utf-8")
    assert f"python -m course_lib.train --config {CONFIG_PATH.relative_to(CONFIG_PATH.parents[2]).as_posix()}" in card
    assert card_value("Parameters") == f"{model.num_parameters():,}"
    assert card_value("Steps") == f"{notes['results']['steps']:,}"
    c = model.config
    assert card_value("Architecture") == (
        f"{c.n_layers} layers, {c.n_heads} heads, width {c.d_model}, context {c.context_length}, "
        f"{c.positional} positions, dropout {c.dropout}"
    )


def test_it_writes_like_the_corpus(shipped):
    model, tokenizer, notes = shipped
    prompt = torch.tensor([tokenizer.encode("The ")])
    text = tokenizer.decode(generate(model, prompt, 60, greedy=True, eos_id=notes["eos_id"])[0].tolist())
    words = re.findall(r"[a-z]+", text.lower())
    assert len(words) >= 8
    assert sum(w in {"the", "is", "a", "of", "to", "and", "in", "statement", "function", "object"} for w in words) >= 3
