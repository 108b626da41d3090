"""Generating 200 tokens from a 10-token prompt: the course KV cache against recomputing, and
against llms-from-scratch's KV-cache model.

    .venv/bin/pip install --no-deps llms-from-scratch==1.0.19   # the reference, benchmark only
    .venv/bin/python benchmarks/generation.py [--layers 6 --heads 6 --d-model 384 --context 256]

Greedy decoding, batch 1, random weights, every run checked to produce the same tokens
before anything is timed, alternating rounds. Two models of the same size:

- GPT-2 style (learned positions, LayerNorm, GELU): course cache vs recomputation. (The
  reference's GPT-2 KV-cache model, ``llms_from_scratch.kv_cache.gpt2``, fails on its first
  cached step in 1.0.19: its mask is sliced by columns, giving shape (T, 1) for one query.)
- Llama style (RoPE, RMSNorm, SwiGLU; ``GPTConfig.llama_like``): course cache vs
  recomputation vs the reference's ``kv_cache.llama3.Llama3Model`` with its own
  ``kv_cache.generate.generate_text_simple``, weights copied.

Goals: cache >= 5x recomputation, >= 1x the reference.
"""

from __future__ import annotations

import argparse

import torch
from reference import alternate, book_llama, copy_llama_weights

from course_lib.generation import generate
from course_lib.model import GPT, GPTConfig


def report(title: str, median: dict[str, float], new: int) -> None:
    print(title)
    for name, t in median.items():
        print(f"  {name:<30} {t * 1000:7.0f} ms  {new / t:7.0f} tokens/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=103, help="the offline corpus's character count")
    parser.add_argument("--prompt", type=int, default=10)
    parser.add_argument("--new", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the reference runs on the same device)")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    try:
        from llms_from_scratch.kv_cache.generate import generate_text_simple
    except ImportError:
        raise SystemExit(
            "install the reference first: .venv/bin/pip install --no-deps llms-from-scratch==1.0.19"
        ) from None

    size = dict(
        vocab_size=args.vocab,
        context_length=args.context,
        n_layers=args.layers,
        n_heads=args.heads,
        d_model=args.d_model,
    )
    prompt = torch.randint(0, args.vocab, (1, args.prompt), generator=torch.Generator().manual_seed(0)).to(device)
    print(
        f"{args.layers} layers, {args.heads} heads, width {args.d_model}, vocab {args.vocab}: {args.new} tokens "
        f"after a {args.prompt}-token prompt, greedy, {args.threads} threads, {device.type}, "
        f"median of {args.rounds} rounds"
    )

    results = {}
    for style, config in [
        ("GPT-2 style", GPTConfig(**size)),
        ("Llama style", GPTConfig.llama_like(**size, norm_eps=1e-5)),
    ]:
        torch.manual_seed(0)
        course = GPT(config).to(device).eval()
        runs = {
            "course, KV cache": lambda: generate(course, prompt, args.new, greedy=True, use_cache=True),
            "course, recompute": lambda: generate(course, prompt, args.new, greedy=True, use_cache=False),
        }
        if style == "Llama style":
            book = book_llama(config).eval()
            copy_llama_weights(course.cpu(), book)
            course.to(device), book.to(device)
            runs["llms-from-scratch KV cache"] = lambda: generate_text_simple(book, prompt, args.new, use_cache=True)
        outputs = {name: run() for name, run in runs.items()}
        for name, out in outputs.items():
            assert torch.equal(out, outputs["course, recompute"]), f"{style}: {name} generated different tokens"
        median = alternate(runs, args.rounds)
        report(style, median, args.new)
        results[style] = median

    for style, median in results.items():
        print(f"{style}: KV cache vs recompute {median['course, recompute'] / median['course, KV cache']:.2f}x faster")
    llama = results["Llama style"]
    print(
        f"Llama style: course KV cache vs llms-from-scratch KV cache "
        f"{llama['llms-from-scratch KV cache'] / llama['course, KV cache']:.2f}x faster"
    )


if __name__ == "__main__":
    main()
