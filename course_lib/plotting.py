"""Pictures the notebooks show: token colourings, heatmaps, bar charts and diagrams.

Every function draws into a matplotlib ``Axes`` (a new figure if none is given) or returns
HTML, and never writes a file: ``scripts/make_figures.py`` saves the static diagrams. Each takes
its numbers as tensors on any device (a GPU's included) or as plain numbers: :func:`on_cpu`
brings them to where matplotlib can read them.

Every figure a notebook shows goes through :func:`show`, which attaches a text description
(the finding, then what is plotted, read from the figure) that the slide decks put in the
image's ``alt``; :func:`use_course_style` makes the default colours colour-blind safe and
tells lines apart by dash and marker too, so a figure also reads in greyscale.
"""

from __future__ import annotations

import base64
import html
import io
import math
import unicodedata
from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import torch
from cycler import cycler
from matplotlib.axes import Axes
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

OKABE_ITO = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000", "#E69F00", "#56B4E9"]
"""Okabe & Ito's colour-blind-safe colours (yellow left out: too pale on white), darkest
first: the first five have at least 3:1 contrast on white, WCAG's bar for graphics."""
DASHES = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 3))]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
LINE_CYCLE = cycler(color=OKABE_ITO) + cycler(linestyle=DASHES) + cycler(marker=MARKERS)
"""The n-th line differs from the others in colour, dash and marker at once."""
COLORMAP = "cividis"
"""Default for images: lightness rises steadily, so it reads in greyscale and for every
common colour-vision deficiency."""
PLACEHOLDER = "No description has been provided for this image"  # nbconvert's, never ours

PALETTE = ["#fde68a", "#bfdbfe", "#bbf7d0", "#fecaca", "#ddd6fe", "#fed7aa", "#a5f3fc", "#f5d0fe"]
"""Light background colours, one per token in turn, so neighbouring tokens differ."""

INPUT_COLOR, TARGET_COLOR = "#bfdbfe", "#fed7aa"


def on_cpu(values) -> torch.Tensor:
    """What a figure plots, as floats on the CPU, cut from autograd. matplotlib reads its data
    through NumPy, which refuses a tensor on a GPU ("can't convert cuda:0 device type tensor to
    numpy"), one that requires grad and a bfloat16 one: every plotting function passes its
    numbers through here. A tensor comes back as float32; numbers, and lists of numbers or of
    tensors (losses kept as 0-d tensors, say), as float64: the values matplotlib would read."""
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().float()
    if isinstance(values, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in values):
        return torch.stack([on_cpu(v).double() for v in values])
    return torch.tensor(values, dtype=torch.float64)


def token_pieces(tokenizer, text: str) -> list[str]:
    """The text of each token of ``text``, for any course tokenizer or a tiktoken Encoding."""
    if hasattr(tokenizer, "pieces"):
        return tokenizer.pieces(text, allowed_special="all")
    if hasattr(tokenizer, "decode_single_token_bytes"):  # tiktoken.Encoding
        ids = tokenizer.encode(text, allowed_special="all")
        return [tokenizer.decode_single_token_bytes(i).decode("utf-8", errors="replace") for i in ids]
    return [tokenizer.decode([i]) for i in tokenizer.encode(text)]


def visible(text: str) -> str:
    """Make whitespace visible: spaces as ␣, newlines as ↵, tabs as →; other control
    characters as escapes (\\x0b), which no font draws."""
    text = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "→")
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


def tokens_html(pieces: Sequence[str]) -> str:
    """Each token on its own coloured background; spaces shown as ␣ and newlines as ↵."""
    spans = []
    for k, piece in enumerate(pieces):
        shown = visible(html.escape(piece))
        color = PALETTE[k % len(PALETTE)]
        spans.append(
            f'<span style="background:{color};color:#111;padding:1px 2px;margin:1px;'
            f'border-radius:3px;font-family:monospace;white-space:pre;display:inline-block">{shown}</span>'
        )
    return '<div style="line-height:1.9">' + "".join(spans) + "</div>"


def compare_tokenizers_html(tokenizers: dict, text: str) -> str:
    """One row per tokenizer: its name, token count, characters per token, and the colouring."""
    rows = []
    for name, tokenizer in tokenizers.items():
        try:
            pieces = token_pieces(tokenizer, text)
        except ValueError as err:  # e.g. a character the character tokenizer never saw
            stats, shown = "cannot encode", f"<i>{html.escape(str(err))}</i>"
        else:
            stats = f"{len(pieces)} tokens<br>{len(text) / max(len(pieces), 1):.2f} chars/token"
            shown = tokens_html(pieces)
        rows.append(
            f"<tr><td style='text-align:left;vertical-align:top;padding-right:12px'><b>{html.escape(name)}</b><br>"
            f"{stats}</td><td style='text-align:left'>{shown}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def show_tokens(tokenizers: dict, text: str):
    """Display :func:`compare_tokenizers_html` in a notebook."""
    from IPython.display import HTML

    return HTML(compare_tokenizers_html(tokenizers, text))


def plot_heatmap(
    matrix: torch.Tensor,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    annotate: bool = False,
    ax: Axes | None = None,
    cmap: str = "Blues",
    tokens: bool = True,
) -> Axes:
    """A labelled heatmap (counts, probabilities, attention weights). With ``tokens`` the labels
    are tokens, shown with :func:`visible` spaces; otherwise plain words."""
    matrix = on_cpu(matrix)
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * len(col_labels) + 2, 0.45 * len(row_labels) + 1.5))
    image = ax.imshow(matrix.numpy(), cmap=cmap, aspect="auto")
    show = visible if tokens else str
    ax.set_xticks(range(len(col_labels)), [show(str(c)) for c in col_labels], rotation=90 if tokens else 30,
                  ha="center" if tokens else "right")  # fmt: skip
    ax.set_yticks(range(len(row_labels)), [show(str(r)) for r in row_labels])
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if annotate:
        top = matrix.max().item() or 1.0
        counts = bool((matrix == matrix.round()).all())  # integer counts, or probabilities?
        for i in range(matrix.shape[0]):
            for j in range(matrix.shape[1]):
                value = matrix[i, j].item()
                text = f"{value:.0f}" if counts else f"{value:.2f}"
                ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if value > top / 2 else "black")
    ax.figure.colorbar(image, ax=ax, fraction=0.04)
    return ax


def plot_bars(
    values: dict[str, float], title: str = "", ylabel: str = "", ax: Axes | None = None, fmt: str = "{:.2f}"
) -> Axes:
    """Bar chart with the value written on each bar."""
    heights = on_cpu(list(values.values())).tolist()
    if ax is None:
        _, ax = plt.subplots(figsize=(1.3 * len(values) + 2, 3.2))
    bars = ax.bar(list(values), heights, color=PALETTE[1], edgecolor="#1e3a8a")
    for bar, value in zip(bars, heights):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), fmt.format(value), ha="center", va="bottom")
    ax.set(title=title, ylabel=ylabel)
    ax.spines[["top", "right"]].set_visible(False)
    return ax


def _token_box(ax: Axes, x: float, y: float, text: str, color: str, width: float = 0.9) -> None:
    ax.add_patch(
        FancyBboxPatch((x - width / 2, y - 0.3), width, 0.6, boxstyle="round,pad=0.02", fc=color, ec="#334155")
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=10, family="monospace")


def draw_sliding_windows(
    tokens: Sequence[str], context_length: int, stride: int, max_windows: int = 4, ax: Axes | None = None
) -> Axes:
    """The token stream on top; below it each window's inputs (blue) and targets (orange)."""
    n_windows = max(0, (len(tokens) - context_length - 1) // stride + 1)
    shown = min(n_windows, max_windows)
    unit = max(1.0, 0.12 * max(len(t) for t in tokens) + 0.3)  # box pitch that fits the longest token
    bottom = -1.0 - 2.0 * (shown - 1) - 0.8 if shown else -0.5
    if ax is None:
        _, ax = plt.subplots(figsize=(0.8 * unit * len(tokens) + 2.0, 0.75 * (0.6 - bottom) + 0.5))
    for i, tok in enumerate(tokens):
        _token_box(ax, i * unit, 0, tok, "#f1f5f9", width=0.92 * unit)
    ax.text(-0.8, 0, "text", ha="right", va="center", fontsize=10)
    for w in range(shown):
        start = w * stride
        y_in = -1.0 - 2.0 * w
        y_out = y_in - 0.8
        for t in range(context_length):
            _token_box(ax, (start + t) * unit, y_in, tokens[start + t], INPUT_COLOR, width=0.92 * unit)
            _token_box(ax, (start + t + 1) * unit, y_out, tokens[start + t + 1], TARGET_COLOR, width=0.92 * unit)
        ax.text(-0.8, y_in, f"window {w}: input x", ha="right", va="center", fontsize=10)
        ax.text(-0.8, y_out, "target y", ha="right", va="center", fontsize=10)
    ax.set_xlim(-4.2, len(tokens) * unit)
    ax.set_ylim(bottom - 0.4, 0.5)
    ax.set_title(
        f"context length {context_length}, stride {stride}: {n_windows} windows"
        + (f" (first {shown} shown)" if shown < n_windows else "")
    )
    ax.axis("off")
    return ax


def draw_next_token_prediction(context: Sequence[str], candidates: dict[str, float], ax: Axes | None = None) -> Axes:
    """A context on the left and the model's distribution over the next token on the right."""
    candidates = dict(zip(candidates, on_cpu(list(candidates.values())).tolist()))
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3))
    for i, tok in enumerate(context):
        _token_box(ax, i * 1.1, 0, tok, INPUT_COLOR, width=1.0)
    x0 = len(context) * 1.1 + 0.4
    ax.annotate("", xy=(x0 + 1.2, 0), xytext=(x0, 0), arrowprops=dict(arrowstyle="-|>", lw=2, color="#334155"))
    ax.text(x0 + 0.6, 0.45, "model", ha="center", fontsize=10)
    top = max(candidates.values())
    for k, (tok, p) in enumerate(candidates.items()):
        y = 1.2 - k * 0.75
        _token_box(ax, x0 + 2.1, y, tok, TARGET_COLOR if p == top else "#f1f5f9", width=1.2)
        ax.add_patch(plt.Rectangle((x0 + 2.9, y - 0.18), 3 * p, 0.36, color="#1e3a8a"))
        ax.text(x0 + 3.0 + 3 * p, y, f"{p:.2f}", va="center", fontsize=9)
    ax.set_xlim(-0.7, x0 + 5.5)
    ax.set_ylim(1.2 - len(candidates) * 0.75, 1.7)
    ax.axis("off")
    ax.set_title("A language model reads the context and outputs a probability for every next token")
    return ax


def draw_merge_steps(steps: Sequence[Sequence[str]], labels: Sequence[str], ax: Axes | None = None) -> Axes:
    """BPE at work: one row per step, each token a box, merged tokens growing wider."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.8 * len(steps) + 0.6))
    right = 0.0
    for row, (pieces, label) in enumerate(zip(steps, labels)):
        x, y = 0.0, -row
        for k, piece in enumerate(pieces):
            width = 0.55 * len(piece) + 0.25
            _token_box(ax, x + width / 2, y, piece, PALETTE[k % len(PALETTE)], width=width)
            x += width + 0.12
        right = max(right, x)
        ax.text(-0.4, y, label, ha="right", va="center", fontsize=10)
    ax.set_xlim(-3.6, right + 0.2)
    ax.set_ylim(-len(steps) + 0.4, 0.6)
    ax.axis("off")
    ax.set_title("Byte-pair encoding: merge the most frequent pair, again and again")
    return ax


def plot_attention(weights: torch.Tensor, tokens: Sequence[str], title: str = "", ax: Axes | None = None) -> Axes:
    """Attention weights (T, T): row = the token attending (query), column = the token attended to (key)."""
    return plot_heatmap(
        weights,
        tokens,
        tokens,
        title=title,
        xlabel="attends to (key)",
        ylabel="token (query)",
        annotate=len(tokens) <= 10,
        ax=ax,
        cmap="Purples",
    )


def draw_bottleneck_vs_attention(
    words: Sequence[str] = ("le", "chat", "est", "noir"), weights: Sequence[float] = (0.05, 0.1, 0.15, 0.7)
) -> plt.Figure:
    """Left: an RNN encoder squeezes the sentence into one vector. Right: attention looks back at every state."""
    weights = on_cpu(weights).tolist()
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
    for ax, attention in zip(axes, (False, True)):
        n = len(words)
        for i, word in enumerate(words):
            _token_box(ax, i * 1.3, 0, f"h{i + 1}", INPUT_COLOR, width=1.0)
            ax.text(i * 1.3, -0.65, word, ha="center", fontsize=10, style="italic")
            if i:
                ax.annotate(
                    "",
                    xy=(i * 1.3 - 0.5, 0),
                    xytext=(i * 1.3 - 0.8, 0),
                    arrowprops=dict(arrowstyle="-|>", color="#334155"),
                )
        decoder_x = (n - 1) * 1.3 / 2
        _token_box(ax, decoder_x, 2.4, "decoder: 'black'", TARGET_COLOR, width=2.6)
        if attention:
            for i, w in enumerate(weights):
                ax.annotate(
                    "",
                    xy=(decoder_x, 2.1),
                    xytext=(i * 1.3, 0.3),
                    arrowprops=dict(arrowstyle="-|>", lw=1 + 10 * w, color="#7c3aed", alpha=0.35 + 0.6 * w),
                )
                ax.text(i * 1.3 + 0.15, 0.55, f"{w:.2f}", fontsize=9, color="#5b21b6")
            ax.set_title("attention (Bahdanau, 2014): a weighted look at every state")
        else:
            _token_box(ax, (n - 1) * 1.3 + 1.6, 1.2, "c", "#fde68a", width=0.7)
            ax.annotate(
                "",
                xy=((n - 1) * 1.3 + 1.6, 0.9),
                xytext=((n - 1) * 1.3 + 0.5, 0.1),
                arrowprops=dict(arrowstyle="-|>", color="#334155"),
            )
            ax.annotate(
                "",
                xy=(decoder_x + 1.0, 2.1),
                xytext=((n - 1) * 1.3 + 1.5, 1.5),
                arrowprops=dict(arrowstyle="-|>", color="#334155"),
            )
            ax.set_title("RNN encoder-decoder: one fixed vector c for the whole sentence")
        ax.set_xlim(-0.8, (n - 1) * 1.3 + 2.3)
        ax.set_ylim(-0.9, 2.9)
        ax.axis("off")
    fig.tight_layout()
    return fig


def draw_causal_mask(tokens: Sequence[str], ax: Axes | None = None) -> Axes:
    """Which token may look at which: allowed on and below the diagonal, -inf above it."""
    T = len(tokens)
    if ax is None:
        _, ax = plt.subplots(figsize=(0.8 * T + 1.8, 0.8 * T + 1.2))
    for i in range(T):
        for j in range(T):
            allowed = j <= i
            ax.add_patch(plt.Rectangle((j, T - 1 - i), 0.95, 0.95, color=PALETTE[2] if allowed else "#e5e7eb"))
            ax.text(
                j + 0.47,
                T - 1 - i + 0.47,
                "✓" if allowed else "−∞",
                ha="center",
                va="center",
                fontsize=11,
                color="#14532d" if allowed else "#6b7280",
            )
    ax.set_xticks([j + 0.47 for j in range(T)], tokens)
    ax.set_yticks([T - 1 - i + 0.47 for i in range(T)], tokens)
    ax.xaxis.tick_top()
    ax.set_xlabel("keys: the tokens looked at")
    ax.set_ylabel("queries: the token looking")
    ax.set_xlim(0, T)
    ax.set_ylim(0, T)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title("causal mask: scores above the diagonal become −∞ before softmax", pad=30)
    return ax


def draw_transformer_block(ax: Axes | None = None) -> Axes:
    """A pre-norm GPT block: LayerNorm → attention → add, LayerNorm → feed-forward → add."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 7.4))
    boxes = [  # (y, label, colour)
        (0.5, "x  (B, T, C)", "#f1f5f9"),
        (2.0, "LayerNorm (ln_1)", "#fde68a"),
        (3.2, "causal multi-head attention", "#ddd6fe"),
        (5.0, "LayerNorm (ln_2)", "#fde68a"),
        (6.2, "feed-forward: C → 4C → C", "#bbf7d0"),
        (8.0, "x  (B, T, C)", "#f1f5f9"),
    ]
    for y, label, colour in boxes:
        ax.add_patch(FancyBboxPatch((0.6, y - 0.35), 3.8, 0.7, boxstyle="round,pad=0.05", fc=colour, ec="#334155"))
        ax.text(2.5, y, label, ha="center", va="center", fontsize=10)
    for y0, y1 in [(0.85, 1.65), (2.35, 2.85), (3.55, 4.15), (4.25, 4.65), (5.35, 5.85), (6.55, 7.15), (7.25, 7.65)]:
        ax.annotate("", xy=(2.5, y1), xytext=(2.5, y0), arrowprops=dict(arrowstyle="-|>", color="#334155"))
    for y_add, y_from in [(4.2, 1.2), (7.2, 4.5)]:  # the residual connections
        ax.add_patch(plt.Circle((2.5, y_add), 0.2, fc="white", ec="#334155"))
        ax.text(2.5, y_add, "+", ha="center", va="center", fontsize=13)
        ax.annotate("", xy=(2.7, y_add), xytext=(4.9, y_add), arrowprops=dict(arrowstyle="-|>", color="#dc2626"))
        ax.plot([2.5, 4.9, 4.9], [y_from, y_from, y_add], color="#dc2626")
    ax.text(5.05, 2.7, "residual", color="#dc2626", rotation=90, va="center", fontsize=9)
    ax.text(5.05, 5.9, "residual", color="#dc2626", rotation=90, va="center", fontsize=9)
    ax.set_xlim(0, 5.6)
    ax.set_ylim(0, 8.6)
    ax.axis("off")
    ax.set_title("a pre-norm transformer block (GPT-2)")
    return ax


def draw_rope_rotation(m: int = 3, n: int = 1, theta: float = 0.45, ax: Axes | None = None) -> Axes:
    """One pair of dimensions: q rotated by mθ, k by nθ; the angle between them changes by (m − n)θ."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 5.2))
    q0, k0 = (1.0, 0.25), (0.8, -0.35)

    def rotate(v, angle):
        c, s = math.cos(angle), math.sin(angle)
        return (c * v[0] - s * v[1], s * v[0] + c * v[1])

    for vec, label, colour, style, dy in [
        (q0, "q before rotation", "#7c3aed", ":", 0.06),
        (k0, "k before rotation", "#ea580c", ":", -0.08),
        (rotate(q0, m * theta), f"q at position m={m}", "#7c3aed", "-", 0.06),
        (rotate(k0, n * theta), f"k at position n={n}", "#ea580c", "-", -0.12),
    ]:
        ax.annotate("", xy=vec, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", lw=2, color=colour, linestyle=style))
        ax.text(vec[0] * 1.12, vec[1] * 1.12 + dy, label, color=colour, fontsize=10, ha="center")
    ax.add_patch(plt.Circle((0, 0), 1.03, fill=False, ls="--", color="#cbd5e1"))
    ax.set_xlim(-1.3, 1.3)
    ax.set_ylim(-1.3, 1.3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("RoPE on one pair: q turns by mθ, k by nθ; the angle\nbetween them is their first angle + (m − n)θ")
    return ax


def plot_confusion_matrix(
    matrix: torch.Tensor, label_names: Sequence[str], title: str = "", ax: Axes | None = None
) -> Axes:
    """Counts (n, n): row = the true label, column = the label predicted; the diagonal is right."""
    if ax is None:
        _, ax = plt.subplots(figsize=(0.9 * len(label_names) + 2.5, 0.6 * len(label_names) + 1.5))
    return plot_heatmap(
        matrix, label_names, label_names, title=title, xlabel="predicted", ylabel="true", annotate=True, ax=ax,
        tokens=False,
    )  # fmt: skip


def plot_curves(
    steps: Sequence[int],
    curves: dict[str, Sequence[float]],
    ylabel: str,
    ax: Axes | None = None,
    baseline: float | None = None,
) -> Axes:
    """Several curves against the step (training and validation loss or accuracy)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.4))
    for label, values in curves.items():
        ax.plot(on_cpu(steps).numpy(), on_cpu(values).numpy(), label=label)  # colour, dash, marker: the course cycle
    if baseline is not None:
        ax.axhline(baseline, color="gray", ls="--", label="majority class")
    ax.set(xlabel="step", ylabel=ylabel)
    ax.legend(fontsize=8)
    return ax


# ----------------------------------------------------------------------------------------
# Accessible figures: colours for every vision, and a description for every image
# ----------------------------------------------------------------------------------------


def use_course_style() -> None:
    """Colour-blind-safe defaults for every later figure (notebooks get them from
    ``runtime.start``): Okabe-Ito lines that also differ by dash and marker, cividis images."""
    mpl.rcParams.update({"axes.prop_cycle": LINE_CYCLE, "image.cmap": COLORMAP, "lines.markersize": 5})


def luminance(color) -> float:
    """Relative luminance (0 black .. 1 white) of a matplotlib colour, as WCAG's contrast uses it."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in mpl.colors.to_rgb(color)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def lightness(color) -> float:
    """CIE L* (0 black .. 100 white) of a matplotlib colour: what is left in greyscale."""
    y = luminance(color)
    return 116 * y ** (1 / 3) - 16 if y > 0.008856 else 903.3 * y


def _number(value: float) -> str:
    """A number as it is read aloud: 19,222 rather than 1.92e+04, "nearly 0" for a speck."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if 0 < abs(value) < 0.001:
        return "nearly 0"
    return f"{value + 0.0:.3g}"  # + 0.0: no "-0"


def spoken(label: str) -> str:
    """A token as a listener can hear it: visible whitespace and lone punctuation by name,
    quoted when it is not plain words ("␣is" → “(space)is”, "," → “comma”)."""
    if len(label) == 1 and not label.isalnum() and label not in "␣↵→":
        return f"“{unicodedata.name(label, label).lower()}”"
    named = label.replace("␣", "(space)").replace("↵", "(newline)").replace("→", "(tab)")
    plain = all(ch.isalnum() or ch in " -_()/." for ch in label) and any(ch.isalnum() for ch in label)
    return label if plain or not label else f"“{named}”"


def _reference_line(line) -> str | None:
    """Where a line drawn by axhline / axvline (a reference, not data) sits, else None."""
    x, y = list(line.get_xdata()), list(line.get_ydata())
    if len(x) == 2 and x == [0, 1] and y[0] == y[1]:
        return f"a horizontal line at {_number(y[0])}"
    if len(y) == 2 and y == [0, 1] and x[0] == x[1]:
        return f"a vertical line at {_number(x[0])}"
    return None


def _describe_axes(ax: Axes, most_bars: int = 12) -> str:
    """One panel in words: its kind and title, its axes, and the values or series it shows."""
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    errorbars = any(isinstance(c, ErrorbarContainer) for c in ax.containers)
    kind = ("colour grid" if ax.images else "bar chart" if bars else "points with error bars" if errorbars
            else "line chart" if ax.get_lines() else "diagram")  # fmt: skip
    title = ax.get_title() or ax.get_title("left")
    text = kind + (f" “{title}”" if title else "")

    def label(axis, name: str) -> str:
        scale = ", log scale" if name.endswith(")") else " (log scale)"
        return name + (scale if name and axis.get_scale() == "log" else "")

    x, y = label(ax.xaxis, ax.get_xlabel()), label(ax.yaxis, ax.get_ylabel())
    if ax.images:
        image = ax.images[0]
        rows, cols = image.get_array().shape[:2]
        low, high = image.get_clim()
        ends = ("light", "dark") if lightness(image.cmap(0.0)) > lightness(image.cmap(1.0)) else ("dark", "light")
        text += f": {rows} by {cols}" + (f", rows: {y}" if y else "") + (f", columns: {x}" if x else "")
        text += f"; values from {_number(low)} ({ends[0]}) to {_number(high)} ({ends[1]})"
        if torch.as_tensor(image.get_array().filled(float("nan"))).isnan().any():
            text += ", blank where there is no value"
    elif y and x:
        text += f": {y} against {x}"
    elif y:
        text += f": {y}"
    if bars:
        ticks = {round(t.get_position()[0], 6): t.get_text() for t in ax.get_xticklabels()}  # at a bar's centre
        centres = [round(patch.get_x() + patch.get_width() / 2, 6) for patch in bars[0]]
        pairs = [
            f"{spoken(ticks.get(x, ''))} {_number(patch.get_height())}".strip() for x, patch in zip(centres, bars[0])
        ]
        more = f" and {len(pairs) - most_bars} more" if len(pairs) > most_bars else ""
        text += "; bars: " + ", ".join(pairs[:most_bars]) + more
    references = {line.get_label(): where for line in ax.get_lines() if (where := _reference_line(line))}
    labels = [name for name in ax.get_legend_handles_labels()[1] if not name.startswith("_") and name not in references]
    if labels:
        text += "; series: " + "; ".join(f"“{name}”" for name in labels)
    for name, where in references.items():
        text += f"; {where}" + ("" if name.startswith("_") else f" marks “{name}”")
    return text


def describe_figure(fig: Figure) -> str:
    """What a figure plots, read from it: each panel's title, kind, axes and series (colour
    bars left out: their range is stated with the grid they belong to)."""
    fig.draw_without_rendering()  # tick labels (bar categories) exist only once drawn
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    described = [_describe_axes(ax, most_bars=12 if len(panels) == 1 else 5) for ax in panels]
    if len(described) == 1:
        return described[0][:1].upper() + described[0][1:] + "."
    return f"{len(described)} panels, left to right: " + " ".join(f"({k}) {d}." for k, d in enumerate(described, 1))


def figure_alt(fig: Figure, finding: str) -> str:
    """The image description: the finding (written by the author, with its numbers), then
    what is plotted (read from the figure)."""
    finding = finding.strip()
    if not finding or finding == PLACEHOLDER:
        raise ValueError("a figure needs a finding: one sentence saying what it shows")
    return finding.rstrip(".") + ". " + describe_figure(fig)


def _space_markers(fig: Figure) -> None:
    """A marker on every tenth point of a dense line: markers name the line, not its points."""
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_marker() not in ("None", "", None, " ") and len(line.get_xdata()) > 30:
                line.set_markevery(max(1, len(line.get_xdata()) // 10))


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes, as the notebook's inline backend would draw it (no version
    stamp, so a re-run that draws the same picture stores the same bytes)."""
    _space_markers(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", facecolor="white", metadata={"Software": None})
    return buffer.getvalue()


def show(finding: str, fig: Figure | None = None) -> None:
    """Display ``fig`` (the current figure) in the notebook with its description, then close
    it. The description travels in the output's metadata (``image/png`` → ``alt``), where the
    slide decks read it; JupyterLab 4 does not show alt text for image outputs."""
    from IPython.display import display

    fig = fig or plt.gcf()
    alt = figure_alt(fig, finding)
    png = base64.b64encode(figure_png(fig)).decode("ascii")
    display({"image/png": png}, raw=True, metadata={"image/png": {"alt": alt}})
    plt.close(fig)


def figure_html(fig: Figure, finding: str) -> str:
    """The figure as an ``<img>`` with its description in ``alt``, for widgets (an HTML view
    carries alt text in JupyterLab and in the decks alike); the figure is closed."""
    alt = figure_alt(fig, finding)
    png = base64.b64encode(figure_png(fig)).decode("ascii")
    plt.close(fig)
    return f'<img src="data:image/png;base64,{png}" alt="{html.escape(alt)}" style="max-width:100%">'
