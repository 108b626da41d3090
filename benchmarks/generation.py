"""Generating 200 tokens from a 10-token prompt: the course KV cache against recomputing, and
against llms-from-scratch's KV-cache GPT.

    .venv/bin/pip install --no-deps llms-from-scratch==1.0.19   # the reference, benchmark only
    .venv/bin/python benchmarks/generation.py [--layers 6 --heads 6 --d-model 384 --context 256]

One GPT-2-style config (character vocabulary size of the offline corpus), one set of random
weights copied into the reference, greedy decoding, batch 1. All three must produce the same
200 tokens before anything is timed. Goals: cache >= 5x recomputation, >= 1x the reference.
"""

from __future__ import annotations

import argparse

import torch

from course_lib.generation import generate
from course_lib.model import GPT, GPTConfig
from reference import alternate, book_model, copy_weights


@torch.no_grad()
def book_generate(model: torch.nn.Module, idx: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """The reference's own cached greedy loop (llms_from_scratch.kv_cache)."""
    from llms_from_scratch.kv_cache.utils import KVCache

    model.eval()
    cache = KVCache(n_layers=len(model.trf_blocks))
    model.current_pos = 0  # the reference keeps its position counter on the model
    logits = model(idx, use_cache=True, cache=cache)
    for _ in range(new_tokens):
        next_idx = logits[:, -1].argmax(dim=-1, keepdim=True)
        idx = torch.cat([idx, next_idx], dim=1)
        logits = model(next_idx, use_cache=True, cache=cache)
    return idx


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=103)
    parser.add_argument("--prompt", type=int, default=10)
    parser.add_argument("--new", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config = GPTConfig(vocab_size=args.vocab, context_length=args.context, n_layers=args.layers,
                       n_heads=args.heads, d_model=args.d_model, tie_weights=False)
    torch.manual_seed(0)
    course = GPT(config).eval()
    book = book_model(config, kv_cache=True)
    copy_weights(course, book)
    prompt = torch.randint(0, args.vocab, (1, args.prompt))

    runs = {
        "course, KV cache": lambda: generate(course, prompt, args.new, greedy=True, use_cache=True),
        "course, recompute": lambda: generate(course, prompt, args.new, greedy=True, use_cache=False),
        "llms-from-scratch KV cache": lambda: book_generate(book, prompt, args.new),
    }
    outputs = {name: run() for name, run in runs.items()}
    reference = outputs["course, recompute"]
    for name, out in outputs.items():
        assert torch.equal(out, reference), f"{name} generated different tokens"
    median = alternate(runs, args.rounds)
    print(f"{args.layers} layers, {args.heads} heads, width {args.d_model}, vocab {args.vocab}: "
          f"{args.new} tokens after a {args.prompt}-token prompt, greedy, {args.threads} threads, median of {args.rounds}")
    for name, t in median.items():
        print(f"  {name:<28} {t * 1000:7.0f} ms  {args.new / t:7.0f} tokens/s")
    print(f"KV cache vs recompute:          {median['course, recompute'] / median['course, KV cache']:.2f}x faster")
    print(f"KV cache vs llms-from-scratch:  {median['llms-from-scratch KV cache'] / median['course, KV cache']:.2f}x faster")


if __name__ == "__main__":
    main()
