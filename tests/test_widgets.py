"""Interactive widgets: each one follows its controls."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from course_lib import plotting, widgets  # noqa: E402
from course_lib.ngram import NGramLanguageModel  # noqa: E402
from course_lib.tokenization import CharTokenizer  # noqa: E402


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
