import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from course_lib import plotting, widgets  # noqa: E402
from course_lib.ngram import NGramLanguageModel  # noqa: E402
from course_lib.tokenization import CharTokenizer, WordTokenizer  # noqa: E402


def test_token_pieces_cover_the_text(course_gpt2, tiktoken_gpt2):
    text = "Hello world <|endoftext|> naïve"
    for tok in (course_gpt2, tiktoken_gpt2, CharTokenizer.from_text(text)):
        assert "".join(plotting.token_pieces(tok, text)) == text
    words = WordTokenizer.from_text(text)
    assert plotting.token_pieces(words, "Hello world") == ["Hello", "world"]


def test_tokens_html_escapes_and_marks_whitespace():
    html = plotting.tokens_html(["<b>", " a", "\n"])
    assert "&lt;b&gt;" in html and "␣a" in html and "↵" in html and "<b>" not in html
    assert html.count("<span") == 3


def test_compare_tokenizers_reports_counts(course_gpt2):
    html = plotting.compare_tokenizers_html({"GPT-2": course_gpt2}, "hello world")
    assert "2 tokens" in html and "5.50 chars/token" in html


def test_compare_tokenizers_explains_what_cannot_be_encoded():
    html = plotting.compare_tokenizers_html({"chars": CharTokenizer.from_text("abc")}, "abz")
    assert "cannot encode" in html and "&#x27;z&#x27; is not in the vocabulary" in html


def test_token_explorer_updates_on_typing(course_gpt2):
    box = widgets.token_explorer({"GPT-2": course_gpt2}, "hello")
    text, view = box.children
    assert "1 tokens" in view.value
    text.value = "hello world"
    assert "2 tokens" in view.value


def test_ngram_sampler_renders_text():
    tok = CharTokenizer.from_text("abcabcabc ")
    model = NGramLanguageModel(2, tok.vocab_size).fit(tok.encode("abcabcabc "))
    box = widgets.ngram_sampler({2: model}, tok.encode, tok.decode, prompt="a")
    out = box.children[1]
    assert out.value.startswith("<pre") and len(out.value) > 200


def test_diagrams_draw_without_error():
    ax = plotting.draw_sliding_windows(list("abcdefghij"), 4, 2)
    assert "3 windows" in ax.get_title()  # starts 0, 2, 4; a 4th would need 11 tokens
    ax = plotting.plot_heatmap(torch.eye(3), list("abc"), list("abc"), annotate=True)
    assert len(ax.texts) == 9
    ax = plotting.plot_bars({"a": 1.0, "b": 2.5})
    assert len(ax.patches) == 2
    plotting.draw_next_token_prediction(["The", " cat"], {" sat": 0.6, " is": 0.3, " ran": 0.1})
    widgets.window_explorer(list("abcdefgh"))
    plt.close("all")


def test_attention_plot_and_explorer():
    w = torch.softmax(torch.randn(2, 4, 4), -1)
    ax = plotting.plot_attention(w[0], ["a", "b", "c", "d"])
    assert ax.get_xlabel() == "attends to (key)" and len(ax.texts) == 16
    calls = []

    def attend(sentence, causal):
        calls.append((sentence, causal))
        return sentence.split(), w

    box = widgets.attention_explorer(attend, ["a b c d", "d c b a"], n_heads=2)
    sentence, (head, causal), _ = box.children[0], box.children[1].children, box.children[2]
    causal.value = False
    sentence.value = "d c b a"
    head.value = 1
    assert calls == [("a b c d", True), ("a b c d", False), ("d c b a", False), ("d c b a", False)]
    plt.close("all")


def test_sampling_explorer_follows_its_sliders():
    from course_lib.generation import next_token_probs
    from course_lib.model import GPT, GPTConfig
    from course_lib.tokenization import train_bpe

    tok = train_bpe("the cat sat on the mat " * 20, 270)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, context_length=16, n_layers=1, n_heads=2, d_model=16))
    box = widgets.sampling_explorer(model, tok, prompt="the ")
    text, (temperature, top_k), (top_p, seed), _, sample = (
        box.children[0],
        box.children[1].children,
        box.children[2].children,
        box.children[3],
        box.children[4],
    )
    first = sample.value
    assert first.startswith("<pre") and "the " in first
    top_k.value = 1  # only the most likely token can be drawn: the sample becomes greedy
    greedy = sample.value
    seed.value = 5
    assert sample.value == greedy
    top_k.value, top_p.value, temperature.value = 0, 0.5, 0.5
    ids = torch.tensor(tok.encode("the "))
    kept = next_token_probs(model, ids, 0.5, top_p=0.5)
    assert abs(float(kept.sum()) - 1) < 1e-5 and int((kept > 0).sum()) < tok.vocab_size
    text.value = "cat "
    assert "cat " in sample.value
    plt.close("all")
