"""The course's file formats: models and checkpoints, without pickle.

Two kinds of file, both `safetensors <https://huggingface.co/docs/safetensors>`_: tensors
in a flat layout plus a header of text metadata. Loading one never runs code, unlike
``torch.load`` of a pickle from an untrusted source.

- a **model file** (:func:`save_model` / :func:`load_model`): the weights, the
  :class:`~course_lib.model.GPTConfig` as JSON under ``config``, and any notes (tokenizer,
  data, results);
- a **checkpoint** (:func:`save_checkpoint` / :func:`load_checkpoint`): the weights under
  ``model.``, the state of **any** torch optimizer (its tensors under ``optimizer.``, its
  parameter groups and scalars as JSON), the random state of the CPU and of the model's GPU
  under ``rng.``, the step, the model's config under ``config`` and whatever JSON-ready
  ``extra`` the caller keeps (the Trainer keeps its config and history there).

Both accept a path or a binary file object. Paths are written to a temporary name and
renamed, so a crash mid-write leaves the previous file (or none), never half of one. A tied
LM head is stored once. A truncated or foreign file, a checkpoint of another model shape or
of another optimizer layout, each raise :class:`CheckpointError` saying which.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import BinaryIO

import safetensors.torch
import torch
import torch.nn as nn

from .files import atomic_write
from .model import GPT, GPTConfig, load_weights, weight_tensors
from .runtime import model_device, rng_state, set_rng_state

MODEL_FORMAT = "course_lib-model v1"
CHECKPOINT_FORMAT = "course_lib-checkpoint v2"
FORMATS = (MODEL_FORMAT, CHECKPOINT_FORMAT)

Target = str | Path | BinaryIO


class CheckpointError(ValueError):
    """A file that is not what it should be, or that does not fit the model or optimizer given."""


def _name(target: Target) -> str:
    return str(target) if isinstance(target, (str, Path)) else getattr(target, "name", "the file object")


def write_file(target: Target, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write a safetensors file to a path (atomically, see :func:`files.atomic_write`) or to a
    binary file object."""
    data = safetensors.torch.save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, metadata)
    if isinstance(target, (str, Path)):
        with atomic_write(target) as out:
            out.write(data)
    else:
        target.write(data)


def _read_bytes(source: Target) -> bytes:
    if isinstance(source, (str, Path)):
        if not Path(source).is_file():
            raise FileNotFoundError(f"no such file: {source}")
        return Path(source).read_bytes()
    return source.read()


def _header(data: bytes, name: str) -> dict[str, str]:
    """The metadata of safetensors bytes: an 8-byte little-endian length, then a JSON header."""
    size = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    if size < 2 or 8 + size > len(data):
        raise CheckpointError(f"{name} is not a readable safetensors file (truncated, empty or another format)")
    try:
        header = json.loads(data[8 : 8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{name} is not a readable safetensors file (its header is not JSON)") from err
    return header.get("__metadata__") or {}


def read_file(source: Target, kind: str | None = None) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and raw metadata of a course_lib file, of format ``kind`` if given."""
    name = _name(source)
    data = _read_bytes(source)
    metadata = _header(data, name)
    _check_format(metadata, name, kind)
    try:
        tensors = safetensors.torch.load(data)
    except Exception as err:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{name} is not a readable safetensors file, it may be truncated ({err})") from err
    return tensors, metadata


def _check_format(metadata: dict[str, str], name: str, kind: str | None) -> None:
    found = metadata.get("format")
    if found not in FORMATS:
        raise CheckpointError(f"{name} is not a course_lib model file or checkpoint (format {found!r})")
    if kind is not None and found != kind:
        raise CheckpointError(f"{name} has format {found!r}, expected {kind!r}")


def read_metadata(source: str | Path) -> dict:
    """The JSON metadata of a model file or checkpoint, decoded, without reading the tensors."""
    with open(source, "rb") as f:
        start = f.read(8)
        size = int.from_bytes(start, "little") if len(start) == 8 else -1
        data = start + f.read(size if 0 < size < 1 << 30 else 0)
    metadata = _header(data, str(source))
    _check_format(metadata, str(source), None)
    return {key: value if key == "format" else json.loads(value) for key, value in metadata.items()}


def _config_metadata(model: nn.Module) -> dict[str, str]:
    config = getattr(model, "config", None)
    return {"config": json.dumps(asdict(config))} if is_dataclass(config) else {}


def saved_config(source: str | Path) -> GPTConfig:
    """The GPTConfig stored in a model file or a checkpoint (to build the model to load into)."""
    metadata = read_metadata(source)
    if "config" not in metadata:
        raise CheckpointError(f"{source} was saved from a model without a GPTConfig")
    return GPTConfig(**metadata["config"])


# --------------------------------------------------------------------------------------
# model files
# --------------------------------------------------------------------------------------


def save_model(target: Target, model: GPT, **notes) -> None:
    """Weights plus the model's config (and ``notes``, JSON-encoded) in one safetensors file."""
    metadata = {"format": MODEL_FORMAT, **_config_metadata(model)}
    metadata.update({key: json.dumps(value) for key, value in notes.items()})
    write_file(target, weight_tensors(model), metadata)


def load_model(source: Target, device: torch.device | str = "cpu") -> tuple[GPT, dict]:
    """``(model, notes)`` from a file written by :func:`save_model`; the model is in eval mode."""
    tensors, metadata = read_file(source, MODEL_FORMAT)
    model = GPT(GPTConfig(**json.loads(metadata["config"])))
    _load_weights(model, tensors, _name(source))
    notes = {key: json.loads(value) for key, value in metadata.items() if key not in ("format", "config")}
    return model.to(device).eval(), notes


def _load_weights(model: nn.Module, tensors: dict[str, torch.Tensor], name: str) -> None:
    try:
        load_weights(model, tensors, name)
    except ValueError as err:
        raise CheckpointError(str(err)) from err


# --------------------------------------------------------------------------------------
# checkpoints: model + optimizer + step + random state + extra
# --------------------------------------------------------------------------------------


def save_checkpoint(
    target: Target,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    step: int = 0,
    extra: dict | None = None,
    rng: bool = True,
) -> None:
    """Save what resuming a training run needs.

    ``optimizer`` may be any torch optimizer with any number of parameter groups; its tensors
    (AdamW's moments, SGD's momentum...) are stored as tensors, the rest as JSON. ``extra`` is
    any JSON-ready dict (a history, a config, notes). ``rng=True`` keeps the random state of
    the CPU and, for a model on a GPU, of the GPU's generators, so dropout after resuming draws
    what it would have drawn.
    """
    tensors = {f"model.{name}": t for name, t in weight_tensors(model).items()}
    metadata = {"format": CHECKPOINT_FORMAT, "step": json.dumps(int(step)), "extra": json.dumps(extra or {})}
    metadata.update(_config_metadata(model))
    if optimizer is not None:
        state = optimizer.state_dict()
        scalars: dict[str, dict] = {}
        for index, values in state["state"].items():
            for key, value in values.items():
                if isinstance(value, torch.Tensor):
                    tensors[f"optimizer.{index}.{key}"] = value
                else:
                    scalars.setdefault(str(index), {})[key] = value
        metadata["optimizer"] = json.dumps(
            {"type": type(optimizer).__name__, "param_groups": state["param_groups"], "scalars": scalars}
        )
    if rng:
        tensors.update({f"rng.{device}": s for device, s in rng_state(model_device(model)).items()})
    write_file(target, tensors, metadata)


@dataclass
class Checkpoint:
    """A checkpoint read from a file, ready to :meth:`restore` into a model and optimizer."""

    name: str
    step: int
    extra: dict
    config: dict | None
    tensors: dict[str, torch.Tensor] = field(repr=False)
    optimizer: dict | None = field(repr=False)

    def restore(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, restore_rng: bool = True
    ) -> None:
        """Weights into ``model``, state into ``optimizer`` (checked against its layout first),
        and the random state of every device present."""
        weights = {k.removeprefix("model."): t for k, t in self.tensors.items() if k.startswith("model.")}
        _load_weights(model, weights, self.name)
        if optimizer is not None:
            self._restore_optimizer(optimizer)
        if restore_rng:
            states = {k.removeprefix("rng."): t for k, t in self.tensors.items() if k.startswith("rng.")}
            if states:
                set_rng_state(states)

    def _restore_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        if self.optimizer is None:
            raise CheckpointError(f"{self.name} holds no optimizer state (it was saved without an optimizer)")
        saved, groups = self.optimizer, optimizer.state_dict()["param_groups"]
        layout = lambda gs: [len(g["params"]) for g in gs]  # noqa: E731
        if saved["type"] != type(optimizer).__name__ or layout(saved["param_groups"]) != layout(groups):
            raise CheckpointError(
                f"{self.name} holds the state of another optimizer layout: {saved['type']} with parameter groups of "
                f"{layout(saved['param_groups'])} tensors, but this is {type(optimizer).__name__} with "
                f"{layout(groups)}; build the optimizer the way the saved run did"
            )
        params = [p for g in optimizer.param_groups for p in g["params"]]
        state: dict[int, dict] = {int(i): dict(v) for i, v in saved["scalars"].items()}
        for key, t in self.tensors.items():
            if key.startswith("optimizer."):
                _, index, name = key.split(".", 2)
                param = params[int(index)]
                if t.dim() > 0 and t.shape != param.shape:
                    raise CheckpointError(
                        f"{self.name}: the optimizer's {name} for parameter {index} is {tuple(t.shape)}, "
                        f"but that parameter is {tuple(param.shape)} in this model"
                    )
                state.setdefault(int(index), {})[name] = t
        for group in saved["param_groups"]:  # JSON turned tuples (AdamW's betas) into lists
            group.update({k: tuple(v) for k, v in group.items() if k != "params" and isinstance(v, list)})
        optimizer.load_state_dict({"state": state, "param_groups": saved["param_groups"]})


def read_checkpoint(source: Target) -> Checkpoint:
    """The checkpoint in ``source`` (a path or a binary file object), not yet restored."""
    tensors, metadata = read_file(source, CHECKPOINT_FORMAT)
    return Checkpoint(
        name=_name(source),
        step=json.loads(metadata["step"]),
        extra=json.loads(metadata["extra"]),
        config=json.loads(metadata["config"]) if "config" in metadata else None,
        tensors=tensors,
        optimizer=json.loads(metadata["optimizer"]) if "optimizer" in metadata else None,
    )


def load_checkpoint(
    source: Target, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, restore_rng: bool = True
) -> Checkpoint:
    """Restore a :func:`save_checkpoint` file into ``model`` (and ``optimizer``); returns the
    checkpoint, whose ``step`` and ``extra`` say where the run was."""
    checkpoint = read_checkpoint(source)
    checkpoint.restore(model, optimizer, restore_rng)
    return checkpoint
