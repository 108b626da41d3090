"""Interactive explorers (ipywidgets). Each one wraps a pure function that the tests check."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from .ngram import NGramLanguageModel
from .plotting import compare_tokenizers_html, draw_sliding_windows
from .runtime import model_device


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


def ngram_sampler(
    models: dict[int, NGramLanguageModel], encode: Callable, decode: Callable, prompt: str = "The "
) -> widgets.VBox:
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


def attention_explorer(
    attend: Callable[[str, bool], tuple[list[str], torch.Tensor]], sentences: Sequence[str], n_heads: int
) -> widgets.VBox:
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
            plot_attention(
                weights[head.value],
                tokens,
                title=f"head {head.value}, {'causal' if causal.value else 'bidirectional'}",
                ax=ax,
            )
            plt.show()

    for w in (sentence, head, causal):
        w.observe(draw, names="value")
    draw()
    return widgets.VBox([sentence, widgets.HBox([head, causal]), out])


def sampling_explorer(
    model: torch.nn.Module, tokenizer, prompt: str = "The ", eos_id: int | None = None
) -> widgets.VBox:
    """Temperature, top-k and top-p sliders: the next-token distribution they leave, and a sample.

    Bars show the 15 most likely next tokens; grey ones are removed by top-k / top-p.
    """
    from .generation import generate, next_token_probs
    from .plotting import visible

    text = widgets.Text(value=prompt, description="prompt", layout=widgets.Layout(width="60%"))
    temperature = widgets.FloatSlider(value=1.0, min=0.1, max=2.0, step=0.1, description="temperature")
    top_k = widgets.IntSlider(value=0, min=0, max=50, description="top-k (0: off)")
    top_p = widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top-p")
    seed = widgets.IntSlider(value=0, min=0, max=20, description="seed")
    out = widgets.Output()
    sample = widgets.HTML()
    device = model_device(model)

    def draw(_=None) -> None:
        ids = torch.tensor(tokenizer.encode(text.value) or [0], device=device)  # (T,)
        options = dict(
            temperature=temperature.value, top_k=top_k.value or None, top_p=top_p.value if top_p.value < 1 else None
        )
        plain = next_token_probs(model, ids, temperature.value)  # (V,) before filtering
        kept = next_token_probs(model, ids, **options)  # (V,) after
        top = torch.topk(plain, 15)
        labels = [visible(tokenizer.decode([i])) for i in top.indices.tolist()]
        colors = ["tab:blue" if kept[i] > 0 else "lightgrey" for i in top.indices.tolist()]
        with out:
            out.clear_output(wait=True)
            _, ax = plt.subplots(figsize=(9, 3))
            ax.bar(range(15), kept[top.indices].tolist(), color=colors)
            ax.bar(range(15), top.values.tolist(), fill=False, edgecolor="grey", linewidth=0.8)
            ax.set_xticks(range(15), labels, rotation=45, ha="right", fontfamily="monospace")
            ax.set_ylabel("probability")
            ax.set_title(
                f"next token: {int((kept > 0).sum())} of {len(kept)} tokens can be drawn (outline: before filtering)"
            )
            plt.tight_layout()
            plt.show()
        out_ids = generate(
            model, ids[None], 40, generator=torch.Generator().manual_seed(seed.value), eos_id=eos_id, **options
        )
        continuation = tokenizer.decode(out_ids[0, len(ids) :].tolist())
        sample.value = (
            "<pre style='white-space:pre-wrap'>"
            + html.escape(text.value)
            + "<b>"
            + html.escape(continuation)
            + "</b></pre>"
        )

    for w in (text, temperature, top_k, top_p, seed):
        w.observe(draw, names="value")
    draw()
    return widgets.VBox([text, widgets.HBox([temperature, top_k]), widgets.HBox([top_p, seed]), out, sample])
