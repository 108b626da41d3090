"""The small GPT that ships with course_lib, for the chapters after pretraining.

``load_pretrained()`` returns the model, its BPE tokenizer and its notes (training config,
results). It was trained by ``python -m course_lib.train`` on the offline corpus; the model
card ``assets/course_gpt.md`` says how, how long, how well, and the command that reproduces it.
A student who trained their own model in notebook 08 loads that file instead, with the same
function.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .checkpoints import load_model
from .tokenization import tokenizer_from_dict

ASSETS = Path(__file__).parent / "assets"
MODEL_PATH = ASSETS / "course_gpt.safetensors"
CARD_PATH = ASSETS / "course_gpt.md"
CONFIG_PATH = ASSETS / "course_gpt.json"


def load_pretrained(path: str | Path = MODEL_PATH, device: torch.device | str = "cpu"):
    """``(model, tokenizer, notes)``: the shipped model, or any ``model.safetensors`` of the
    command line / notebook 08. The model is in eval mode."""
    model, notes = load_model(path, device)
    return model, tokenizer_from_dict(notes["tokenizer"]), notes
