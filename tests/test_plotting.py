"""Pictures and HTML views: token pieces, tokenizer comparisons, diagrams, attention heatmaps."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from course_lib import plotting, widgets  # noqa: E402
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
