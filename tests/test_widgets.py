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


def test_the_chat_widget_sends_streams_stops_and_starts_over():
    from course_lib.chat import Chat
    from course_lib.instruct import ASSISTANT, USER
    from course_lib.model import GPT, GPTConfig
    from course_lib.tokenization import train_bpe

    tok = train_bpe("the cat sat on the mat " * 20, 280, special_tokens=["<|endoftext|>", USER, ASSISTANT])
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, context_length=64, n_layers=1, n_heads=2, d_model=16))
    for background in (False, True):  # True: the reply is written in a thread, as in a notebook
        view = widgets.ChatWidget(Chat(model, tok, max_new_tokens=6), background=background)
        assert "Send" in [b.description for b in view.box.children[3].children]
        view.input.value = "the cat?"
        view.send_button.click()
        view.join(timeout=60)
        assert view.input.value == "" and not view.send_button.disabled and view.stop_button.disabled
        assert "<b>You:</b> the cat?" in view.history.value and "<b>Model:</b>" in view.history.value
        assert [m["role"] for m in view.chat.messages] == ["user", "assistant"]
        assert "tokens/s (token limit)" in view.speed.value and view.current.value == ""
        view.temperature.value = 0.8
        assert view.chat.temperature == 0.8 and view.temperature.style.description_width == "initial"
        view.new_button.click()
        assert view.chat.messages == [] and view.history.value == ""
    view.send_button.click()  # nothing typed: nothing sent
    assert view.chat.messages == []


def test_the_stop_button_ends_a_reply_being_written():
    class Slow:
        """A stand-in for course_lib.chat.Chat (tested headless in test_chat.py) whose reply
        never ends by itself."""

        temperature, messages, last_tokens, last_seconds, last_end = 0.0, [], 0, 1.0, ""
        tokens_per_second = 0.0

        def __init__(self):
            self.stopped = False

        def send(self, text):
            import time

            while not self.stopped:
                time.sleep(0.01)
                yield "."
            self.last_end = "stopped"

        def stop(self):
            self.stopped = True

    view = widgets.ChatWidget(Slow())
    view.input.value = "go on"
    view.send_button.click()
    assert not view.stop_button.disabled  # while it writes
    view.stop_button.click()
    view.join(timeout=10)
    assert not view.thread.is_alive() and "(stopped)" in view.speed.value


def test_every_control_is_labelled_and_every_plot_described(course_gpt2):
    """Screen readers name a control by its label (``description``; a button by its text); a
    plot in an explorer is an <img> with its description in alt (an Output's image has none)."""
    import ipywidgets

    from course_lib.chat import Chat
    from course_lib.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=course_gpt2.vocab_size, context_length=16, n_layers=1, n_heads=2, d_model=16))
    tok = CharTokenizer.from_text("abcabcabc ")
    weights = torch.softmax(torch.randn(2, 4, 4), -1)
    views = [
        widgets.token_explorer({"GPT-2": course_gpt2}),
        widgets.window_explorer(list("abcdefgh")),
        widgets.ngram_sampler(
            {2: NGramLanguageModel(2, tok.vocab_size).fit(tok.encode("abcabc"))}, tok.encode, tok.decode, prompt="a"
        ),  # fmt: skip
        widgets.attention_explorer(lambda s, c: (s.split(), weights), ["a b c d"], n_heads=2),
        widgets.sampling_explorer(model, course_gpt2, prompt="the "),
        widgets.ChatWidget(Chat(model, course_gpt2, "short"), background=False).box,
    ]

    def parts(widget):
        yield widget
        for child in getattr(widget, "children", ()):
            yield from parts(child)

    for view in views:
        for part in parts(view):
            assert not isinstance(part, ipywidgets.Output), "an Output's images carry no alt text"
            if isinstance(part, (ipywidgets.Button, ipywidgets.ValueWidget)) and not isinstance(
                part, (ipywidgets.HTML, ipywidgets.Label)
            ):
                assert part.description.strip(), f"a {type(part).__name__} without a label"
            if isinstance(part, ipywidgets.HTML) and "<img" in part.value:
                assert part.value.count("<img") == part.value.count(' alt="') == 1
    explorer = views[3].children[2].value
    assert (
        'alt="Head 0: the last token, &#x27;d&#x27;, attends most to ' in explorer
        and "Colour grid “head 0, causal”" in explorer
    )
    plt.close("all")
