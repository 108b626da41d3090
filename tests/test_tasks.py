"""Chapter 10-12 data sets: labelled docstrings and SMS, the instruction sets, multiple choice,
and the split by hash that keeps every text in one split."""

import hashlib

import pytest

from course_lib import files, tasks
from course_lib.files import DatasetUnavailableError
from course_lib.tasks import AREA_INSTRUCTION, docs_multiple_choice, docstring_areas, split_of


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


def test_every_docstring_text_has_the_module_of_its_area():
    assert tasks.module_of("http.client.HTTPConnection.close()") == "http.client"  # not "http", not "http.server"
    assert tasks.module_of("os.path.join()") == "os" and tasks.module_of("json") == "json"
    with pytest.raises(ValueError, match="none of the modules"):
        tasks.module_of("numpy.array()")
    modules, labelled = tasks.docstring_modules(), tasks.docstring_areas()
    for split in tasks.SPLITS:
        for text, label in getattr(labelled, split):  # each text's module lies in its labelled area
            assert modules[text] in tasks.DOCSTRING_AREAS[labelled.label_names[label]]
    in_val = [modules[text] for text, _ in labelled.val]
    assert len(set(in_val)) >= 20 and max(map(in_val.count, set(in_val))) >= 3  # texts come in modules


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


def test_the_docs_assistant_set_has_every_kind_in_every_split(instructions):
    kinds = instructions.kinds()
    assert set(kinds) == {"describe", "name", "area", "explain"}
    assert all(n > 0 for counts in kinds.values() for n in counts)
    for split in ("train", "val", "test"):
        for e in getattr(instructions, split):
            assert set(e) == {"instruction", "input", "output", "kind"} and e["output"].strip()
            fact = e["input"] if e["kind"] in ("name", "area") else e["output"]
            if e["kind"] != "explain":
                assert split_of(fact) == split  # held out by fact: a test sentence is never trained on
            if e["kind"] == "explain":
                assert "::=" not in e["output"]  # no grammar lines


def test_area_instructions_agree_with_chapter_10(instructions):
    areas = docstring_areas()
    labelled = {text: areas.label_names[y] for text, y in areas.train + areas.val + areas.test}
    for e in instructions.train + instructions.test:
        if e["kind"] == "area":
            assert e["instruction"] == AREA_INSTRUCTION and labelled[e["input"]] == e["output"]


def test_multiple_choice_questions_hold_their_answer_once(instructions):
    questions = docs_multiple_choice(instructions.test, n_options=4)
    describe = {e["instruction"]: e["output"] for e in instructions.test if e["kind"] == "describe"}
    assert len(questions) == len(describe)
    for q in questions:
        assert len(q["options"]) == len(set(q["options"])) == 4
        assert q["options"][q["answer"]] == describe[q["question"]]
    assert docs_multiple_choice(instructions.test) == questions  # deterministic
    assert len({q["answer"] for q in questions}) == 4  # the right answer is not always in one place
