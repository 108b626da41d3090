"""Quality per CPU minute: the validation loss the course's default recipe reaches in a fixed
wall-clock budget, next to llms-from-scratch's GPTModel trained the same way.

    .venv/bin/pip install --no-deps llms-from-scratch==1.0.19   # the reference, benchmark only
    .venv/bin/python benchmarks/quality.py [--minutes 5 --threads 2]

Both models get the recipe of ``course_lib/assets/course_gpt.json`` (the notebook-08 default and
the shipped model's): its architecture, the offline corpus with the course BPE, the same batches,
AdamW settings, warmup + cosine schedule, clipping and precision, all through the course
``Trainer``. Each first times 10 steps, then gets as many steps as fit in the budget (its
schedule stretched to match), so each spends the same wall-clock time. Prints the validation
loss of each on the whole validation text.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch
from reference import book_model

from course_lib.model import GPT
from course_lib.pretrained import CONFIG_PATH
from course_lib.runtime import seed_everything
from course_lib.train import RUN_DEFAULTS, configs, prepare_data
from course_lib.training import TrainConfig, Trainer, estimate_loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--config", default=str(CONFIG_PATH))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    recipe = {**RUN_DEFAULTS, **json.loads(Path(args.config).read_text(encoding="utf-8"))}
    data = prepare_data(recipe["corpus"], recipe["tokenizer"], recipe["vocab_size"])
    model_config, base = configs(recipe, data.tokenizer.vocab_size)
    makers = {"course GPT": lambda: GPT(model_config), "llms-from-scratch GPTModel": lambda: book_model(model_config)}
    budget = args.minutes * 60
    print(f"recipe {args.config}: {budget:.0f} s each, {args.threads} threads")
    for name, make in makers.items():
        seed_everything(1337)
        model = make()
        probe = Trainer(
            copy.deepcopy(model),
            data.train_ids,
            data.val_ids,
            TrainConfig(**{**base.__dict__, "steps": 15, "warmup_steps": 0}),
            progress=False,
        )
        probe.train(until=5)  # warm-up
        started = time.perf_counter()
        probe.train(until=15)
        per_step = (time.perf_counter() - started) / 10
        steps = max(int(budget / per_step), 10)
        config = TrainConfig(
            **{
                **base.__dict__,
                "steps": steps,
                "warmup_steps": min(base.warmup_steps, steps // 10),
                "eval_every": steps,
            }
        )
        trainer = Trainer(model, data.train_ids, data.val_ids, config, progress=False)
        started = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - started
        val = estimate_loss(model, data.val_ids, model_config.context_length, 16)
        params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        print(
            f"  {name:<28} {params:>10,} parameters  {steps:>5} steps in {wall:5.0f} s  "
            f"({config.batch_size * config.context_length * steps / wall:,.0f} tokens/s)  validation loss {val:.3f}"
        )


if __name__ == "__main__":
    main()
