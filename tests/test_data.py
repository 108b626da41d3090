import hashlib
import http.server
import threading

import pytest
import torch

from course_lib import data, files, tasks
from course_lib.data import (
    CORPORA,
    SlidingWindowDataset,
    load_corpus,
    make_dataloader,
    train_val_split,
)
from course_lib.files import DatasetUnavailableError, download


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


@pytest.fixture
def server(tmp_path):
    """A throwaway HTTP server on localhost serving tmp_path/served."""
    served = tmp_path / "served"
    served.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_download_verifies_and_caches(server, tmp_path):
    served, url = server
    payload = b"To be, or not to be\n" * 1000
    (served / "play.txt").write_bytes(payload)
    target = tmp_path / "cache" / "play.txt"
    sha = hashlib.sha256(payload).hexdigest()
    assert download(f"{url}/play.txt", target, sha) == target
    assert target.read_bytes() == payload
    (served / "play.txt").unlink()  # a second call must not touch the network
    assert download(f"{url}/play.txt", target, sha) == target
    assert list(target.parent.iterdir()) == [target]


def test_checksum_mismatch_leaves_no_file(server, tmp_path):
    served, url = server
    (served / "play.txt").write_bytes(b"tampered")
    target = tmp_path / "cache" / "play.txt"
    with pytest.raises(DatasetUnavailableError, match="expected " + "0" * 64):
        download(f"{url}/play.txt", target, "0" * 64)
    assert list(target.parent.iterdir()) == []


def test_offline_download_fails_with_advice(tmp_path):
    # Port 9 on localhost: nothing listens there, as when the network is down.
    target = tmp_path / "x.txt"
    with pytest.raises(DatasetUnavailableError, match="Are you offline.*load_corpus\\('stdlib-docs'\\)"):
        download("http://127.0.0.1:9/x.txt", target, "0" * 64, timeout=5)
    assert list(tmp_path.iterdir()) == []


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


# --------------------------------------------------------------------------------------
# labelled texts for classification
# --------------------------------------------------------------------------------------


def test_docstring_areas_properties():
    """Docstrings change between Python versions: check properties, not counts."""
    labelled = tasks.docstring_areas()
    texts = {split: [t for t, _ in getattr(labelled, split)] for split in tasks.SPLITS}
    everything = [t for split in tasks.SPLITS for t in texts[split]]
    assert len(everything) >= 800 and len(set(everything)) == len(everything)  # no duplicates, no leaks
    assert labelled.label_names == list(tasks.DOCSTRING_AREAS)
    counts = labelled.counts()
    assert all(n > 0 for split in tasks.SPLITS for n in counts[split]), counts  # every area in every split
    largest = max(sum(counts[s][k] for s in tasks.SPLITS) for k in range(len(labelled.label_names)))
    assert largest / len(everything) < 0.45
    assert 0.7 < len(texts["train"]) / len(everything) < 0.9
    assert all(len(t.split()) >= 4 and "\n" not in t for t in everything)
    assert all(tasks.split_of(t) == split for split in tasks.SPLITS for t in texts[split])
    # a function re-exported by another module keeps its own module's area (statistics imports reduce)
    reduce_doc = tasks.first_sentence(__import__("functools").reduce.__doc__)
    assert all(t != reduce_doc for t in everything)


def test_the_split_depends_on_the_text_alone():
    examples = [(f"example number {k} of many", k % 3) for k in range(300)]
    a = tasks._split(examples, ["a", "b", "c"])
    b = tasks._split(list(reversed(examples)), ["a", "b", "c"])
    assert a == b and {len(a.train), len(a.val), len(a.test)} != {0}


def test_sms_spam_downloads_checks_and_extracts(server, tmp_path, monkeypatch):
    import io
    import zipfile

    served, url = server
    table = "ham\tOk lar... Joking wif u oni...\nspam\tFree entry in 2 a wkly comp to win FA Cup\nham\tSee you\n"
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("readme", "the SMS Spam Collection")
        z.writestr(tasks.SMS_SPAM_MEMBER, table)
    (served / "sms.zip").write_bytes(archive.getvalue())
    source = files.RemoteFile(f"{url}/sms.zip", hashlib.sha256(archive.getvalue()).hexdigest(), "sms.zip", "test")
    monkeypatch.setattr(tasks, "SMS_SPAM_MEMBER_SHA256", "0" * 64)
    with pytest.raises(DatasetUnavailableError, match="has SHA-256 .* expected 0{64}; nothing was extracted"):
        tasks.sms_spam(tmp_path / "cache", source)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["sms.zip"]  # no half-extracted file
    monkeypatch.setattr(tasks, "SMS_SPAM_MEMBER_SHA256", hashlib.sha256(table.encode()).hexdigest())
    sms = tasks.sms_spam(tmp_path / "cache", source)
    assert sms.label_names == ["ham", "spam"]
    assert sorted(sms.train + sms.val + sms.test) == sorted(
        [("Ok lar... Joking wif u oni...", 0), ("Free entry in 2 a wkly comp to win FA Cup", 1), ("See you", 0)]
    )
    (served / "sms.zip").unlink()  # cached: no network needed the second time
    assert tasks.sms_spam(tmp_path / "cache", source) == sms


def test_the_sms_spam_entry_is_the_published_file():
    assert tasks.SMS_SPAM.url.startswith("https://archive.ics.uci.edu/")
    assert tasks.SMS_SPAM.sha256 == "1587ea43e58e82b14ff1f5425c88e17f8496bfcdb67a583dbff9eefaf9963ce3"
    assert tasks.SMS_SPAM_MEMBER_SHA256 == "7d039a24a6083ed9ef0f806ebad56bbb976e3aeb8de05669173bfdc4996c239d"


def test_the_books_instructions_download_checks_and_split(server, tmp_path):
    import json

    served, url = server
    entries = [
        {"instruction": "Give a synonym of 'fast'.", "input": "", "output": "Quick."},
        {"instruction": "Translate to French.", "input": "Good morning", "output": "Bonjour."},
        {"instruction": "Name a prime number.", "input": "", "output": "7."},
    ]
    payload = json.dumps(entries).encode()
    (served / "instructions.json").write_bytes(payload)
    source = files.RemoteFile(f"{url}/instructions.json", hashlib.sha256(payload).hexdigest(), "i.json", "test")
    book = tasks.book_instructions(tmp_path / "cache", source)
    assert sorted(map(str, book.train + book.val + book.test)) == sorted(map(str, entries))
    for split in ("train", "val", "test"):
        assert all(tasks.split_of(e["instruction"] + e["input"]) == split for e in getattr(book, split))
    wrong = files.RemoteFile(source.url, "0" * 64, "other.json", "test")
    with pytest.raises(DatasetUnavailableError, match="expected 0{64}"):
        tasks.book_instructions(tmp_path / "cache", wrong)
    (served / "broken.json").write_bytes(b'[{"instruction": "x"}]')
    broken = files.RemoteFile(
        f"{url}/broken.json", hashlib.sha256(b'[{"instruction": "x"}]').hexdigest(), "b.json", "t"
    )
    with pytest.raises(DatasetUnavailableError, match="entry 0: expected the keys instruction, input and output"):
        tasks.book_instructions(tmp_path / "cache", broken)
