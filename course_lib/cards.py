"""Model cards and datasheets (chapter 12): what a model or a data set is, written down from its run.

A **model card** (Mitchell et al., 2019) says what a model is for, what it was trained on, how it
was evaluated and where it fails; a **datasheet** (Gebru et al., 2021) says the same of a data set:
why it exists, what it contains, how it was made, what it must not be used for. Both are written
here from facts the code already has (configuration, data hash, measured results), so they cannot
drift from the run they describe. Nothing is written to disk unless a path is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path

from .files import write_atomically

GPT3_TRAINING_FLOPS = 3.14e23
"""GPT-3 175B's training compute as published (Brown et al., 2020, table D.1)."""


def training_flops(n_parameters: int, n_tokens: int) -> float:
    """About 6 N D floating-point operations to train N parameters on D tokens: 2 N per token
    forward (a multiply and an add per weight), 4 N backward (gradients of activations and weights)."""
    if n_parameters < 1 or n_tokens < 1:
        raise ValueError(f"need positive counts, got {n_parameters} parameters and {n_tokens} tokens")
    return 6.0 * n_parameters * n_tokens


def energy_kwh(flops: float, flops_per_second: float, watts: float) -> float:
    """Energy of ``flops`` operations on hardware that sustains ``flops_per_second`` while drawing
    ``watts``: seconds x watts, in kilowatt-hours. The answer is only as good as the two assumptions."""
    if flops_per_second <= 0 or watts <= 0:
        raise ValueError("flops_per_second and watts must be positive")
    return flops / flops_per_second * watts / 3.6e6


def _table(rows: Mapping[str, object]) -> list[str]:
    lines = ["| | |", "|---|---|"]
    for key, value in rows.items():
        lines.append(f"| {key} | {value} |")
    return lines


def _section(title: str, body: str | Sequence[str] | Mapping[str, object]) -> list[str]:
    if isinstance(body, Mapping):
        content = _table(body)
    elif isinstance(body, str):
        content = [body]
    else:
        content = [f"- {item}" for item in body]
    return [f"## {title}", "", *content, ""]


def _document(kind: str, required: Sequence[str], head: list[str], sections: Mapping, path: str | Path | None) -> str:
    """``head`` and then every section, checked to include the ``required`` ones; saved to ``path`` if given."""
    missing = [s for s in required if s not in sections]
    if missing:
        raise ValueError(f"{kind} needs the sections {list(required)}; missing {missing}")
    lines = list(head)
    for title, body in sections.items():
        lines += _section(title.capitalize(), body)
    text = "\n".join(lines).rstrip() + "\n"
    if path is not None:
        write_atomically(path, text)
    return text


REQUIRED_CARD = ("intended use", "training data", "evaluation", "limitations")


def model_card(
    name: str,
    *,
    summary: str,
    config: object,
    training: Mapping[str, object],
    sections: Mapping[str, str | Sequence[str] | Mapping[str, object]],
    path: str | Path | None = None,
) -> str:
    """A model card in Markdown. ``config`` (a dataclass or a mapping) and ``training`` (data, steps,
    compute...) become tables; ``sections`` must include at least :data:`REQUIRED_CARD` (a card
    without its limitations is an advertisement). Written to ``path`` only if one is given."""
    settings = {k: v for k, v in (asdict(config) if is_dataclass(config) else dict(config)).items() if v is not None}
    head = [f"# Model card: {name}", "", summary, ""] + _section("Model", settings) + _section("Training", training)
    return _document("a model card", REQUIRED_CARD, head, sections, path)


REQUIRED_DATASHEET = ("motivation", "composition", "collection", "uses", "limitations")


def datasheet(
    name: str,
    *,
    counts: Mapping[str, object],
    sha256: str,
    sections: Mapping[str, str | Sequence[str]],
    path: str | Path | None = None,
) -> str:
    """A datasheet in Markdown: the counts and the SHA-256 of what was generated, and at least
    the sections of :data:`REQUIRED_DATASHEET`."""
    head = [f"# Datasheet: {name}", ""] + _section("Contents", {**counts, "SHA-256": f"`{sha256}`"})
    return _document("a datasheet", REQUIRED_DATASHEET, head, sections, path)
