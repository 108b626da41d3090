"""Corpora, splits, sliding windows, the data loader and prepare_data."""

import hashlib
import platform
import sys
from pathlib import Path

import pytest
import torch
from repo_scripts import load_script

from course_lib import data, files
from course_lib.data import (
    CORPORA,
    SlidingWindowDataset,
    load_corpus,
    make_dataloader,
    prepare_data,
    stdlib_docs,
    train_val_split,
)

ROOT = Path(__file__).resolve().parent.parent


def test_default_corpus_is_offline_english_text():
    text = load_corpus()
    assert text == load_corpus("stdlib-docs")
    assert len(text) > 400_000
    assert 'The "assert" statement' in text
    assert text.count(" the ") > 3000


def test_unknown_corpus_names_the_known_ones():
    with pytest.raises(ValueError, match="known corpora: stdlib-docs, tiny-shakespeare"):
        load_corpus("wikipedia")


def test_registry_entries_have_checksums():
    for corpus in CORPORA.values():
        assert corpus.url.startswith("https://")
        assert len(corpus.sha256) == 64 and int(corpus.sha256, 16) >= 0


def test_load_corpus_uses_registry_and_cache(server, tmp_path, monkeypatch):
    served, url = server
    payload = "ROMEO: hello\n".encode() * 50
    (served / "s.txt").write_bytes(payload)
    entry = files.RemoteFile(f"{url}/s.txt", hashlib.sha256(payload).hexdigest(), "s.txt", "test")
    monkeypatch.setitem(data.CORPORA, "tiny", entry)
    monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "cache"))
    assert load_corpus("tiny") == payload.decode()
    assert (tmp_path / "cache" / "s.txt").exists()


def test_train_val_split_is_contiguous():
    ids = torch.arange(100)
    train, val = train_val_split(ids, 0.1)
    assert torch.equal(train, torch.arange(90)) and torch.equal(val, torch.arange(90, 100))
    with pytest.raises(ValueError, match="between 0 and 1"):
        train_val_split(ids, 1.5)


def test_sliding_windows_shift_targets_by_one():
    ds = SlidingWindowDataset(list(range(10)), context_length=4, stride=4)
    assert len(ds) == 2
    x, y = ds[0]
    assert x.tolist() == [0, 1, 2, 3] and y.tolist() == [1, 2, 3, 4]
    x, y = ds[1]
    assert x.tolist() == [4, 5, 6, 7] and y.tolist() == [5, 6, 7, 8]
    assert [t.tolist() for t in ds[-1]] == [t.tolist() for t in ds[1]]
    with pytest.raises(IndexError):
        ds[2]


@pytest.mark.parametrize("n, context, stride", [(10, 4, 1), (11, 4, 2), (5, 4, 3), (100, 7, 5)])
def test_windows_cover_every_full_window(n, context, stride):
    ds = SlidingWindowDataset(torch.arange(n), context, stride)
    assert len(ds) == len(range(0, n - context, stride))
    for i in range(len(ds)):
        x, y = ds[i]
        assert x[0] == i * stride and torch.equal(y, x + 1) and len(x) == context


def test_bad_windows_raise():
    with pytest.raises(ValueError, match="stride must be a positive"):
        SlidingWindowDataset(range(10), 4, stride=0)
    with pytest.raises(ValueError, match="stride must be a positive"):
        SlidingWindowDataset(range(10), 4, stride=-2)
    with pytest.raises(ValueError, match="needs context_length \\+ 1 = 11 tokens, but the data has only 10"):
        SlidingWindowDataset(range(10), 10)
    with pytest.raises(ValueError, match="context_length must be at least 1"):
        SlidingWindowDataset(range(10), 0)


def test_dataloader_batches_and_is_reproducible():
    ids = torch.arange(1000)
    loader = make_dataloader(ids, context_length=8, batch_size=4, seed=3)
    x, y = next(iter(loader))
    assert x.shape == (4, 8) and y.shape == (4, 8)
    assert torch.equal(y[:, :-1], x[:, 1:])
    again = next(iter(make_dataloader(ids, context_length=8, batch_size=4, seed=3)))[0]
    assert torch.equal(x, again)
    assert len(loader.dataset) == (1000 - 9) // 8 + 1 and len(loader) == len(loader.dataset) // 4


def test_dataloader_too_little_data_raises():
    with pytest.raises(ValueError, match="only 2 windows for a batch of 4"):
        make_dataloader(torch.arange(20), context_length=8, batch_size=4)


def test_prepare_data_trains_the_tokenizer_on_training_text_with_document_ends():
    data = prepare_data("stdlib-docs", "bpe", vocab_size=300)
    assert data.tokenizer.vocab_size == 300 and data.eos_id == 299
    ends = int((data.train_ids == data.eos_id).sum() + (data.val_ids == data.eos_id).sum())
    assert ends == len(stdlib_docs()) - 1 and data.val_ids[0] == data.eos_id  # split between topics
    assert data.tokenizer.decode(data.train_ids[:200].tolist()).startswith('The "assert" statement')
    chars = prepare_data("stdlib-docs", "char")
    assert chars.eos_id is None and len(chars.train_ids) == pytest.approx(9 * len(chars.val_ids), rel=0.01)
    with pytest.raises(ValueError, match="unknown tokenizer 'words'"):
        prepare_data(tokenizer="words")


def test_split_text_cuts_at_a_document_end():
    from course_lib.data import split_text
    from course_lib.tokenization import ENDOFTEXT

    text = ENDOFTEXT.join(["a" * 50, "b" * 30, "c" * 20])
    train, val = split_text(text, 0.3)
    assert train + val == text and val.startswith(ENDOFTEXT + "c") and train.endswith("b")
    assert split_text("x" * 100, 0.25) == ("x" * 75, "x" * 25)  # no documents: the exact fraction


def test_the_shipped_documentation_is_what_the_script_makes():
    """The corpus and the docstrings ship as an asset so every Python computes the same numbers;
    on the Python it was made with, the script must make exactly the shipped bytes."""
    shipped = data.python_docs()
    assert shipped["python"] == "3.11.7"
    assert data.stdlib_docs_sha256() == "0868d274662968a7eaa1ea30a1614e965d45bdfb3d8c9b653e55697dbc0e1982"
    assert len(shipped["docstrings"]) == 1_472
    if platform.python_version() != shipped["python"]:
        pytest.skip(f"the asset was made with Python {shipped['python']}; this is {platform.python_version()}")
    assert load_script("make_data_assets").asset_bytes() == data.PYTHON_DOCS.read_bytes(), (
        "course_lib/assets/python_docs.json.gz is stale: run python scripts/make_data_assets.py"
    )


def test_the_shipped_text_is_pythons_own_documentation():
    """On Python 3.11 the asset holds exactly what pydoc_data ships (the corpus, not a copy of it)."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("pydoc_data of another Python holds other text")
    from pydoc_data.topics import topics

    assert data.stdlib_docs() == [topics[key] for key in sorted(topics)]
