"""Multi-head self-attention, forward + backward, on the CPU.

    .venv/bin/pip install --no-deps llms-from-scratch==1.0.19   # the reference, benchmark only
    .venv/bin/python benchmarks/attention.py [--batch 8 --tokens 1024 --d-model 768 --heads 12]

Compares, in one process and alternating rounds so machine noise hits all alike:
  - course_lib MultiHeadAttention(fast=True)  (fused QKV + F.scaled_dot_product_attention)
  - course_lib MultiHeadAttention(fast=False) (the readable teaching path)
  - llms_from_scratch.ch03.MultiHeadAttention (the book's module)
All are causal, dropout 0, with QKV bias, and are checked to compute the same output on
shared weights before timing. Prints the median time of each and the ratios (goal: fast path
at least 1.5x faster than llms-from-scratch).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from course_lib.attention import MultiHeadAttention


def step_time(module: torch.nn.Module, x: torch.Tensor) -> float:
    x = x.detach().requires_grad_()
    start = time.perf_counter()
    module(x).sum().backward()
    elapsed = time.perf_counter() - start
    module.zero_grad(set_to_none=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        from llms_from_scratch.ch03 import MultiHeadAttention as BookMHA
    except ImportError:
        raise SystemExit("install the reference first: pip install --no-deps llms-from-scratch==1.0.19") from None

    torch.manual_seed(0)
    B, T, C, H = args.batch, args.tokens, args.d_model, args.heads
    teaching = MultiHeadAttention(C, H, T, causal=True, bias=True, fast=False)
    fast = MultiHeadAttention(C, H, T, causal=True, bias=True, fast=True)
    fast.load_state_dict(teaching.state_dict())
    book = BookMHA(C, C, T, dropout=0.0, num_heads=H, qkv_bias=True)
    with torch.no_grad():  # same weights everywhere, so the outputs can be compared
        for part, layer in enumerate((book.W_query, book.W_key, book.W_value)):
            layer.weight.copy_(teaching.c_attn.weight[part * C : (part + 1) * C])
            layer.bias.copy_(teaching.c_attn.bias[part * C : (part + 1) * C])
        book.out_proj.load_state_dict(teaching.c_proj.state_dict())
    x = torch.randn(B, T, C)
    with torch.no_grad():
        reference = book(x[:1, :128])
        for module in (teaching, fast):
            assert torch.allclose(module(x[:1, :128]), reference, atol=1e-4), "modules disagree"

    modules = {"course fast path": fast, "course teaching path": teaching, "llms-from-scratch": book}
    times: dict[str, list[float]] = {name: [] for name in modules}
    for name, module in modules.items():  # warm-up
        step_time(module, x)
    for _ in range(args.rounds):
        for name, module in modules.items():
            times[name].append(step_time(module, x))
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"B={B} T={T} d_model={C} heads={H}, forward+backward, {args.threads} threads, median of {args.rounds}")
    for name, t in median.items():
        print(f"  {name:<22} {t * 1000:8.0f} ms")
    print(f"fast path vs llms-from-scratch: {median['llms-from-scratch'] / median['course fast path']:.2f}x faster")
    print(f"fast path vs teaching path:     {median['course teaching path'] / median['course fast path']:.2f}x faster")


if __name__ == "__main__":
    main()
