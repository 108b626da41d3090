"""The exercises of notebook 07, The transformer block and the GPT model.

Each one's visible cases, hints and bans, in the order the notebook asks them; the checker is
:mod:`course_lib.exercises.core`, the instructors' key (solutions, hidden cases, typical mistakes)
:mod:`course_lib.grading.keys.ch07`.
"""

from __future__ import annotations

import math

import torch

from .core import Case, _seeded, exercise


@exercise(
    "llama-parameters",
    hint=[
        "list the parts first: embedding, head, and per layer attention, feed-forward and norms; what is gone "
        "compared with GPT-2?",
        "per layer: four C x C projections with no biases; SwiGLU's three matrices between C and hidden; "
        "two RMSNorms, each a weight of C and no shift",
        "then the token embedding, the untied LM head (as large again) and the final RMSNorm; no position "
        "table: RoPE has no weights",
    ],
    bans=("course_lib.model.parameter_formula", "course_lib.model.count_parameters", "course_lib.model.GPT"),
)
def _llama_parameter_cases() -> list[Case]:
    return [
        Case((100, 8, 1, 16), "a toy model", 2264),
        Case((1000, 64, 2, 172), "two layers", 227_136),
        Case((32000, 4096, 32, 11008), "LLaMA-7B", 6_738_415_616),
    ]


@exercise(
    "rms-norm",
    hint=[
        "the statement promises any shape (..., C): try the buggy function on inputs other than a matrix",
        "dim=1 is the last dimension of a (T, C) input but the TOKENS of a (B, T, C) one: each vector must be "
        "normalised over its own features, dim=-1",
        "then x / sqrt(mean(x ** 2) + eps) * (1 + weight), eps inside the square root",
        "300 ** 2 = 90,000 is above float16's largest value, 65,504: inf, and x / inf = 0; square a float16 or "
        "bfloat16 x in float32 (x.float()), multiply by (1 + weight) in float32 too, and give the result back in "
        "x's dtype (.to(x.dtype)) last",
    ],
    bans=("torch.nn.functional.rms_norm", "torch.rms_norm", "course_lib.layers.RMSNorm"),
)
def _rms_norm_cases() -> list[Case]:
    g = _seeded(6)

    def answer(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        work = x.double()  # at least float32, as the statement asks: the same answer to within the check
        return (work / torch.sqrt(work.pow(2).mean(dim=-1, keepdim=True) + eps) * (1 + weight.double())).to(x.dtype)

    half = torch.tensor([[300.0, -400.0, 100.0, 0.0], [1.0, 2.0, -2.0, 1.0]], dtype=torch.float16)
    inputs = [
        ((torch.tensor([[3.0, 4.0]]), torch.zeros(2), 0.0), "one vector, weight 0: divided by its RMS, sqrt(12.5)"),
        ((torch.randn(5, 4, generator=g), torch.randn(4, generator=g), 1e-6), "(T, C) with weights"),
        ((torch.randn(2, 3, 8, generator=g) * 3, torch.randn(8, generator=g), 1e-6), "(B, T, C)"),
        ((torch.full((1, 4), 1e-3), torch.zeros(4), 1e-6), "a tiny vector: eps matters"),
        ((half, torch.tensor([0.0, 0.5, -0.5, 1.0], dtype=torch.float16), 1e-6), "float16: squares above 65,504"),
        ((torch.randn(3, 2, 8, generator=g).transpose(0, 1), torch.randn(8, generator=g), 1e-6),
         "a non-contiguous (2, 3, 8): a transposed batch"),
        (((torch.randn(3, 16, generator=g) * 3).bfloat16(), torch.randn(16, generator=g).bfloat16(), 1e-6),
         "bfloat16: squared in float32 too"),
    ]  # fmt: skip
    cases = [Case(args, note, answer(*args)) for args, note in inputs]
    cases[3].hint, cases[4].hint, cases[6].hint = 2, 3, 3  # the tiny vector: where eps goes; half precision
    cases[5].hint = (
        "this batch is not contiguous in memory (a transposed one): .view cannot merge its dimensions without a "
        "copy; does your function need to flatten anything to work over the last dimension?"
    )
    return cases


@exercise(
    "residual-std",
    hint=[
        "what happens to the variance when you add two independent random variables?",
        "variances of independent terms add: the stream's variance is 1 plus one branch_std ** 2 per branch, "
        "and a block has two branches (attention and feed-forward)",
    ],
)
def _residual_std_cases() -> list[Case]:
    return [
        Case((0, 1.0), "no blocks: the embeddings' std", 1.0),
        Case((1, 1.0), "one block, two branches of std 1", math.sqrt(3)),
        Case((12, 0.5), "12 blocks, branches of std 0.5", math.sqrt(7)),
    ]


@exercise(
    "dead-fraction",
    hint=[
        "a unit is one feature (the last dimension); it is dead when it is <= 0 at every position",
        "flatten every leading dimension into one, so that each column is one unit, then ask of each column "
        "whether all its entries are <= 0",
        "the answer is the share of such columns, a float; usual mistakes: the share of entries <= 0, "
        "< 0 instead of <= 0, the rows instead of the columns",
    ],
)
def _dead_fraction_cases() -> list[Case]:
    return [
        Case((torch.tensor([[1.0, -1.0, 0.0], [2.0, -3.0, 0.0]]),), "two dead units of three (0 counts)", 2 / 3),
        Case((torch.tensor([[-1.0, 2.0], [-1.0, -2.0]]),), "one unit fires once: alive", 0.5),
        Case((torch.tensor([[[-1.0, 1.0], [-2.0, -1.0]], [[-3.0, -1.0], [-1.0, -1.0]]]),), "(B, T, hidden)", 0.5),
    ]
