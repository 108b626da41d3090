"""Regenerate every picture in figures/ from code (the plotting functions of course_lib).

    python scripts/make_figures.py              # rewrite figures/
    python scripts/make_figures.py --out DIR    # write them elsewhere (the tests compare)

PNGs are written without a timestamp or version stamp, so the same code gives the same bytes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from course_lib import plotting  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def next_token_prediction() -> None:
    plotting.draw_next_token_prediction(
        ["The", " cat", " sat", " on", " the"], {" mat": 0.46, " floor": 0.21, " sofa": 0.12, " roof": 0.05}
    )


def sliding_windows() -> None:
    tokens = ["In", " the", " beginning", " was", " the", " word", ",", " and", " the", " word", " was"]
    plotting.draw_sliding_windows(tokens, context_length=4, stride=4)


def bpe_merges() -> None:
    plotting.draw_merge_steps(
        [["h", "e", "l", "l", "o"], ["he", "l", "l", "o"], ["he", "ll", "o"], ["hell", "o"], ["hello"]],
        ["start: bytes", "merge h+e", "merge l+l", "merge he+ll", "merge hell+o"],
    )


def bottleneck_vs_attention() -> None:
    plotting.draw_bottleneck_vs_attention()


def causal_mask() -> None:
    plotting.draw_causal_mask(["the", "cat", "sat", "on", "a", "mat"])


FIGURES: dict[str, Callable[[], None]] = {
    "next_token_prediction.png": next_token_prediction,
    "sliding_windows.png": sliding_windows,
    "bpe_merges.png": bpe_merges,
    "bottleneck_vs_attention.png": bottleneck_vs_attention,
    "causal_mask.png": causal_mask,
    "transformer_block.png": plotting.draw_transformer_block,
    "rope_rotation.png": plotting.draw_rope_rotation,
}


def make_all(out: Path) -> list[Path]:
    """Draw every figure with matplotlib's default style, whatever the calling process set (a test
    process may have run a notebook's ``use_course_style()`` first), and restore its style after."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        for name, draw in FIGURES.items():
            plt.close("all")
            draw()
            path = out / name
            plt.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
            plt.close("all")
            written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "figures")
    for path in make_all(parser.parse_args().out):
        print(path)


if __name__ == "__main__":
    main()
