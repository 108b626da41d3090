from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib import tokenization as tk
from course_lib.tokenization import (
    ENDOFTEXT,
    BPETokenizer,
    CharTokenizer,
    TokenizerFileError,
    WordTokenizer,
    get_pair_counts,
    load_gpt2_files,
    merge_pair,
    save_gpt2_files,
    train_bpe,
    train_bpe_naive,
)

HARD_STRINGS = [
    "",
    "hello world",
    "Hello, World!! How's it going? I'm fine, we'll see, they've left, you're right, he'd go.",
    "naïve café, Zürich, 東京, Москва, 🎉🚀👩‍👩‍👧‍👦 emoji",
    "    four leading spaces\n\n\n\ttabs\t\tand   runs   of spaces   ",
    "trailing spaces   ",
    "\n",
    " \n \n",
    "numbers 1234567890 3.14159 1e-10 and 007",
    "code: def f(x):\n    return x**2  # comment\n",
    "'s 's 'S 'LL 'll CAPS'S",
    "\u00a0non-breaking\u2009thin\u3000ideographic spaces",
    "a" * 500,
    "endoftext inside <|endoftext|> a sentence",
]


# -- the pure BPE functions ------------------------------------------------------------


def test_get_pair_counts_counts_overlapping_pairs():
    assert get_pair_counts([1, 2, 3, 1, 2]) == Counter({(1, 2): 2, (2, 3): 1, (3, 1): 1})
    assert get_pair_counts([7, 7, 7]) == Counter({(7, 7): 2})
    assert get_pair_counts([5]) == Counter()


def test_merge_pair_is_left_to_right_and_non_overlapping():
    assert merge_pair([5, 6, 6, 7, 6, 6], (6, 6), 99) == [5, 99, 7, 99]
    assert merge_pair([6, 6, 6], (6, 6), 99) == [99, 6]
    assert merge_pair([1, 2, 3], (3, 4), 99) == [1, 2, 3]
    assert merge_pair([], (1, 2), 99) == []


# -- GPT-2 through tiktoken, offline ---------------------------------------------------


def test_split_pattern_is_tiktokens_gpt2_pattern():
    from tiktoken_ext.openai_public import r50k_pat_str

    assert tk.GPT2_SPLIT_PATTERN == r50k_pat_str


def test_gpt2_encoding_known_values(tiktoken_gpt2):
    assert tiktoken_gpt2.n_vocab == 50257
    assert tiktoken_gpt2.eot_token == 50256
    # Ids every GPT-2 tutorial shows.
    assert tiktoken_gpt2.encode("hello world") == [31373, 995]
    assert tiktoken_gpt2.encode("Hello, world!") == [15496, 11, 995, 0]
    assert tiktoken_gpt2.encode(ENDOFTEXT, allowed_special="all") == [50256]


def test_damaged_rank_file_is_refused(monkeypatch):
    monkeypatch.setattr(tk.gpt2, "GPT2_RANKS_SHA256", "0" * 64)
    with pytest.raises(TokenizerFileError, match="SHA-256"):
        tk.gpt2.load_gpt2_ranks()


def test_course_encoder_matches_tiktoken_on_whole_corpus(corpus, course_gpt2, tiktoken_gpt2):
    ids = course_gpt2.encode(corpus)
    assert ids == tiktoken_gpt2.encode_ordinary(corpus)
    assert len(ids) > 100_000
    assert course_gpt2.decode(ids) == corpus


@pytest.mark.parametrize("text", HARD_STRINGS)
def test_course_encoder_matches_tiktoken_on_hard_strings(text, course_gpt2, tiktoken_gpt2):
    assert course_gpt2.encode(text, allowed_special="all") == tiktoken_gpt2.encode(text, allowed_special="all")
    assert course_gpt2.encode_ordinary(text) == tiktoken_gpt2.encode_ordinary(text)


@given(st.text(max_size=200))
def test_course_encoder_matches_tiktoken_on_arbitrary_text(course_gpt2, tiktoken_gpt2, text):
    ids = course_gpt2.encode_ordinary(text)
    assert ids == tiktoken_gpt2.encode_ordinary(text)
    assert course_gpt2.decode(ids) == text


def test_disallowed_special_token_raises_like_tiktoken(course_gpt2, tiktoken_gpt2):
    text = "before <|endoftext|> after"
    with pytest.raises(ValueError, match="special token"):
        tiktoken_gpt2.encode(text)
    with pytest.raises(ValueError, match=r"allowed_special=\{'<\|endoftext\|>'\}"):
        course_gpt2.encode(text)
    assert course_gpt2.encode(text, allowed_special={ENDOFTEXT}).count(50256) == 1
    assert 50256 not in course_gpt2.encode_ordinary(text)


def test_unknown_allowed_special_raises(course_gpt2):
    with pytest.raises(ValueError, match="not special tokens"):
        course_gpt2.encode("x", allowed_special={"<|im_start|>"})


def test_decode_outside_vocabulary_raises(course_gpt2):
    with pytest.raises(ValueError, match="token id 50257 is outside the vocabulary"):
        course_gpt2.decode([50257])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        course_gpt2.decode([-1])


def test_partial_utf8_decodes_to_replacement_character(course_gpt2, tiktoken_gpt2):
    ids = course_gpt2.encode("🎉")
    assert len(ids) > 1
    assert course_gpt2.decode(ids[:1]) == tiktoken_gpt2.decode(ids[:1])


# -- training ----------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", [tk.GPT2_SPLIT_PATTERN, None])
def test_fast_training_learns_exactly_the_naive_merges(corpus, pattern):
    text = corpus[:20_000]
    fast = train_bpe(text, 256 + 60, pattern=pattern)
    naive = train_bpe_naive(text, 256 + 60, pattern=pattern)
    assert fast.merges == naive.merges
    assert len(fast.merges) == 60


def test_training_is_deterministic_and_frequency_ordered(corpus):
    text = corpus[:50_000]
    a = train_bpe(text, 300)
    b = train_bpe(text, 300)
    assert a.merges == b.merges
    # The first merge is the most frequent adjacent byte pair inside the pre-split chunks.
    chunks = tk.bpe._pretokenize(text, tk.GPT2_SPLIT_PATTERN)
    counts = Counter()
    for chunk in chunks:
        get_pair_counts(list(chunk), counts)
    assert counts[a.merges[0]] == max(counts.values())


def test_ties_break_towards_smallest_ids():
    # "ab" and "cd" are equally frequent: (97, 98) < (99, 100) wins.
    tok = train_bpe("cd ab cd ab", 257, pattern=r"\w+")
    assert tok.merges == [(ord("a"), ord("b"))]


def test_seed_demo_hello_world_splits_into_subwords():
    text = "hello hello hello world world held help yellow hell low old word " * 20
    tok = train_bpe(text, 256 + 12)
    pieces = tok.pieces("hello world")
    assert "".join(pieces) == "hello world"
    assert 1 < len(pieces) < len("hello world")


def test_training_stops_when_nothing_is_left_to_merge():
    tok = train_bpe("ab", 256 + 10, pattern=None)
    assert tok.merges == [(97, 98)]
    assert tok.encode("ab") == [256]


def test_vocab_smaller_than_bytes_raises():
    with pytest.raises(ValueError, match="at least 256"):
        train_bpe("hello", 255)
    with pytest.raises(ValueError, match="at least 257"):
        train_bpe("hello", 256, special_tokens=[ENDOFTEXT])


def test_special_tokens_get_ids_after_merges():
    tok = train_bpe("aaaa bbbb " * 10, 256 + 3 + 1, special_tokens=[ENDOFTEXT])
    assert tok.special_tokens == {ENDOFTEXT: 256 + 3}
    assert tok.vocab_size == 260
    ids = tok.encode("aaaa" + ENDOFTEXT, allowed_special="all")
    assert ids[-1] == 259 and tok.decode(ids) == "aaaa" + ENDOFTEXT


@pytest.fixture(scope="module")
def trained(corpus):
    return train_bpe(corpus[:100_000], 512, special_tokens=[ENDOFTEXT])


@given(st.text(max_size=300))
def test_trained_round_trip(trained, text):
    assert trained.decode(trained.encode_ordinary(text)) == text


def test_trained_tokenizer_compresses(trained, corpus):
    sample = corpus[-20_000:]
    assert len(trained.encode(sample)) < 0.5 * len(sample.encode("utf-8"))


# -- save / load ---------------------------------------------------------------------------


def test_save_load_round_trip(trained, tmp_path, corpus):
    path = tmp_path / "tok.bpe"
    trained.save(path)
    assert path.read_text().startswith(tk.BPE_FILE_HEADER + "\n")
    loaded = BPETokenizer.load(path)
    assert loaded.merges == trained.merges
    assert loaded.special_tokens == trained.special_tokens
    assert loaded.pattern == trained.pattern
    assert loaded.encode(corpus[:5000]) == trained.encode(corpus[:5000])


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda lines: lines[:-5], "truncated"),
        (lambda lines: ["course_lib-bpe v9"] + lines[1:], "expected first line"),
        (lambda lines: [], "empty file"),
        (lambda lines: lines[:1] + ["pattern {not json"] + lines[2:], "malformed"),
        (lambda lines: lines[:-1] + ["1 99999"], "do not exist"),
        (lambda lines: lines[:-1] + ["1 two"], "malformed"),
    ],
)
def test_corrupted_files_raise_clear_errors(trained, tmp_path, damage, message):
    path = tmp_path / "tok.bpe"
    trained.save(path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(damage(lines)))
    with pytest.raises(TokenizerFileError, match=message):
        BPETokenizer.load(path)


def test_a_tokenizer_outside_the_course_layout_is_saved_as_gpt2_files(course_gpt2, tmp_path):
    with pytest.raises(ValueError, match="do not follow the course layout.*tokenizer_files.save_gpt2_files"):
        course_gpt2.save(tmp_path / "gpt2.bpe")
    assert not (tmp_path / "gpt2.bpe").exists()


# -- special tokens are hard boundaries in training ----------------------------------------


def test_training_never_learns_a_piece_of_a_special_token():
    docs = ["the cat sat on the mat", "a dog ran in the fog", "we sat and ran and sat"] * 30
    text = ENDOFTEXT.join(docs)
    fast, naive = (train(text, 300, special_tokens=[ENDOFTEXT]) for train in (train_bpe, train_bpe_naive))
    assert fast.merges == naive.merges
    learned = [t for i, t in fast.vocab.items() if i >= 256]
    assert not any(part in t for t in learned for part in (b"<", b"|", b">", b"endof", b"oftext")), learned
    assert not any(t.endswith(b"mat") and len(t) > 4 for t in learned)  # "mat<|endoftext|>a" never merges across
    ids = fast.encode(text, allowed_special="all")
    assert ids.count(fast.special_tokens[ENDOFTEXT]) == len(docs) - 1


@pytest.mark.parametrize("text", ["", ENDOFTEXT * 3])
def test_training_on_no_text_is_an_error(text):
    with pytest.raises(ValueError, match="no text to train on"):
        train_bpe(text, 300, special_tokens=[ENDOFTEXT])


# -- streaming encoding ----------------------------------------------------------------------

TRICKY = (
    "It's what we'll see: they've   gone,\n\n  I'd say.<|endoftext|>Next   doc 123 4567\t\t x  \n"
    "café 東京 🎉<|endoftext|><|endoftext|>'ll 're end <|endof text|> <| |>  "
)


@pytest.mark.parametrize("name", ["trained", "course_gpt2"])
def test_encode_iterable_equals_encode_for_every_cut(name, request):
    tok = request.getfixturevalue(name)
    whole = tok.encode(TRICKY, allowed_special="all")
    for cut in range(len(TRICKY) + 1):
        assert list(tok.encode_iterable([TRICKY[:cut], TRICKY[cut:]], allowed_special="all")) == whole, cut
    for a in range(0, len(TRICKY), 3):  # three pieces, cut at every pair of positions a < b
        for b in range(a, len(TRICKY) + 1):
            pieces = [TRICKY[:a], TRICKY[a:b], TRICKY[b:]]
            assert list(tok.encode_iterable(pieces, allowed_special="all")) == whole, (a, b)
    assert list(tok.encode_iterable(TRICKY, allowed_special="all")) == whole  # one character at a time


ATOMS = [*"ab '\n\t.1é🎉", ENDOFTEXT, "<|", "|>", "'ll", "  "]


@given(st.lists(st.lists(st.sampled_from(ATOMS), max_size=6).map("".join), max_size=8))
def test_encode_iterable_equals_encode_on_random_pieces(trained, pieces):
    whole = "".join(pieces)
    assert list(trained.encode_iterable(pieces, allowed_special="all")) == trained.encode(whole, allowed_special="all")


def test_encode_iterable_with_a_pattern_that_skips_text(trained):
    words_only = BPETokenizer.from_merges(trained.merges, pattern=r"\w+")  # spaces and punctuation vanish
    text = "Hello, world!  It's a test... of 12 words"
    for cut in range(len(text) + 1):
        assert list(words_only.encode_iterable([text[:cut], text[cut:]])) == words_only.encode(text)


def test_encode_iterable_refuses_a_special_token_that_is_not_allowed(trained):
    with pytest.raises(ValueError, match="contains the special token"):
        list(trained.encode_iterable(["abc <|endof", "text|> d"]))


def test_encode_iterable_memory_does_not_grow_with_the_input(trained, corpus):
    import tracemalloc

    lines = corpus[:200_000].splitlines(keepends=True)

    def peak(repeats: int) -> int:
        tracemalloc.start()
        count = sum(1 for _ in trained.encode_iterable(line for _ in range(repeats) for line in lines))
        peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert count > 0
        return peak_bytes

    small, large = peak(1), peak(10)  # 0.2 MB and 2 MB of text
    assert large < small + 256 * 1024, (small, large)  # not ten times the memory
    assert large < 4 * 1024 * 1024


# -- tokenizers trained elsewhere --------------------------------------------------------------


def test_gpt2_vocab_and_merges_files_give_tiktokens_ids(course_gpt2, tiktoken_gpt2, corpus, tmp_path):
    vocab_path, merges_path = save_gpt2_files(course_gpt2, tmp_path)
    assert merges_path.read_text(encoding="utf-8").splitlines()[:3] == ["#version: 0.2", "Ġ t", "Ġ a"]
    loaded = load_gpt2_files(vocab_path, merges_path)
    assert loaded.special_tokens == {ENDOFTEXT: 50256} and loaded.vocab_size == 50257
    assert loaded.merges == course_gpt2.merges and loaded.vocab == course_gpt2.vocab
    assert loaded.encode(corpus, allowed_special="all") == tiktoken_gpt2.encode(corpus, allowed_special="all")
    for text in HARD_STRINGS:
        assert loaded.encode(text, allowed_special="all") == tiktoken_gpt2.encode(text, allowed_special="all")
        assert loaded.decode(loaded.encode(text, allowed_special="all")) == text


def test_a_vocabulary_with_any_ids_and_a_special_token_at_id_0(trained, corpus):
    """Shift every id up by one and put <|endoftext|> at 0 (as SmolLM2 does): same text, ids + 1."""
    vocab = {i + 1: t for i, t in trained.vocab.items()}
    merges = [(trained.vocab[a], trained.vocab[b]) for a, b in trained.merges]
    shifted = BPETokenizer.from_vocab(vocab, merges, {ENDOFTEXT: 0}, pattern=trained.pattern)
    text = corpus[:3000] + ENDOFTEXT + " the end"
    expected = [
        0 if i == trained.special_tokens[ENDOFTEXT] else i + 1 for i in trained.encode(text, allowed_special="all")
    ]
    assert shifted.encode(text, allowed_special="all") == expected
    assert shifted.decode(expected) == text and shifted.vocab_size == trained.vocab_size


def test_rank_is_the_position_in_the_merge_list_not_the_id():
    vocab = {b: bytes([b]) for b in range(256)} | {300: b"ab", 301: b"bc"}
    first_ab = BPETokenizer.from_vocab(vocab, [(b"a", b"b"), (b"b", b"c")], pattern=None)
    first_bc = BPETokenizer.from_vocab(vocab, [(b"b", b"c"), (b"a", b"b")], pattern=None)
    assert first_ab.encode("abc") == [300, ord("c")] and first_bc.encode("abc") == [ord("a"), 301]


def test_tokenizers_trained_elsewhere_fail_clearly(tmp_path):
    vocab = {b: bytes([b]) for b in range(256)} | {256: b"ab"}
    with pytest.raises(ValueError, match=r"merge 0 \(b'a', b'x!'\): b'x!' is not in the vocabulary"):
        BPETokenizer.from_vocab(vocab, [(b"a", b"x!")])
    with pytest.raises(ValueError, match="makes b'ba', which is not in the vocabulary"):
        BPETokenizer.from_vocab(vocab, [(b"b", b"a")])
    with pytest.raises(ValueError, match=r"contains b'ab' twice, with ids 256 and 257"):
        BPETokenizer.from_vocab(vocab | {257: b"ab"}, [(b"a", b"b")])
    with pytest.raises(ValueError, match="special token '<s>' has id 256, which is already used"):
        BPETokenizer.from_vocab(vocab, [(b"a", b"b")], {"<s>": 256})
    with pytest.raises(ValueError, match="special token 'ab' is also an ordinary token"):
        BPETokenizer.from_vocab(vocab, [(b"a", b"b")], {"ab": 300})
    with pytest.raises(ValueError, match="must contain the single bytes; 255 of 256 are missing"):
        BPETokenizer.from_vocab({0: b"a"}, [])
    lacking = BPETokenizer.from_vocab({i: t for i, t in vocab.items() if t != b"\x04"}, [(b"a", b"b")])
    assert lacking.missing_bytes == [4] and lacking.decode(lacking.encode("abc")) == "abc"
    with pytest.raises(ValueError, match=r"byte 0x04 \('\\x04'\) of the text is not in this tokenizer's vocabulary"):
        lacking.encode("ab\x04")
    (tmp_path / "vocab.json").write_text('{"a": 0, "b": 0}')
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    with pytest.raises(TokenizerFileError, match="ids 0 are used by more than one token"):
        load_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    (tmp_path / "vocab.json").write_text('{"a": 0, "b": 1}')
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b c\n")
    with pytest.raises(TokenizerFileError, match="line 2: expected two tokens"):
        load_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")


# -- character and word tokenizers -----------------------------------------------------------


def test_char_tokenizer_round_trip_and_errors():
    tok = CharTokenizer.from_text("hello world")
    assert tok.vocab_size == len(set("hello world"))
    assert tok.decode(tok.encode("low hello")) == "low hello"
    with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
        tok.encode("zebra")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size])


def test_word_tokenizer_specials_and_unknowns():
    tok = WordTokenizer.from_text("the cat sat on the mat. the end.")
    assert tok.itos[:4] == ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
    assert tok.itos[4] == "the"  # most frequent word first
    ids = tok.encode("the dog sat.", add_bos=True, add_eos=True)
    assert ids[0] == tok.stoi["[BOS]"] and ids[-1] == tok.stoi["[EOS]"]
    assert ids[2] == tok.stoi["[UNK]"]
    assert tok.decode(ids) == "[BOS] the [UNK] sat. [EOS]"
    assert tok.decode(ids, skip_special=True) == "the sat."


def test_word_tokenizer_without_unknown_token_raises():
    tok = WordTokenizer.from_text("the cat sat", specials=(), unk_token=None)
    with pytest.raises(ValueError, match="'dog' is not in the vocabulary and this tokenizer has no unknown token"):
        tok.encode("the dog")
    with pytest.raises(ValueError, match="'\\[BOS\\]' is not in the vocabulary"):
        tok.encode("the cat", add_bos=True)


def test_word_tokenizer_max_size_and_min_count():
    tok = WordTokenizer.from_text("a a a b b c", min_count=2, max_size=5)
    assert tok.itos == ["[PAD]", "[UNK]", "[BOS]", "[EOS]", "a"]
