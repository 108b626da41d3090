"""GPT-2 small training on a GPU: model FLOPs utilisation (MFU) of the course Trainer, eager
and compiled, against nanoGPT's model compiled, measured in the same run.

    python benchmarks/gpu_training.py --nanogpt path/to/nanoGPT/model.py [--peak-tflops 989]

GPT-2 small (124 M parameters, vocabulary padded to 50,304 = a multiple of 64), batch 16 x
1,024 random tokens, bfloat16 autocast, fused AdamW. Each run takes ``--warmup`` steps
(compilation happens there) and is then timed over ``--steps`` steps between two
``torch.cuda.synchronize()``. MFU counts 6 N + 12 L d T FLOPs per token (N non-embedding
parameters plus the LM head, L layers, width d, context T) against the GPU's dense bf16 peak
(989 TFLOP/s for an H100 SXM; pass yours). nanoGPT (MIT licence) is not a course dependency:
clone it anywhere and point ``--nanogpt`` at its ``model.py``; without it only the course
runs are shown.

Goals (issue 15): the course compiled >= 45% MFU and >= 1.2x nanoGPT compiled.
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import torch

from course_lib.model import GPT, GPTConfig
from course_lib.training import TrainConfig, Trainer


def flops_per_token(config: GPTConfig, n_params: int) -> float:
    n_embedding = (
        config.vocab_size * config.d_model * (0 if config.tie_weights else 1) + config.context_length * config.d_model
    )
    return 6 * (n_params - n_embedding) + 12 * config.n_layers * config.d_model * config.context_length


def timed(step, warmup: int, steps: int, device: torch.device) -> float:
    """Seconds per step, after ``warmup`` untimed steps."""
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def nanogpt_step(path: str, config: GPTConfig, batch: int, device: torch.device):
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.GPTConfig(
        block_size=config.context_length,
        vocab_size=config.vocab_size,
        n_layer=config.n_layers,
        n_head=config.n_heads,
        n_embd=config.d_model,
        dropout=0.0,
        bias=True,
    )
    model = module.GPT(cfg).to(device)
    optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), device.type)
    compiled = torch.compile(model)
    x = torch.randint(0, config.vocab_size, (batch, config.context_length), device=device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            _, loss = compiled(x, x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nanogpt", help="path to nanoGPT's model.py (the reference)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=50304, help="50,257 padded to a multiple of 64")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--device", default="cuda", help="cuda (cpu only to try the script on a tiny model)")
    parser.add_argument("--tiny", action="store_true", help="2 layers, width 128, context 128: a smoke test")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU (use --device cpu --tiny to try the script)")
    config = GPTConfig.gpt2()
    config.vocab_size = args.vocab
    if args.tiny:
        config = GPTConfig(vocab_size=args.vocab, context_length=128, n_layers=2, n_heads=4, d_model=128)
    ids = torch.randint(0, config.vocab_size, (args.batch * config.context_length * 64,))
    results = {}
    for name, compiled in (("course, eager", False), ("course, compiled", True)):
        torch.manual_seed(0)
        model = GPT(config).to(device)
        train = TrainConfig(
            steps=10**6,
            batch_size=args.batch,
            context_length=config.context_length,
            lr=6e-4,
            precision="bf16",
            compile=compiled,
        )
        trainer = Trainer(model, ids, ids[: config.context_length * 2 + 1], train, progress=False)
        results[name] = timed(trainer._step, args.warmup, args.steps, device)
        n_params = model.num_parameters()
        del trainer, model
    if args.nanogpt:
        results["nanoGPT, compiled"] = timed(
            nanogpt_step(args.nanogpt, config, args.batch, device), args.warmup, args.steps, device
        )
    tokens = args.batch * config.context_length
    per_token = flops_per_token(config, n_params)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(
        f"{name}: {n_params / 1e6:.1f} M parameters, batch {args.batch} x {config.context_length}, "
        f"{per_token / 1e9:.2f} GFLOP per token, peak {args.peak_tflops:.0f} TFLOP/s"
    )
    for run, seconds in results.items():
        mfu = tokens / seconds * per_token / (args.peak_tflops * 1e12)
        print(f"  {run:<20} {seconds * 1000:7.1f} ms/step {tokens / seconds:10,.0f} tokens/s   MFU {100 * mfu:5.1f}%")
    if "nanoGPT, compiled" in results:
        print(f"course compiled vs nanoGPT compiled: {results['nanoGPT, compiled'] / results['course, compiled']:.2f}x")


if __name__ == "__main__":
    main()
