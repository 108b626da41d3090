"""Saving models and training runs without pickle.

Two kinds of file, both `safetensors <https://huggingface.co/docs/safetensors>`_: tensors
in a flat, memory-mappable layout plus a header of text metadata. Loading one never runs
code, unlike ``torch.load`` of a pickle from an untrusted source.

- a **model file** (:func:`save_model` / :func:`load_model`): the weights and the
  :class:`~course_lib.model.GPTConfig` as JSON, plus any notes (tokenizer, data, loss);
- a **checkpoint** (written by :meth:`~course_lib.training.Trainer.save`): weights under
  ``model.``, AdamW's moment estimates under ``optimizer.``, torch's random state, and as
  JSON the model and training configs, the step, the optimizer's hyper-parameters and the
  history.

Files are written to a temporary name and renamed, so a crash mid-write leaves the previous
file (or none), never half of one. A tied LM head is stored once.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn as nn
from safetensors import safe_open
from safetensors.torch import save_file

from .model import GPT, GPTConfig

MODEL_FORMAT = "course_lib-model v1"
CHECKPOINT_FORMAT = "course_lib-checkpoint v1"


class CheckpointError(ValueError):
    """A file that is not what it should be, or that does not fit the model given."""


def model_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with shared tensors (a tied head) kept once, under the first name."""
    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        tensors[name] = tensor.detach().contiguous()
    return tensors


def load_model_tensors(model: nn.Module, tensors: dict[str, torch.Tensor], source: str = "the file") -> None:
    """Copy ``tensors`` into ``model`` after checking names and shapes match exactly."""
    expected = model_tensors(model)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{source} does not fit this model: missing {missing[:5] or 'nothing'}, "
            f"unexpected {unexpected[:5] or 'nothing'}"
        )
    for name, tensor in expected.items():
        if tensors[name].shape != tensor.shape:
            raise CheckpointError(
                f"{source} was saved from a model of another shape: {name} is "
                f"{tuple(tensors[name].shape)} there but {tuple(tensor.shape)} in this model"
            )
    with torch.no_grad():
        for name, tensor in expected.items():
            tensor.copy_(tensors[name])


def write_file(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, tmp, metadata)
        os.replace(tmp, path)  # atomic: readers see the old file or the new one
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read_file(path: str | Path, kind: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a file that must be of format ``kind``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        with safe_open(path, framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as err:  # safetensors raises its own error types for damaged headers
        raise CheckpointError(f"{path} is not a readable safetensors file ({err})") from err
    found = metadata.get("format")
    if found != kind:
        raise CheckpointError(f"{path} has format {found!r}, expected {kind!r}")
    return tensors, metadata


def save_model(path: str | Path, model: GPT, **notes) -> Path:
    """Weights plus the model's config (and ``notes``, JSON-encoded) in one safetensors file."""
    metadata = {"format": MODEL_FORMAT, "config": json.dumps(asdict(model.config))}
    metadata.update({key: json.dumps(value) for key, value in notes.items()})
    return write_file(path, model_tensors(model), metadata)


def load_model(path: str | Path, device: torch.device | str = "cpu"):
    """``(model, notes)`` from a file written by :func:`save_model`; the model is in eval mode."""
    tensors, metadata = read_file(path, MODEL_FORMAT)
    model = GPT(GPTConfig(**json.loads(metadata["config"])))
    load_model_tensors(model, tensors, str(path))
    notes = {key: json.loads(value) for key, value in metadata.items() if key not in ("format", "config")}
    return model.to(device).eval(), notes


def read_metadata(path: str | Path) -> dict:
    """The JSON metadata of a model file or checkpoint, decoded, without reading the tensors."""
    try:
        with safe_open(Path(path), framework="pt") as f:
            metadata = f.metadata() or {}
    except Exception as err:
        raise CheckpointError(f"{path} is not a readable safetensors file ({err})") from err
    if metadata.get("format") not in (MODEL_FORMAT, CHECKPOINT_FORMAT):
        raise CheckpointError(f"{path} is not a course_lib model file or checkpoint (format {metadata.get('format')!r})")
    return {key: value if key == "format" else json.loads(value) for key, value in metadata.items()}


def saved_config(path: str | Path) -> GPTConfig:
    """The GPTConfig stored in a model file or a training checkpoint (to build the model)."""
    metadata = read_metadata(path)
    key = "config" if metadata["format"] == MODEL_FORMAT else "model_config"
    if key not in metadata:
        raise CheckpointError(f"{path} was saved from a model without a GPTConfig")
    return GPTConfig(**metadata[key])
