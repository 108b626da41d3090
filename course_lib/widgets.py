"""Interactive explorers (ipywidgets). Each one wraps a pure function that the tests check."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from .ngram import NGramLanguageModel
from .plotting import compare_tokenizers_html, draw_sliding_windows, figure_html, spoken, visible
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
    out = widgets.HTML()

    def draw(_=None) -> None:
        if len(tokens) < context.value + 1:
            out.value = f"<p>need at least {context.value + 1} tokens for one window</p>"
            return
        c, s = context.value, stride.value
        ax = draw_sliding_windows(tokens, c, s)
        n_windows = (len(tokens) - c - 1) // s + 1
        words = lambda part: ", ".join(spoken(visible(t)) for t in part)  # noqa: E731
        finding = (
            f"Context length {c}, stride {s}: {n_windows} windows, {'overlapping' if s < c else 'side by side'}; "
            f"window 0 reads {words(tokens[:c])} and predicts {words(tokens[1 : c + 1])}, its input shifted by one"
        )
        out.value = figure_html(ax.figure, finding)

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
    out = widgets.HTML()

    def draw(_=None) -> None:
        tokens, weights = attend(sentence.value, causal.value)
        shown = weights[head.value]  # (T, T)
        _, ax = plt.subplots(figsize=(0.5 * len(tokens) + 2.5, 0.45 * len(tokens) + 1.5))
        mode = "causal" if causal.value else "bidirectional"
        plot_attention(shown, tokens, title=f"head {head.value}, {mode}", ax=ax)
        weight, col = shown[-1].max(dim=-1)  # the last token sees every other one, masked or not
        finding = f"Head {head.value}: the last token, {tokens[-1]!r}, attends most to {tokens[col]!r} ({weight:.2f})"
        out.value = figure_html(ax.figure, finding)

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
    from .plotting import OKABE_ITO

    text = widgets.Text(value=prompt, description="prompt", layout=widgets.Layout(width="60%"))
    temperature = widgets.FloatSlider(value=1.0, min=0.1, max=2.0, step=0.1, description="temperature")
    top_k = widgets.IntSlider(value=0, min=0, max=50, description="top-k (0: off)")
    top_p = widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top-p")
    seed = widgets.IntSlider(value=0, min=0, max=20, description="seed")
    out = widgets.HTML()
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
        n_kept = int((kept > 0).sum())
        _, ax = plt.subplots(figsize=(9, 3))
        ax.bar(range(15), kept[top.indices].tolist(), color=OKABE_ITO[0])  # removed tokens: height 0
        ax.bar(range(15), top.values.tolist(), fill=False, edgecolor="grey", linewidth=0.8)
        ax.set_xticks(range(15), labels, rotation=45, ha="right", fontfamily="monospace")
        ax.set_ylabel("probability")
        ax.set_title(f"next token: {n_kept} of {len(kept)} tokens can be drawn (outline: before filtering)")
        plt.tight_layout()
        finding = (
            f"After {text.value!r} at temperature {temperature.value:.1f}, top-k {top_k.value or 'off'}, top-p "
            f"{top_p.value if top_p.value < 1 else 'off'}: {n_kept} of {len(kept)} tokens can be drawn; the most "
            f"likely, {spoken(labels[0])}, has probability {kept[top.indices[0]]:.2f}"
        )
        out.value = figure_html(ax.figure, finding)
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


class ChatWidget:
    """A chat in the notebook: the conversation, a message box, Send / Stop / New chat, a
    temperature slider and the speed of the last reply. A view of a headless
    :class:`~course_lib.chat.Chat` (``.chat``), which holds the logic and the tests drive.

    A reply is written in a background thread, so that the kernel stays free to receive the
    Stop button's click while tokens stream in (``background=False`` writes it in the
    caller's thread, as the tests do). Shown by ``display(widget)`` or as a cell's last value.
    """

    def __init__(self, chat, background: bool = True):
        self.chat, self.background = chat, background
        self.history = widgets.HTML(layout=widgets.Layout(width="95%"))
        self.current = widgets.HTML(layout=widgets.Layout(width="95%"))
        self.input = widgets.Textarea(  # a visible label, which screen readers announce too
            description="Message",
            placeholder="Type a message, then Send",
            continuous_update=False,  # the text reaches the kernel when focus leaves for Send, before its click
            layout=widgets.Layout(width="95%", height="60px"),
            style={"description_width": "initial"},
        )
        # no icons: they need Font Awesome's font files, which the offline decks do not ship
        self.send_button = widgets.Button(description="Send", button_style="primary")
        self.stop_button = widgets.Button(description="Stop", disabled=True)
        self.new_button = widgets.Button(description="New chat")
        # a number box, not a slider: its label names it for screen readers (a slider's handle is
        # unnamed in JupyterLab) and the arrow keys step it; the label whole, not cut to "temperat..."
        self.temperature = widgets.BoundedFloatText(
            value=chat.temperature,
            min=0.0,
            max=1.5,
            step=0.1,
            description="temperature",
            style={"description_width": "initial"},
            layout=widgets.Layout(width="170px"),
        )
        self.speed = widgets.Label("")
        self.thread = None
        self.send_button.on_click(self.send)
        self.stop_button.on_click(lambda _: self.chat.stop())
        self.new_button.on_click(self.new_chat)
        self.temperature.observe(self._set_temperature, names="value")
        self.box = widgets.VBox(
            [
                self.history,
                self.current,
                self.input,
                widgets.HBox([self.send_button, self.stop_button, self.new_button, self.temperature]),
                self.speed,
            ]
        )
        self._show_history()

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)

    def _set_temperature(self, change) -> None:
        self.chat.temperature = change["new"]

    @staticmethod
    def _turn(role: str, text: str) -> str:
        who = {"user": "You", "assistant": "Model", "system": "System"}.get(role, role)
        body = html.escape(text)
        return f"<div style='white-space:pre-wrap;margin:4px 0'><b>{who}:</b> {body}</div>"

    def _show_history(self) -> None:
        self.history.value = "".join(self._turn(m["role"], m["content"]) for m in self.chat.messages)

    def send(self, _=None) -> None:
        """Send the message box's text (the Send button)."""
        text = self.input.value.strip()
        if not text or (self.thread is not None and self.thread.is_alive()):
            return
        self.input.value = ""
        self.send_button.disabled, self.stop_button.disabled = True, False
        self.history.value += self._turn("user", text)
        if self.background:
            import threading

            self.thread = threading.Thread(target=self._reply, args=(text,), daemon=True)
            self.thread.start()
        else:
            self._reply(text)

    def _reply(self, text: str) -> None:
        written = ""
        try:
            for piece in self.chat.send(text):
                written += piece
                self.current.value = self._turn("assistant", written + " ▌")
        except Exception as error:  # shown in the widget: a thread's exception would vanish
            self.current.value = f"<pre style='color:#b00'>{html.escape(repr(error))}</pre>"
            raise
        else:
            self.current.value = ""
            self.speed.value = (
                f"{self.chat.last_tokens} tokens in {self.chat.last_seconds:.1f} s: "
                f"{self.chat.tokens_per_second:.1f} tokens/s ({self.chat.last_end})"
            )
            self._show_history()
        finally:
            self.send_button.disabled, self.stop_button.disabled = False, True

    def new_chat(self, _=None) -> None:
        """Forget the conversation (the New chat button)."""
        self.chat.stop()
        self.join()
        self.chat.reset()
        self.current.value = self.speed.value = ""
        self._show_history()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the reply being written is done."""
        if self.thread is not None:
            self.thread.join(timeout)


def chat_widget(model, tokenizer, template: str | None = None, eos_id: int | None = None, **options) -> ChatWidget:
    """A :class:`ChatWidget` over a new :class:`~course_lib.chat.Chat` (options as there:
    ``system``, ``max_new_tokens``, ``temperature``, ``seed``, ``tool``)."""
    from .chat import Chat

    return ChatWidget(Chat(model, tokenizer, template, eos_id, **options))
