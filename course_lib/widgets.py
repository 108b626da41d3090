"""Interactive explorers (ipywidgets). Each one wraps a pure function that the tests check."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

import ipywidgets as widgets
import torch
import matplotlib.pyplot as plt

from .ngram import NGramLanguageModel
from .plotting import compare_tokenizers_html, draw_sliding_windows


def token_explorer(tokenizers: dict, text: str = "Hello world! Tokenizers don't see words.") -> widgets.VBox:
    """Type any text and see how each tokenizer cuts it into tokens."""
    box = widgets.Textarea(value=text, description="Text:", layout=widgets.Layout(width="95%", height="70px"))
    view = widgets.HTML(compare_tokenizers_html(tokenizers, text))

    def update(change) -> None:
        view.value = compare_tokenizers_html(tokenizers, change["new"])

    box.observe(update, names="value")
    return widgets.VBox([box, view])


def window_explorer(tokens: Sequence[str], max_context: int = 8) -> widgets.VBox:
    """Move the context-length and stride sliders and watch the training windows change."""
    context = widgets.IntSlider(value=4, min=1, max=max_context, description="context")
    stride = widgets.IntSlider(value=4, min=1, max=max_context, description="stride")
    out = widgets.Output()

    def draw(_=None) -> None:
        with out:
            out.clear_output(wait=True)
            if len(tokens) < context.value + 1:
                print(f"need at least {context.value + 1} tokens for one window")
                return
            draw_sliding_windows(tokens, context.value, stride.value)
            plt.show()

    context.observe(draw, names="value")
    stride.observe(draw, names="value")
    draw()
    return widgets.VBox([widgets.HBox([context, stride]), out])


def ngram_sampler(models: dict[int, NGramLanguageModel], encode: Callable, decode: Callable, prompt: str = "The ") -> widgets.VBox:
    """Pick an n-gram order and a seed and read what the model writes."""
    order = widgets.Dropdown(options=sorted(models), value=max(models), description="order n")
    seed = widgets.IntSlider(value=0, min=0, max=20, description="seed")
    start = widgets.Text(value=prompt, description="prompt")
    out = widgets.HTML()

    def sample(_=None) -> None:
        model = models[order.value]
        context = encode(start.value)
        if len(context) < model.order - 1 and not model.backoff:
            out.value = f"<i>the prompt needs at least {model.order - 1} tokens for a {model.order}-gram model</i>"
            return
        ids = model.sample(context, 200, generator=torch.Generator().manual_seed(seed.value))
        out.value = "<pre style='white-space:pre-wrap'>" + html.escape(decode(ids)) + "</pre>"

    for w in (order, seed, start):
        w.observe(sample, names="value")
    sample()
    return widgets.VBox([widgets.HBox([order, seed, start]), out])



def attention_explorer(attend: Callable[[str, bool], tuple[list[str], torch.Tensor]], sentences: Sequence[str], n_heads: int) -> widgets.VBox:
    """Pick a sentence, a head and masking on/off; see that head's attention heatmap.

    ``attend(sentence, causal)`` returns the tokens and the weights of every head, (H, T, T).
    """
    from .plotting import plot_attention

    sentence = widgets.Dropdown(options=list(sentences), description="sentence", layout=widgets.Layout(width="60%"))
    head = widgets.IntSlider(value=0, min=0, max=n_heads - 1, description="head")
    causal = widgets.Checkbox(value=True, description="causal mask")
    out = widgets.Output()

    def draw(_=None) -> None:
        tokens, weights = attend(sentence.value, causal.value)
        with out:
            out.clear_output(wait=True)
            _, ax = plt.subplots(figsize=(0.5 * len(tokens) + 2.5, 0.45 * len(tokens) + 1.5))
            plot_attention(weights[head.value], tokens, title=f"head {head.value}, {'causal' if causal.value else 'bidirectional'}", ax=ax)
            plt.show()

    for w in (sentence, head, causal):
        w.observe(draw, names="value")
    draw()
    return widgets.VBox([sentence, widgets.HBox([head, causal]), out])
