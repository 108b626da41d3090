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


# ----------------------------------------------------------------------------------------
# Accessible figures: a description for every image, colours for every vision
# ----------------------------------------------------------------------------------------

import base64  # noqa: E402
import itertools  # noqa: E402

import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

# Machado, Oliveira & Fernandes (2009), severity 1: how a linear-RGB colour looks to a viewer
# missing one kind of cone; the three common colour-vision deficiencies.
DEFICIENCIES = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
    "normal vision": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
}


SRGB_TO_XYZ = [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
WHITE = [0.95047, 1.0, 1.08883]  # D65, the white CIELAB is measured from


def as_seen(color, matrix) -> torch.Tensor:
    """CIELAB (L*, a*, b*) of ``color`` as seen through a deficiency's matrix."""
    c = torch.tensor(to_rgb(color), dtype=torch.float64)
    linear = torch.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    linear = (torch.tensor(matrix, dtype=torch.float64) @ linear).clamp(0, 1)
    xyz = torch.tensor(SRGB_TO_XYZ, dtype=torch.float64) @ linear / torch.tensor(WHITE, dtype=torch.float64)
    f = torch.where(xyz > 0.008856, xyz.pow(1 / 3), 7.787 * xyz + 16 / 116)
    return torch.stack([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def closest_pair(colors, matrix) -> float:
    """The smallest colour difference (CIE76 ΔE; about 2.3 is just noticeable) between any two."""
    seen = [as_seen(c, matrix) for c in colors]
    return min((a - b).norm().item() for a, b in itertools.combinations(seen, 2))


@pytest.mark.parametrize("deficiency", DEFICIENCIES)
def test_the_line_colours_stay_apart_for_every_colour_vision(deficiency):
    matrix = DEFICIENCIES[deficiency]
    assert closest_pair(plotting.OKABE_ITO, matrix) > 12
    # the test can fail: matplotlib's default colours merge for protanopes and deuteranopes
    if deficiency in ("protanopia", "deuteranopia"):
        assert closest_pair([f"C{i}" for i in range(7)], matrix) < 8


def test_lines_differ_in_dash_and_marker_too_so_greyscale_reads():
    plotting.use_course_style()
    styles = list(matplotlib.rcParams["axes.prop_cycle"])
    assert len(styles) == len(plotting.OKABE_ITO)
    for key in ("color", "linestyle", "marker"):
        assert len({str(s[key]) for s in styles}) == len(styles), f"two lines share a {key}"
    # the first five are dark enough on white for graphics (WCAG 2.1 non-text contrast, 3:1)
    for color in plotting.OKABE_ITO[:5]:
        assert 1.05 / (plotting.luminance(color) + 0.05) >= 3, color
    _, ax = plt.subplots()
    first, second = ax.plot([0, 1, 2], [0, 1, 2]), ax.plot([0, 1, 2], [1, 2, 3])
    assert first[0].get_linestyle() != second[0].get_linestyle() and first[0].get_marker() != second[0].get_marker()
    plt.close("all")


@pytest.mark.parametrize("cmap", [plotting.COLORMAP, "Blues", "Purples", "Blues_r"])
def test_the_course_colour_maps_read_in_greyscale(cmap):
    """Lightness rises (or falls) steadily along the map: a grey copy still orders the values."""
    colors = matplotlib.colormaps[cmap](torch.linspace(0, 1, 64).numpy())
    steps = torch.diff(torch.tensor([plotting.lightness(c) for c in colors]))
    assert (steps > 0).all() or (steps < 0).all()
    assert not (
        (
            torch.diff(
                torch.tensor(
                    [plotting.lightness(c) for c in matplotlib.colormaps["RdBu"](torch.linspace(0, 1, 64).numpy())]
                )
            )
            > 0
        ).all()
    )


def test_a_figure_is_described_from_what_it_plots():
    plotting.use_course_style()
    _, ax = plt.subplots()
    ax.plot([1, 2, 3, 4], [3.0, 2.0, 1.5, 1.2], label="train")
    ax.plot([1, 2, 3, 4], [3.1, 2.4, 2.0, 1.9], label="validation")
    ax.set(xlabel="step", ylabel="loss", title="training")
    ax.set_yscale("log")
    ax.legend()
    alt = plotting.figure_alt(ax.figure, "Validation loss falls from 3.1 to 1.9")
    assert alt == (
        "Validation loss falls from 3.1 to 1.9. Line chart “training”: loss (log scale) against step; "
        "series: “train”; “validation”."
    )
    ax = plotting.plot_bars({"characters": 1.0, "GPT-2": 2.75}, title="chars per token", ylabel="chars / token")
    assert "Bar chart “chars per token”: chars / token; bars: characters 1, GPT-2 2.75." in plotting.describe_figure(
        ax.figure
    )
    ax = plotting.plot_bars({",": 0.3, "␣is": -0.0})  # tokens as heard; no "-0"
    assert plotting.describe_figure(ax.figure) == "Bar chart; bars: “comma” 0.3, “(space)is” 0."
    _, axes = plt.subplots(1, 2)
    plotting.plot_attention(torch.tensor([[1.0, 0.0], [0.25, 0.75]]), ["a", "b"], ax=axes[0])
    axes[1].bar([0, 1], [2, 3])
    described = plotting.describe_figure(axes[0].figure)  # the colour bar is no panel of its own
    assert described.startswith("2 panels, left to right: (1) colour grid: 2 by 2, rows: token (query), ")
    assert "values from 0 (light) to 1 (dark). (2) bar chart; bars: 0.0 2, 1.0 3." in described  # x: height
    plt.close("all")


@pytest.mark.parametrize("finding", ["", "  ", plotting.PLACEHOLDER])
def test_a_figure_without_a_finding_is_refused(finding):
    _, ax = plt.subplots()
    with pytest.raises(ValueError, match="needs a finding"):
        plotting.figure_alt(ax.figure, finding)
    plt.close("all")


def test_show_displays_the_png_with_its_description_and_closes_the_figure(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: shown.append((a, k)))
    fig, ax = plt.subplots()
    ax.plot(range(100), [i * i for i in range(100)])
    plotting.show("A parabola", fig)
    ((data,), options) = shown[0]
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG") and options["raw"] is True
    assert options["metadata"]["image/png"]["alt"] == "A parabola. Line chart."
    assert not plt.fignum_exists(fig.number)
    assert ax.get_lines()[0].get_markevery() == 10  # a dense line: a marker every tenth point
    # the same picture gives the same bytes (no version stamp): stored outputs stay put
    again = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: again.append(a[0]["image/png"]))
    fig, ax = plt.subplots()
    ax.plot(range(100), [i * i for i in range(100)])
    plotting.show("A parabola", fig)
    assert again[0] == data["image/png"]


def test_figure_html_carries_the_description_escaped():
    _, ax = plt.subplots()
    ax.set_title("<x> & y")
    html = plotting.figure_html(ax.figure, 'Nothing "plotted"')
    assert html.startswith('<img src="data:image/png;base64,')
    assert 'alt="Nothing &quot;plotted&quot;. Diagram “&lt;x&gt; &amp; y”."' in html


# ----------------------------------------------------------------------------------------
# Tensors from any device: a GPU's failure caught without a GPU
# ----------------------------------------------------------------------------------------

from matplotlib.figure import Figure  # noqa: E402

REFUSED = "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."


class OnAGPU(torch.Tensor):
    """A tensor NumPy refuses, with a CUDA tensor's message, until ``.cpu()`` brings it home.
    Like a CUDA tensor it still computes, formats and reads out through ``.item()`` and
    ``.tolist()``; only the road to NumPy (which matplotlib takes) is closed."""

    def __array__(self, *args, **kwargs):
        raise TypeError(REFUSED)

    def numpy(self, *args, **kwargs):
        raise TypeError(REFUSED)

    def cpu(self, *args, **kwargs) -> torch.Tensor:
        return super().cpu(*args, **kwargs).as_subclass(torch.Tensor)

    def __format__(self, spec: str) -> str:  # torch formats a 0-d tensor's value only for its own class
        return self.as_subclass(torch.Tensor).__format__(spec)


def on_a_gpu(tensor: torch.Tensor) -> OnAGPU:
    return tensor.as_subclass(OnAGPU)


def test_the_stand_in_is_refused_where_a_gpu_tensor_is():
    weights = on_a_gpu(torch.tensor([[1.0, 0.0], [0.25, 0.75]]))
    for read in (
        lambda t: t.numpy(),
        lambda t: plt.plot(t),
        lambda t: plt.imshow(t),
        lambda t: plt.bar([0, 1], [*t[0]]),
    ):
        with pytest.raises(TypeError, match="cuda:0"):
            read(weights)
    assert type(weights.detach().float()[0] * 2) is OnAGPU  # what a tensor computes stays on its device
    assert type(weights.cpu()) is torch.Tensor and weights.cpu().numpy().shape == (2, 2)
    assert f"{weights[1, 1]:.2f}" == "0.75" and weights.tolist()[1] == [0.25, 0.75]
    plt.close("all")


WEIGHTS = torch.softmax(torch.arange(16.0).view(4, 4).sin() * 3, dim=-1)  # (4, 4): rows sum to 1
WORDS = ["the", " cat", " sat", " on"]
DRAWINGS = {  # each draws with its numbers passed through `move`
    "plot_heatmap": lambda move: plotting.plot_heatmap(move(WEIGHTS), WORDS, WORDS, annotate=True),
    "plot_attention": lambda move: plotting.plot_attention(move(WEIGHTS), WORDS),
    "plot_confusion_matrix": lambda move: plotting.plot_confusion_matrix(move(torch.tensor([[5, 1], [2, 7]])), "ab"),
    "plot_bars": lambda move: plotting.plot_bars(dict(zip(WORDS, move(WEIGHTS[0])))),  # 0-d tensors
    "plot_curves": lambda move: plotting.plot_curves(
        move(torch.arange(4) * 25), {"train": move(WEIGHTS[1]), "validation": list(move(WEIGHTS[2]))}, "loss"
    ),
    "draw_next_token_prediction": lambda move: plotting.draw_next_token_prediction(
        WORDS[:2], dict(zip(WORDS, move(WEIGHTS[3])))
    ),
    "draw_bottleneck_vs_attention": lambda move: plotting.draw_bottleneck_vs_attention(weights=move(WEIGHTS[0])),
    "attention_explorer": lambda move: widgets.attention_explorer(
        lambda sentence, causal: (sentence.split(), move(WEIGHTS.expand(2, 4, 4))), ["the cat sat on"], n_heads=2
    ),
}


def picture(drawn) -> bytes | str:
    """What a drawing shows: its PNG, or a widget's HTML view (the PNG inside, with its alt)."""
    if isinstance(drawn, Figure):
        return plotting.figure_png(drawn)
    if hasattr(drawn, "figure"):
        return plotting.figure_png(drawn.figure)
    return drawn.children[-1].value


@pytest.mark.parametrize("drawing", DRAWINGS)
def test_every_plotting_function_takes_tensors_from_any_device(drawing):
    """A model on a GPU gives CUDA tensors; plotting them must draw what their CPU copies draw,
    not fail at matplotlib's NumPy (notebook 15 on a GPU: `plot_attention`)."""
    draw = DRAWINGS[drawing]
    on_the_cpu = picture(draw(lambda tensor: tensor))
    assert picture(draw(on_a_gpu)) == on_the_cpu
    grads = picture(draw(lambda tensor: tensor.float().requires_grad_()))  # a tensor autograd tracks
    assert grads == on_the_cpu
    plt.close("all")
