"""What the benchmarks share: the llms-from-scratch reference models and alternating timing.

The reference is the companion package of Raschka's *Build a Large Language Model (From
Scratch)*, installed for benchmarks only:

    .venv/bin/pip install --no-deps llms-from-scratch==1.0.19
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from course_lib.model import GPT, GPTConfig


def book_config(config: GPTConfig) -> dict:
    """The book's config dict for a GPT-2-style course config (learned positions, LayerNorm)."""
    return {
        "vocab_size": config.vocab_size,
        "context_length": config.context_length,
        "emb_dim": config.d_model,
        "n_heads": config.n_heads,
        "n_layers": config.n_layers,
        "drop_rate": config.dropout,
        "qkv_bias": config.bias,
    }


def book_model(config: GPTConfig, kv_cache: bool = False) -> torch.nn.Module:
    try:
        if kv_cache:
            from llms_from_scratch.kv_cache.gpt2 import GPTModel
        else:
            from llms_from_scratch.ch04 import GPTModel
    except ImportError:
        raise SystemExit(
            "install the reference first: .venv/bin/pip install --no-deps llms-from-scratch==1.0.19"
        ) from None
    return GPTModel(book_config(config))


@torch.no_grad()
def copy_weights(course: GPT, book: torch.nn.Module) -> None:
    """Give the book's model the course model's weights, so both compute the same function."""
    C = course.config.d_model
    book.tok_emb.weight.copy_(course.transformer.wte.weight)
    book.pos_emb.weight.copy_(course.transformer.wpe.weight)
    for ours, theirs in zip(course.transformer.h, book.trf_blocks):
        for part, layer in enumerate((theirs.att.W_query, theirs.att.W_key, theirs.att.W_value)):
            layer.weight.copy_(ours.attn.c_attn.weight[part * C : (part + 1) * C])
            if layer.bias is not None:
                layer.bias.copy_(ours.attn.c_attn.bias[part * C : (part + 1) * C])
        theirs.att.out_proj.load_state_dict(ours.attn.c_proj.state_dict())
        theirs.ff.layers[0].load_state_dict(ours.mlp.c_fc.state_dict())
        theirs.ff.layers[2].load_state_dict(ours.mlp.c_proj.state_dict())
        for norm, ln in ((theirs.norm1, ours.ln_1), (theirs.norm2, ours.ln_2)):
            norm.scale.copy_(ln.weight)
            norm.shift.copy_(ln.bias)
    book.final_norm.scale.copy_(course.transformer.ln_f.weight)
    book.final_norm.shift.copy_(course.transformer.ln_f.bias)
    book.out_head.weight.copy_(course.lm_head.weight)


def book_llama(config: GPTConfig) -> torch.nn.Module:
    """The reference's KV-cache Llama 3 at a course ``GPTConfig.llama_like`` config (float32,
    every head its own keys and values, no RoPE frequency rescaling)."""
    try:
        from llms_from_scratch.kv_cache.llama3 import Llama3Model
    except ImportError:
        raise SystemExit(
            "install the reference first: .venv/bin/pip install --no-deps llms-from-scratch==1.0.19"
        ) from None
    return Llama3Model(
        {
            "vocab_size": config.vocab_size,
            "context_length": config.context_length,
            "emb_dim": config.d_model,
            "n_heads": config.n_heads,
            "n_layers": config.n_layers,
            "hidden_dim": config.hidden,
            "n_kv_groups": config.n_heads,
            "rope_base": config.rope_base,
            "dtype": torch.float32,
            "rope_freq": None,
        }
    )


@torch.no_grad()
def copy_llama_weights(course: GPT, book: torch.nn.Module) -> None:
    C = course.config.d_model
    book.tok_emb.weight.copy_(course.transformer.wte.weight)
    for ours, theirs in zip(course.transformer.h, book.trf_blocks):
        for part, layer in enumerate((theirs.att.W_query, theirs.att.W_key, theirs.att.W_value)):
            layer.weight.copy_(ours.attn.c_attn.weight[part * C : (part + 1) * C])
        theirs.att.out_proj.weight.copy_(ours.attn.c_proj.weight)
        theirs.ff.fc1.weight.copy_(ours.mlp.gate_proj.weight)
        theirs.ff.fc2.weight.copy_(ours.mlp.up_proj.weight)
        theirs.ff.fc3.weight.copy_(ours.mlp.down_proj.weight)
        theirs.norm1.weight.copy_(ours.ln_1.weight)
        theirs.norm2.weight.copy_(ours.ln_2.weight)
    book.final_norm.weight.copy_(course.transformer.ln_f.weight)
    book.out_head.weight.copy_(course.lm_head.weight)


def alternate(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each run, measured in alternating rounds after one warm-up each, so
    that noise from other work on the machine falls on all of them alike (on a GPU, between
    two synchronisations)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None  # a GPU runs asynchronously
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            sync()
            start = time.perf_counter()
            run()
            sync()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}
