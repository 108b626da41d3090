"""Pretrain a GPT from the command line: the notebook's loop, from a config, on 1 or N processes.

    python -m course_lib.train --out runs/small --steps 2000 --n-layers 4 --d-model 128
    python -m course_lib.train --config course_lib/assets/course_gpt.json --out runs/course_gpt
    python -m course_lib.train --out runs/small --steps 2000 --stop-at 500       # then later:
    python -m course_lib.train --resume runs/small/checkpoint.safetensors --out runs/small
    torchrun --nproc_per_node=2 -m course_lib.train --out runs/ddp ...   # DDP on CPU (gloo)

Every field of :class:`~course_lib.model.GPTConfig` and
:class:`~course_lib.training.TrainConfig` is a flag (``--n-layers``, ``--warmup-steps``...);
``--config`` reads defaults from a JSON file of the same names. The run writes to ``--out``:
``checkpoint.safetensors`` (every ``--save-every`` steps and at the end, to resume from),
``model.safetensors`` (weights, config, tokenizer and results, for :func:`~course_lib.pretrained.load_pretrained`) and
``metrics.json`` (history, wall time, and each rank's weight digest).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import torch
import torch.distributed as dist

from .checkpoints import read_metadata, save_model, saved_config
from .data import TOKENIZERS, Prepared, prepare_data
from .files import write_atomically
from .generation import generate
from .model import GPT, GPTConfig
from .runtime import get_device, model_device, seed_everything
from .tokenization import tokenizer_to_dict
from .training import TrainConfig, Trainer, bits_per_token, estimate_loss, perplexity


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter's bytes: equal digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _add_dataclass_flags(parser: argparse.ArgumentParser, cls, title: str, skip: set[str]) -> None:
    group = parser.add_argument_group(title)
    for f in fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else None
        kind = type(default) if default is not None else (float if "float" in str(f.type) else int)
        if kind is bool:
            group.add_argument(
                flag,
                type=lambda s: s.lower() in ("1", "true", "yes"),
                default=None,
                metavar="BOOL",
                help=f"default {default}",
            )
        else:
            group.add_argument(flag, type=kind, default=None, help=f"default {default}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m course_lib.train", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", required=True, help="folder for checkpoint.safetensors, model.safetensors, metrics.json"
    )
    parser.add_argument("--config", help="JSON file whose keys are any of the flags below (with underscores)")
    parser.add_argument("--resume", help="checkpoint to continue from (its configs win over flags)")
    parser.add_argument("--corpus", default=None, help="default stdlib-docs (offline)")
    parser.add_argument("--tokenizer", default=None, choices=TOKENIZERS, help="default bpe")
    parser.add_argument("--vocab-size", type=int, default=None, help="BPE vocabulary, default 1024")
    parser.add_argument("--model-seed", type=int, default=None, help="seed of the initial weights, default 1337")
    parser.add_argument(
        "--save-every", type=int, default=None, help="checkpoint every N steps (default: only at the end)"
    )
    parser.add_argument("--stop-at", type=int, default=None, help="stop (and save) at this step, to --resume later")
    parser.add_argument(
        "--device", default=None, help="cpu, cuda or mps (default: the best available; cpu under torchrun)"
    )
    _add_dataclass_flags(parser, GPTConfig, "model (GPTConfig)", skip={"vocab_size"})
    _add_dataclass_flags(parser, TrainConfig, "training (TrainConfig)", skip={"context_length"})
    return parser.parse_args(argv)


RUN_DEFAULTS = {"corpus": "stdlib-docs", "tokenizer": "bpe", "vocab_size": 1024, "model_seed": 1337, "save_every": 0}
MODEL_FIELDS = {f.name for f in fields(GPTConfig)} - {"vocab_size"}
TRAIN_FIELDS = {f.name for f in fields(TrainConfig)} - {"context_length"}  # the model's context


def configs(settings: dict, vocab_size: int) -> tuple[GPTConfig, TrainConfig]:
    """The model and training configs a flat settings dict (a --config file, a run's
    ``settings``) describes, for a tokenizer of ``vocab_size`` tokens."""
    model_config = GPTConfig(vocab_size=vocab_size, **{k: settings[k] for k in MODEL_FIELDS if k in settings})
    train_config = TrainConfig(
        context_length=model_config.context_length, **{k: settings[k] for k in TRAIN_FIELDS if k in settings}
    )
    return model_config, train_config


def resolve(args: argparse.Namespace) -> dict:
    """Flags over the --config file over the defaults, as one flat dict; when resuming, the
    settings saved in the checkpoint."""
    if args.resume:
        return read_metadata(args.resume)["extra"]["settings"]
    settings = dict(RUN_DEFAULTS)
    if args.config:
        loaded = json.loads(Path(args.config).read_text(encoding="utf-8"))
        unknown = set(loaded) - set(RUN_DEFAULTS) - MODEL_FIELDS - TRAIN_FIELDS
        if unknown:
            raise ValueError(f"{args.config}: unknown settings {sorted(unknown)}")
        settings.update(loaded)
    settings.update(
        {
            k: v
            for k, v in vars(args).items()
            if v is not None and k not in ("out", "config", "resume", "device", "stop_at")
        }
    )
    return settings


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    settings = resolve(args)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")  # CPU collectives; NCCL would need one GPU per process
    rank = dist.get_rank() if distributed else 0
    device = torch.device(args.device) if args.device else (torch.device("cpu") if distributed else get_device())
    out = Path(args.out)
    try:
        data = prepare_data(settings["corpus"], settings["tokenizer"], settings["vocab_size"])
        seed_everything(settings["model_seed"])
        if args.resume:
            model = GPT(saved_config(args.resume)).to(device)
            trainer = Trainer.resume(args.resume, model, data.train_ids, data.val_ids, sample=None)
        else:
            model_config, train_config = configs(settings, data.tokenizer.vocab_size)
            model = GPT(model_config).to(device)
            trainer = Trainer(model, data.train_ids, data.val_ids, train_config)
        trainer.sample = _sampler(data, trainer.config.context_length)
        if rank == 0:
            print(
                f"{model.num_parameters():,} parameters | {len(data.train_ids):,} training tokens | "
                f"device {device.type} | processes {trainer.world_size}",
                flush=True,
            )
        started = time.perf_counter()
        save_every = settings["save_every"] or trainer.config.steps
        stop = min(args.stop_at or trainer.config.steps, trainer.config.steps)
        while trainer.step < stop:
            trainer.train(until=min((trainer.step // save_every + 1) * save_every, stop))
            trainer.save(out / "checkpoint.safetensors", settings=settings)
        wall = time.perf_counter() - started
        val_loss = estimate_loss(model, data.val_ids, trainer.config.context_length, trainer.config.batch_size)
        digest = weights_digest(model)
        digests = [None] * trainer.world_size
        if distributed:
            dist.all_gather_object(digests, digest)
        else:
            digests = [digest]
        results = {
            "steps": trainer.step,
            "val_loss": round(val_loss, 4),
            "val_perplexity": round(perplexity(val_loss), 2),
            "val_bits_per_token": round(bits_per_token(val_loss), 4),
            "wall_seconds": round(wall, 1),
            "processes": trainer.world_size,
            "threads": torch.get_num_threads(),
        }
        if rank == 0:
            save_model(
                out / "model.safetensors",
                model,
                tokenizer=tokenizer_to_dict(data.tokenizer),
                corpus=settings["corpus"],
                eos_id=data.eos_id,
                train=asdict(trainer.config),
                results=results,
                settings=settings,
            )
            metrics = {**results, "settings": settings, "weight_digests": digests, "history": asdict(trainer.history)}
            write_atomically(out / "metrics.json", json.dumps(metrics, indent=1) + "\n")
            print(json.dumps(results), flush=True)
        return results
    finally:
        if distributed:
            dist.destroy_process_group()


def _sampler(data: Prepared, context_length: int):
    """Greedy continuation of a fixed prompt, for samples during training."""
    tok = data.tokenizer
    prompt = torch.tensor([tok.encode("The ")], dtype=torch.long)

    def sample(model: GPT) -> str:
        out = generate(model, prompt.to(model_device(model)), 40, greedy=True, eos_id=data.eos_id)
        return tok.decode(out[0, prompt.shape[1] :].tolist())

    return sample


if __name__ == "__main__":
    main(sys.argv[1:])
