"""Hidden cases: for every exercise, a larger and nastier set than the one students see.

``check()`` in a student's notebook tries the visible cases of ``course_lib/exercises/chNN.py``; the grader
(``course.py grade``) tries those *and* the hidden ones, so "all cases passed" in a notebook does
not mean full marks. The expected answers come from each exercise's reference in ``course_lib/exercises/`` or,
for an exercise that no course_lib function answers, from its solution in ``solutions.py`` (:func:`answered`).

This is the course's **demo set**. It ships inside course_lib, so students can read it: use it to try
the grader. For real grades, ``python3 course.py grade --export-cases my_cases.py`` writes a copy of
this file with a new random ``SEED``; change or add cases there (a ``@hidden(name)`` function per
exercise, in this form), keep the file away from students, and grade with ``--cases my_cases.py``.
``tests/test_grading.py`` checks the demo set against a correct solution and against the typical
mistakes of ``tests/test_exercises.py``: a correct solution passes all of it, each mistake fails
some of it.

What makes a case nasty: edge sizes (empty, one token, one head, d = 2), extra batch dimensions,
values that break naive formulas (huge, tiny, -inf), ties, non-contiguous tensors, inputs that
never occur in the visible cases (token ids that do not start at 0, a pad id other than 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from course_lib.exercises import _FROM_REFERENCE, EXERCISES, Case  # absolute: an exported copy runs anywhere
from course_lib.grading.solutions import SOLUTIONS

HIDDEN: dict[str, Callable[[], list[Case]]] = {}  # exercise name -> its hidden cases, course order
SEED = 1000  # every random case is drawn from a generator seeded from this


def hidden(name: str) -> Callable[[Callable[[], list[Case]]], Callable[[], list[Case]]]:
    """Register the hidden cases of exercise ``name`` (built afresh for every use)."""

    def register(cases: Callable[[], list[Case]]) -> Callable[[], list[Case]]:
        if name in HIDDEN:
            raise ValueError(f"hidden cases for {name!r} are defined twice")
        HIDDEN[name] = answered(name, cases)
        return cases

    return register


def answered(name: str, cases: Callable[[], list[Case]]) -> Callable[[], list[Case]]:
    """``cases`` with each expected answer filled in by the solution of ``name``, for an exercise that
    no course_lib function answers (its solution is in course_lib/grading/solutions.py)."""

    def build() -> list[Case]:
        made = cases()
        if EXERCISES[name].reference is None:
            for case, fresh in zip(made, cases()):  # the solution gets its own copy of the inputs
                if case.expected is _FROM_REFERENCE:
                    case.expected = SOLUTIONS[name](*fresh.args)
        return made

    return build


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(SEED + seed)


# == 00 · Language models and PyTorch ======================================================


@hidden("trigram-counts")
def _trigram() -> list[Case]:
    g = _g(0)
    return [
        Case(([], 3), "no tokens: all zeros"),
        Case(([2, 1], 4), "two tokens: no trigram"),
        Case(([4, 4, 4], 5), "only the largest id"),
        Case(([0, 1, 2, 3, 4, 5], 8), "a chain, ids 6 and 7 unseen"),
        Case(([1, 0, 2] * 20, 3), "a cycle of three"),
        Case((torch.randint(3, 12, (400,), generator=g).tolist(), 14), "400 random tokens, ids 3..11 of 14"),
    ]


@hidden("interpolated-bigram")
def _interpolated() -> list[Case]:
    g = _g(20)
    sparse = torch.randint(0, 5, (6, 6), generator=g) * (torch.rand(6, 6, generator=g) < 0.3)
    sparse[2] = 0  # a token that never came first
    return [
        Case((torch.tensor([[3]]), 0.7), "one token"),
        Case((torch.tensor([[0, 5], [0, 0]]), 0.9), "one pair seen; the second row never came first"),
        Case((torch.randint(0, 50, (5, 5), generator=g), 0.3), "dense counts, lam 0.3"),
        Case((sparse, 0.95), "sparse counts with an empty row, lam 0.95"),
        Case((torch.randint(0, 1000, (40, 40), generator=g), 0.99), "40 tokens, large counts"),
    ]


@hidden("accumulated-grad")
def _accumulated() -> list[Case]:
    return [
        Case((1.0, 1), "x = 1: the slope is 1"),
        Case((-4.0, 1), "x = -4, once"),
        Case((1.0, 10), "ten calls"),
        Case((3.25, 7), "x = 3.25, seven times"),
        Case((-2.0, 9), "x = -2, nine times"),
    ]


@hidden("logsumexp")
def _logsumexp() -> list[Case]:
    g = _g(1)
    return [
        Case((torch.tensor([5.0]),), "one element: itself"),
        Case((torch.tensor([1e4, 0.0, -1e4]),), "huge values of both signs"),
        Case((torch.tensor([float("-inf"), 0.0, -3.0]),), "a -inf entry counts as zero probability"),
        Case((torch.randn(3, 4, 5, generator=g) * 3000,), "(3, 4, 5): logsumexp over the last dim only"),
        Case((torch.randn(6, 7, generator=g).T * 40,), "a non-contiguous (7, 6) tensor"),
        Case((torch.zeros(1000),), "1,000 zeros: log 1000"),
        Case((torch.tensor([[-5e4, -5e4 - 1.0], [2e4, 2e4]], dtype=torch.float64),), "float64, far from 0"),
        Case((torch.full((2, 3, 4), float("-inf")),), "every row -inf only: -inf"),
    ]


# == 01 · Tokenization =====================================================================


@hidden("chunk-pair-counts")
def _chunk_pairs() -> list[Case]:
    g = _g(2)
    words = {
        tuple(torch.randint(97, 101, (int(n),), generator=g).tolist()): int(c)
        for n, c in zip(torch.randint(1, 8, (40,), generator=g), torch.randint(1, 50, (40,), generator=g))
    }
    return [
        Case(({},), "no chunks: no pairs"),
        Case(({(3,): 9},), "only a one-token chunk"),
        Case(({(1, 1, 1, 1, 1): 2},), "a run of five, twice: (1, 1) eight times"),
        Case(({(1, 2): 4, (2, 1): 3, (1, 2, 1): 1},), "the same pair from several chunks"),
        Case(({tuple("héllo".encode()): 3, tuple(" wörld".encode()): 2},), "UTF-8 bytes of two words"),
        Case((words,), "up to 40 random chunks with random counts"),
    ]  # fmt: skip


@hidden("encode-with-special")
def _special() -> list[Case]:
    return [
        Case(("", 50256), "an empty text"),
        Case(("<|endoftext|>x", 7), "a marker at the start"),
        Case(("a<|endoftext|><|endoftext|>b", 300), "two markers in a row"),
        Case(("<|endoftext|>" * 3, 256), "three markers and nothing else"),
        Case(("one<|endoftext|>two<|endoftext|>three 🎉", 50256), "three documents, one with an emoji"),
        Case(("<|endoftext|", 1), "an unfinished marker is ordinary text"),
    ]


@hidden("longest-match")
def _longest() -> list[Case]:
    return [
        Case(("", {"a"}), "an empty text"),
        Case(("a", {"a", "ab"}), "one character"),
        Case(("abcd", {"a", "abc", "bcd", "d"}), "greedy takes 'abc', though 'a' + 'bcd' also covers it"),
        Case(("the cat", {"the", " ", "ca", "cat", "t"}), "a space as its own entry"),
        Case(("aaaaaaa", {"a", "aa", "aaa"}), "a run of seven"),
        Case(("héllo wörld", {"hé", "llo", " w", "ö", "rld"}), "accented characters"),
        Case(("banana", {"ban", "ana", "nan", "b"}), "overlapping entries"),
    ]


@hidden("unk-rate")
def _unk_rate() -> list[Case]:
    g = _g(3)
    train = [f"w{int(i)}" for i in torch.randint(0, 60, (800,), generator=g)]
    val = [f"w{int(i)}" for i in torch.randint(0, 80, (300,), generator=g)]
    return [
        Case((["a"], ["a"], 1), "one word, known"),
        Case((["a", "a"], ["a", "b"], 3), "min_count above every count: nothing known"),
        Case((["x", "y", "x"], ["x", "x", "x", "y"], 2), "the same known word three times"),
        Case((train, val, 1), "random words, min_count 1"),
        Case((train, val, 12), "random words, min_count 12"),
        Case(([], ["a", "b"], 1), "no training words: every word unknown"),
    ]


# == 02 · Embeddings and training data =====================================================


@hidden("padded-windows")
def _padded() -> list[Case]:
    g = _g(4)
    return [
        Case(([3, 4], 1, 0), "context 1, two tokens"),
        Case((list(range(9)), 4, 0), "an exact fit of two windows"),
        Case((list(range(1, 12)), 5, -1), "a pad id of -1, one token in the last window"),
        Case((torch.randint(0, 50, (100,), generator=g).tolist(), 8, 50), "100 random ids, context 8"),
        Case(([5, 5, 5], 16, 1), "a context much longer than the text"),
    ]


@hidden("embedding-grad")
def _embedding_grad() -> list[Case]:
    g = _g(5)
    return [
        Case((torch.randn(4, 3, generator=g), torch.tensor([3, 3, 3, 3])), "the last row four times"),
        Case((torch.randn(5, 2, generator=g), torch.tensor([], dtype=torch.long)), "no lookups: all zeros"),
        Case((torch.randn(7, 4, generator=g), torch.randint(0, 7, (2, 3, 4), generator=g)), "(2, 3, 4) ids"),
        Case((torch.randn(100, 8, generator=g), torch.randint(0, 100, (64,), generator=g)), "V = 100"),
    ]


@hidden("split-windows")
def _split() -> list[Case]:
    g = _g(21)
    return [
        Case((torch.arange(100, 140), 5, 5, 0.5), "half and half, ids not from 0"),
        Case((torch.arange(25), 4, 3, 0.2), "stride 3, context 4"),
        Case((torch.arange(10), 3, 1, 0.1), "validation of one token: no window"),
        Case((torch.randint(0, 1000, (300,), generator=g), 16, 4, 0.1), "300 random ids, stride 4"),
        Case((torch.arange(50), 6, 10, 0.3), "stride longer than the context"),
    ]


@hidden("nearest-tokens")
def _nearest() -> list[Case]:
    g = _g(22)
    return [
        Case((torch.tensor([[1.0, 0.0], [0.0, 1.0]]), 1, 1), "two rows: the other one"),
        Case(
            (torch.tensor([[3.0, 4.0], [-3.0, -4.0], [0.6, 0.8], [4.0, -3.0]]), 0, 3), "same, opposite, at 90 degrees"
        ),
        Case((torch.randn(50, 16, generator=g), 7, 5), "50 random rows, k = 5"),
        Case(
            (torch.randn(20, 3, generator=g) * torch.rand(20, 1, generator=g) * 100, 0, 19), "every row, lengths apart"
        ),
    ]


# == 03 · The MLP language model ===========================================================


@hidden("label-smoothing")
def _label_smoothing() -> list[Case]:
    g = _g(6)
    return [
        Case((torch.randn(64, 100, generator=g) * 3, torch.randint(0, 100, (64,), generator=g), 0.1), "64 x 100"),
        Case((torch.tensor([[1e4, -1e4, 0.0]]), torch.tensor([1]), 0.1), "huge logits, the least likely target"),
        Case((torch.randn(3, 5, generator=g), torch.tensor([4, 4, 4]), 1.0), "eps = 1: the uniform target alone"),
        Case((torch.randn(3, 1, generator=g), torch.tensor([0, 0, 0]), 0.5), "one class: loss 0"),
        Case((torch.randn(4, 6, generator=g, dtype=torch.float64), torch.tensor([5, 1, 0, 2]), 0.05), "float64"),
    ]


@hidden("window-losses")
def _window_losses() -> list[Case]:
    g = _g(7)
    targets = torch.randint(0, 20, (8, 16), generator=g)
    for b, n in enumerate([16, 1, 5, 9, 16, 2, 15, 3]):
        targets[b, n:] = -100
    inner = torch.tensor([[3, -100, 4, -100]])  # -100 inside a window, not only at its end
    return [
        Case((torch.randn(8, 16, 20, generator=g), targets), "eight windows of random lengths"),
        Case((torch.randn(1, 4, 6, generator=g), inner), "-100 inside the window"),
        Case((torch.randn(1, 1, 3, generator=g), torch.tensor([[2]])), "one window of one token"),
        Case((torch.randn(2, 3, 4, generator=g, dtype=torch.float64), torch.tensor([[0, 1, -100], [2, 3, 0]])),
             "float64"),
    ]  # fmt: skip


@hidden("min-training-loss")
def _min_training_loss() -> list[Case]:
    g = _g(8)
    ids = torch.randint(0, 4, (300,), generator=g).tolist()
    return [
        Case((ids, 0), "300 random ids, c = 0"),
        Case((ids, 2), "300 random ids, c = 2"),
        Case((ids, 6), "300 random ids, c = 6: most contexts seen once"),
        Case(([5, 5, 5, 5], 1), "one token repeated: 0"),
        Case(([7, 8], 1), "one position"),
        Case(([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], 0), "ids that do not start at 0"),
    ]


@hidden("bits-per-character")
def _bits_per_character() -> list[Case]:
    g = _g(9)
    losses = (torch.rand(50, generator=g) * 4).tolist()
    texts = ["x" * int(n) for n in torch.randint(0, 6, (50,), generator=g)]
    texts[0] = "ok"  # at least one character in all
    return [
        Case((losses, texts), "50 tokens of 0 to 5 characters"),
        Case(([0.0, 0.0], ["a", "b"]), "a perfect model: 0 bits"),
        Case(([5.0], ["héllo"]), "one token, one non-ASCII character"),
        Case(([math.log(2) * 8] * 4, ["abcd"] * 4), "8 bits for 4 characters, four times"),
    ]


# == 04 · Self-attention ===================================================================


@hidden("linear-attention")
def _linear_attention() -> list[Case]:
    g = _g(8)

    def r(*shape, scale=1.0, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=dtype) * scale

    return [
        Case((r(3, 4), r(6, 4), r(6, 2)), "3 queries, 6 keys: not square"),
        Case((r(2, 3, 5, 8), r(2, 3, 5, 8), r(2, 3, 5, 8)), "(B, H, T, d) = (2, 3, 5, 8)"),
        Case((r(4, 8, scale=10), r(4, 8, scale=10), r(4, 3)), "large entries: elu's linear part"),
        Case((r(64, 16), r(64, 16), r(64, 32)), "T = 64, d = 16"),
        Case((r(1, 6), r(1, 6), r(1, 6)), "one token: the output is v"),
        Case((r(5, 16, dtype=torch.float64), r(5, 16, dtype=torch.float64), r(5, 4, dtype=torch.float64)), "float64"),
    ]


@hidden("score-scale")
def _score_scale() -> list[Case]:
    return [
        Case((1, 1.0, 1.0), "d = 1"),
        Case((512, 1.0, 1.0), "d = 512: about 22.6"),
        Case((64, 1 / 3, 1 / 3), "a third of the variance each, as nn.Linear's default init gives"),
        Case((8, 9.0, 0.5), "different variances"),
        Case((4096, 0.02, 2.0), "wide and small"),
    ]


@hidden("attention-pool")
def _attention_pool() -> list[Case]:
    g = _g(9)
    return [
        Case((torch.randn(1, 1, 3, generator=g), torch.randn(3, generator=g)), "one token: itself"),
        Case((torch.randn(8, 5, 16, generator=g), torch.randn(16, generator=g)), "a batch of 8"),
        Case((torch.randn(3, 4, 2, generator=g) * 100, torch.randn(2, generator=g)), "large values: nearly one-hot"),
        Case((torch.randn(2, 7, 4, generator=g, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64)),
             "float64"),
        Case((torch.randn(5, 3, 6, generator=g), torch.zeros(6)), "a zero query: the mean of each text"),
    ]  # fmt: skip


@hidden("attention-entropy")
def _attention_entropy() -> list[Case]:
    g = _g(23)
    causal = torch.softmax(torch.randn(6, 6, generator=g).masked_fill(torch.ones(6, 6).triu(1).bool(), -torch.inf), -1)
    return [
        Case((torch.tensor([[1.0]]),), "one key: entropy 0"),
        Case((causal,), "a causal map: zeros above the diagonal"),
        Case((torch.softmax(torch.randn(2, 4, 8, 8, generator=g), -1),), "(B, H, T, T)"),
        Case((torch.full((3, 1000), 1e-3),), "uniform over 1,000: log 1000"),
        Case((torch.softmax(torch.randn(5, 5, generator=g, dtype=torch.float64) * 50, -1),), "nearly one-hot, float64"),
    ]


# == 05 · Causal masking and multi-head attention ==========================================


@hidden("local-causal-mask")
def _local_mask() -> list[Case]:
    return [
        Case((1, 1), "one token"),
        Case((8, 3), "T = 8, window 3"),
        Case((6, 6), "the window equals T"),
        Case((10, 4), "T = 10, window 4"),
        Case((32, 1), "window 1, T = 32"),
    ]


@hidden("left-padded-mask")
def _left_padded() -> list[Case]:
    return [
        Case((torch.tensor([1]), 1), "one real token"),
        Case((torch.tensor([1]), 5), "four pads and one token"),
        Case((torch.tensor([5, 1, 3, 4]), 5), "four rows of every kind"),
        Case((torch.tensor([8, 8]), 8), "no padding anywhere"),
        Case((torch.tensor([2, 7, 4]), 9), "T = 9"),
    ]


@hidden("mha-parameters")
def _mha_parameters() -> list[Case]:
    return [
        Case((1, 1), "C = 1"),
        Case((64, 8), "C = 64, 8 heads"),
        Case((64, 64), "as many heads as channels"),
        Case((1024, 16), "GPT-2 medium"),
        Case((384, 6), "the 10.8 M model's width"),
    ]


@hidden("previous-token-score")
def _previous_token() -> list[Case]:
    g = _g(10)
    causal = torch.ones(7, 7).triu(1).bool()
    return [
        Case((torch.tensor([[1.0, 0.0], [0.3, 0.7]]),), "T = 2: one weight"),
        Case((torch.softmax(torch.randn(4, 7, 7, generator=g).masked_fill(causal, -torch.inf), -1),), "4 heads, T = 7"),
        Case((torch.softmax(torch.randn(2, 3, 6, 6, generator=g), -1),), "(B, H, T, T), not causal"),
        Case((torch.eye(5).roll(-1, 1).T.contiguous(),), "every query on the token before, wrapped around"),
    ]


# == 06 · Positional encodings =============================================================


@hidden("rope-scaling")
def _rope_scaling() -> list[Case]:
    return [
        Case((4, 2.0, "ntk"), "D = 4: two pairs"),
        Case((4, 2.0, "linear"), "D = 4, linear"),
        Case((128, 4.0, "ntk"), "D = 128, NTK"),
        Case((128, 16.0, "linear"), "D = 128, linear, scale 16"),
        Case((16, 1.0, "linear"), "scale 1, linear: unchanged"),
        Case((32, 2.5, "ntk"), "a scale that is not a whole number"),
    ]


@hidden("alibi-bias")
def _alibi_bias() -> list[Case]:
    return [
        Case((torch.tensor([1.0]), 1), "one head, T = 1"),
        Case((torch.tensor([2 ** (-8 / 8 * (h + 1)) for h in range(8)]), 16), "eight heads, T = 16"),
        Case((torch.tensor([0.3, 0.7, 0.1]), 5), "slopes in no order"),
        Case((torch.tensor([0.5, 0.25], dtype=torch.float64), 6), "float64 slopes"),
    ]


@hidden("stretch-positions")
def _stretch_positions() -> list[Case]:
    g = _g(12)
    return [
        Case((torch.randn(64, 16, generator=g), 256), "64 positions to 256"),
        Case((torch.randn(2, 4, generator=g), 2), "two rows, unchanged"),
        Case((torch.randn(5, 3, generator=g), 2), "five rows to the first and last"),
        Case((torch.randn(10, 6, generator=g, dtype=torch.float64), 7), "float64, ten rows to seven"),
        Case((torch.randn(8, 3, generator=g).T.contiguous().T, 20), "a non-contiguous table"),
    ]


@hidden("alibi-reach")
def _alibi_reach() -> list[Case]:
    return [
        Case((0.25, 64, 0.9), "head 0 of four, 64 keys"),
        Case((0.00390625, 256, 0.9), "head 3 of four, 256 keys"),
        Case((0.0625, 256, 0.5), "head 1 of four, 256 keys"),
        Case((0.0, 1, 1.0), "one key"),
        Case((0.0, 64, 0.999), "slope 0, nearly all the weight: every key"),
        Case((1.0, 100, 0.3), "a share below the query's own weight"),
    ]


# == 07 · The transformer block and the GPT model ==========================================


@hidden("llama-parameters")
def _llama() -> list[Case]:
    return [
        Case((1, 1, 1, 1), "all ones"),
        Case((50257, 768, 12, 2048), "GPT-2 small's sizes, LLaMA's layers"),
        Case((32000, 5120, 40, 13824), "LLaMA-13B"),
        Case((49152, 576, 30, 1536), "SmolLM2-135M's sizes, its head untied"),
        Case((10, 16, 0, 32), "no layers"),
    ]


@hidden("rms-norm")
def _rms_norm() -> list[Case]:
    g = _g(11)
    return [
        Case((torch.randn(1, 1, generator=g), torch.ones(1), 1e-6), "C = 1: the sign"),
        Case((torch.randn(4, 2, 3, 16, generator=g), torch.randn(16, generator=g), 1e-5), "(4, 2, 3, 16)"),
        Case((torch.zeros(2, 4), torch.ones(4), 1e-6), "zeros: eps avoids 0/0"),
        Case((torch.randn(3, 5, generator=g) * 1e3, torch.randn(5, generator=g), 1e-6), "large values"),
        Case((torch.randn(6, 7, generator=g).T, torch.ones(6), 0.1), "a non-contiguous (7, 6), eps 0.1"),
        Case(
            (torch.randn(2, 8, generator=g, dtype=torch.float64), torch.ones(8, dtype=torch.float64), 1e-6), "float64"
        ),
        Case(((torch.randn(3, 2, 8, generator=g) * 500).half(), torch.randn(8, generator=g).half(), 1e-6),
             "float16 activations of a few hundred"),
        Case(((torch.randn(4, 16, generator=g) * 1e3).bfloat16(), torch.zeros(16, dtype=torch.bfloat16), 1e-5),
             "bfloat16"),
    ]  # fmt: skip


@hidden("residual-std")
def _residual_std() -> list[Case]:
    return [
        Case((48, 0.0), "branches that add nothing"),
        Case((12, 0.02), "GPT-2's init, unscaled"),
        Case((12, 0.02 / 24**0.5), "GPT-2's init scaled by 1 / sqrt(2 n_layers)"),
        Case((96, 1.0), "96 layers of std 1"),
        Case((3, 2.5), "wide branches"),
    ]


@hidden("dead-fraction")
def _dead() -> list[Case]:
    g = _g(12)
    relu = torch.relu(torch.randn(64, 32, generator=g) - 1.5)
    return [
        Case((torch.zeros(3, 5),), "all zeros: every unit dead"),
        Case((torch.ones(1, 4),), "one position, all alive"),
        Case((relu,), "ReLU outputs of shifted inputs"),
        Case((torch.randn(2, 16, 100, generator=g) - 2.5,), "(2, 16, 100), mostly negative"),
        Case((torch.randn(1, 1, 7, generator=g),), "one position: dead where <= 0"),
    ]


# == 08 · Pretraining ======================================================================


@hidden("lr-from-zero")
def _lr_from_zero() -> list[Case]:
    return [
        Case((9, 1e-3, 1e-4, 10, 110), "the last warmup step: 9/10 of the peak"),
        Case((10, 1e-3, 1e-4, 10, 110), "the end of the warmup: the peak"),
        Case((110, 1e-3, 1e-4, 10, 110), "the last step: min_lr"),
        Case((25, 6e-4, 0.0, 0, 100), "no warmup, a quarter of the way"),
        Case((0, 6e-4, 6e-5, 0, 100), "no warmup: the peak at step 0"),
        Case((333, 3e-4, 3e-5, 100, 1000), "a longer run"),
        Case((1, 1.0, 0.5, 4, 8), "round numbers"),
    ]


@hidden("adamw-first-step")
def _adamw() -> list[Case]:
    g = _g(13)
    return [
        Case((torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g) * 1e3, 1e-3, 0.1), "huge gradients"),
        Case((torch.randn(5, generator=g), torch.randn(5, generator=g) * 1e-6, 1e-2, 0.0), "tiny gradients"),
        Case((torch.zeros(3), torch.randn(3, generator=g), 0.5, 0.5), "zero weights: no decay to see"),
        Case((torch.full((3,), 10.0), torch.randn(3, generator=g) * 0.1, 0.1, 0.5), "large weights, strong decay"),
        Case((torch.randn(2, 2, generator=g, dtype=torch.float64), torch.randn(2, 2, generator=g, dtype=torch.float64),
              3e-4, 0.01), "float64"),
    ]  # fmt: skip


@hidden("accumulated-gradient")
def _accumulated_gradient() -> list[Case]:
    g = _g(14)
    return [
        Case(([torch.tensor([7.0])], [5]), "one micro-batch"),
        Case(([torch.randn(3, generator=g) for _ in range(4)], [8, 8, 8, 8]), "four equal micro-batches"),
        Case(([torch.randn(2, 3, generator=g) for _ in range(3)], [16, 16, 5]), "a short last one"),
        Case(([torch.randn(4, generator=g), torch.randn(4, generator=g)], [1, 100]), "sizes far apart"),
    ]


@hidden("smoothed-loss")
def _smoothed() -> list[Case]:
    g = _g(15)
    return [
        Case(([5.0], 0.99), "one value: itself"),
        Case(([], 0.9), "no values"),
        Case(((torch.linspace(4, 2, 50) + torch.randn(50, generator=g) * 0.3).tolist(), 0.9), "a noisy falling curve"),
        Case(([1.0, 0.0] * 10, 0.5), "alternating"),
        Case(([3.0, 1.0, 2.0], 0.999), "beta close to 1"),
    ]


# == 09 · Generating text ==================================================================


@hidden("top-p-min-keep")
def _top_p_min_keep() -> list[Case]:
    g = _g(16)
    return [
        Case((torch.randn(1, 6, generator=g) * 3, 0.9, 1), "min 1: the chapter's top-p"),
        Case((torch.randn(2, 8, generator=g) * 5, 0.1, 4), "a sharp distribution, min 4"),
        Case((torch.randn(4, 50, generator=g), 0.5, 10), "V = 50, min 10"),
        Case((torch.randn(3, 7, generator=g), 1.0, 2), "p = 1: every token"),
        Case((torch.randn(2, 5, generator=g) * 2, 0.6, 5), "min = V: every token"),
        Case((torch.randn(8, 1000, generator=g) * 4, 0.95, 3), "V = 1,000, p = 0.95"),
    ]


@hidden("min-p")
def _min_p() -> list[Case]:
    g = _g(17)
    return [
        Case((torch.randn(1, 6, generator=g), 0.0), "min_p 0: every token"),
        Case((torch.randn(2, 9, generator=g) * 4, 1.0), "min_p 1: the most likely only"),
        Case((torch.randn(5, 100, generator=g) * 3, 0.05), "V = 100, min_p 0.05"),
        Case((torch.tensor([[0.0, 0.0, 0.0], [10.0, 0.0, -10.0]]), 0.5), "a flat row and a sharp one"),
        Case((torch.randn(3, 1000, generator=g), 0.1), "V = 1,000, a flat distribution"),
    ]


@hidden("repetition-penalty")
def _penalty() -> list[Case]:
    g = _g(18)
    return [
        Case((torch.tensor([0.0, 1.0]), [0], 1.5), "a zero logit stays 0"),
        Case((torch.tensor([1.0, 2.0]), [], 1.3), "nothing generated yet"),
        Case((torch.randn(50, generator=g) * 3, torch.randint(0, 50, (40,), generator=g).tolist(), 1.3),
             "40 previous tokens, repeats among them"),
        Case((torch.tensor([-4.0, 4.0, -0.5]), [0, 1, 2, 1, 0], 1.0), "penalty 1: nothing changes"),
        Case((torch.randn(10, generator=g, dtype=torch.float64), [9, 9, 3], 2.5), "float64, penalty 2.5"),
    ]  # fmt: skip


@hidden("distinct-n")
def _distinct() -> list[Case]:
    g = _g(19)
    return [
        Case(([7], 1), "one token"),
        Case(([1, 2, 3], 3), "one trigram"),
        Case(([4, 4, 4, 4, 4, 4], 3), "a run: one distinct trigram of four"),
        Case((torch.randint(0, 5, (200,), generator=g).tolist(), 2), "200 tokens of 5 kinds, bigrams"),
        Case((torch.randint(0, 1000, (300,), generator=g).tolist(), 4), "300 tokens of 1,000 kinds, 4-grams"),
    ]


# == 10 · Fine-tuning for classification ===================================================


@hidden("mean-pooling")
def _mean_pooling() -> list[Case]:
    g = _g(17)
    return [
        Case((torch.randn(3, 4, 2, generator=g), torch.tensor([1, 1, 1])), "every text one token long"),
        Case((torch.randn(16, 32, 8, generator=g), torch.randint(1, 33, (16,), generator=g)), "16 random lengths"),
        Case((torch.randn(2, 3, 4, generator=g), torch.tensor([2, 3], dtype=torch.int32)), "int32 lengths"),
        Case((torch.randn(2, 5, 3, generator=g, dtype=torch.float64), torch.tensor([4, 2])), "float64"),
        Case((torch.full((1, 3, 2), 1e4), torch.tensor([3])), "large equal values"),
    ]


@hidden("wilson-interval")
def _wilson() -> list[Case]:
    return [
        Case((1, 1), "one text, right"),
        Case((0, 1), "one text, wrong"),
        Case((46, 65), "46 of 65"),
        Case((999, 1000), "999 of 1000"),
        Case((3, 7), "3 of 7"),
        Case((130, 130), "all 130 test texts"),
    ]


@hidden("last-real-token")
def _last_real() -> list[Case]:
    g = _g(31)
    f, lengths = torch.randn(6, 9, 4, generator=g), torch.tensor([9, 1, 4, 7, 2, 9])
    return [
        Case((f, lengths, "left"), "six left-padded rows"),
        Case((f, lengths, "right"), "six right-padded rows"),
        Case((f[:1], torch.tensor([3]), "right"), "one row"),
        Case((f[:3].double(), torch.tensor([2, 2, 2]), "left"), "float64, equal lengths"),
        Case((f[:2], torch.tensor([9, 5], dtype=torch.int32), "right"), "int32 lengths"),
    ]


@hidden("macro-f1")
def _macro_f1() -> list[Case]:
    g = _g(19)
    labels = torch.randint(0, 6, (130,), generator=g).tolist()
    noisy = [y if k % 3 else (y + 1) % 6 for k, y in enumerate(labels)]
    return [
        Case(([1] * 130, labels), "always one area, 130 texts"),
        Case((noisy, labels), "a third wrong, six classes"),
        Case(([3], [3]), "one text, right"),
        Case(([2], [5]), "one text, wrong: two classes at 0"),
        Case(([4, 4, 7, 7], [4, 7, 4, 7]), "class ids that do not start at 0"),
    ]


# == 11 · Instruction fine-tuning ==========================================================


@hidden("answer-loss")
def _answer_loss() -> list[Case]:
    g = _g(21)
    ragged = torch.randint(0, 50, (4, 9), generator=g)
    ragged[0, 5:], ragged[1, :3], ragged[2, 7:] = -100, -100, -100
    zeros = torch.tensor([[0, 0, -100], [-100, 0, -100]])
    return [
        Case((torch.randn(1, 1, 3, generator=g), torch.tensor([[2]])), "one target"),
        Case((torch.randn(4, 9, 50, generator=g), ragged), "padding and prompts in four rows"),
        Case((torch.randn(2, 3, 4, generator=g), zeros), "every kept target is token 0"),
        Case((torch.randn(3, 2, 5, generator=g), torch.tensor([[-100, -100], [1, 4], [-100, 3]])),
             "a row without any loss"),
        Case((torch.randn(2, 4, 8, generator=g) * 100, torch.tensor([[1, 2, 3, -100], [7, 6, 5, 4]])),
             "large logits: a stable log-softmax"),
        Case((torch.randn(2, 3, 6, generator=g, dtype=torch.float64), torch.tensor([[5, -100, 0], [1, 1, -100]])),
             "float64"),
    ]  # fmt: skip


@hidden("chat-targets")
def _chat_targets() -> list[Case]:
    U, A, E = 49152, 49153, 2
    return [
        Case(([U, 9, A, E], A, E), "an empty reply: only its end-of-text"),
        Case(([U, 9, 9, 9], A, E), "no reply at all"),
        Case(([A, 7, 8, E], A, E), "the conversation starts with the assistant"),
        Case(([7], A, E), "one token: no target"),
        Case(([U, 4, A, 5, E, U, 6, A, 7, 7, E, U, 8, A, 9], A, E), "three turns, the last cut off"),
        Case(([E, U, 3, A, 4, E, E], A, E), "end-of-text before and after"),
    ]


@hidden("loss-share")
def _loss_share() -> list[Case]:
    g = _g(22)
    lengths = torch.randint(20, 128, (16,), generator=g).tolist()
    prompts = [int(n * 0.7) for n in lengths]
    return [
        Case(([9], [4], True), "one row"),
        Case(([9], [4], False), "one row, nothing masked: every target"),
        Case(([2, 2], [1, 1], True), "one-token prompts, one-token answers"),
        Case((lengths, prompts, False), "16 random lengths"),
        Case((lengths, prompts, True), "16 random lengths, prompts masked"),
        Case(([128, 10, 10, 10], [100, 5, 5, 5], True), "one long row pads the others"),
    ]


@hidden("bradley-terry")
def _bradley_terry() -> list[Case]:
    g = _g(23)
    counts = torch.randint(1, 30, (5, 5), generator=g).float().fill_diagonal_(0)
    return [
        Case((torch.tensor([[0.0, 1.0], [99.0, 0.0]]),), "B won 99 of 100"),
        Case((torch.tensor([[0.0, 5.0, 5.0], [5.0, 0.0, 5.0], [5.0, 5.0, 0.0]]),), "three equals"),
        Case((counts,), "five models, every pair met"),
        Case((torch.tensor([[0.0, 2.5, 0.0], [1.5, 0.0, 3.0], [1.0, 1.0, 0.0]]),), "ties counted half"),
        Case(
            (torch.tensor([[0, 8, 0, 1], [2, 0, 6, 0], [0, 4, 0, 7], [3, 0, 3, 0]], dtype=torch.float64),),
            "four models in a ring, float64",
        ),
    ]


# == 12 · Prompting, inference-time compute, and limits ====================================


@hidden("pass-at-k")
def _pass_at_k() -> list[Case]:
    return [
        Case((1, 1, 1), "one sample, right"),
        Case((1, 0, 1), "one sample, wrong"),
        Case((200, 3, 100), "200 samples, 3 right, k = 100"),
        Case((100, 50, 1), "half right, k = 1"),
        Case((20, 1, 20), "k = n: right if any is"),
        Case((50, 10, 5), "Chen et al.'s sizes"),
    ]


@hidden("mcnemar-exact")
def _mcnemar() -> list[Case]:
    g = _g(24)
    a = (torch.rand(300, generator=g) < 0.6).int().tolist()
    b = [x if k % 5 else 1 - x for k, x in enumerate(a)]
    return [
        Case(([0], [1]), "one item, one disagreement"),
        Case(([1, 0] * 10 + [0] * 5, [0, 0] * 10 + [1] * 5), "10 : 5"),
        Case(([0] * 12, [1] * 12), "12 : 0 for B"),
        Case(([1] * 60 + [0] * 40, [0] * 60 + [1] * 40), "60 : 40, every item disagrees"),
        Case((a, b), "300 items, one in five flipped"),
        Case(((1, 1, 0), (1, 1, 0)), "tuples, no disagreement"),
    ]


@hidden("holm-adjusted")
def _holm() -> list[Case]:
    return [
        Case(([],), "no p-values"),
        Case(([0.3],), "one p-value: itself"),
        Case(([0.055, 0.26, 0.23, 0.43, 0.25, 1.0, 1.0],), "seven comparisons, as in the chapter"),
        Case(([0.04, 0.01, 0.04, 0.03, 0.01],), "ties and a reversal"),
        Case(([0.0, 1e-9, 0.9],), "zero and tiny p-values"),
        Case(([0.2, 0.1, 0.3, 0.4],), "every product above the last"),
    ]


@hidden("majority-right")
def _majority_right() -> list[Case]:
    return [
        Case((0.0, 5), "never right"),
        Case((1.0, 7), "always right"),
        Case((0.9, 25), "a strong model, 25 votes"),
        Case((0.44, 5), "greedy's rate in the chapter, five votes"),
        Case((0.51, 101), "barely above half, 101 votes"),
        Case((0.3, 1), "one vote"),
    ]


# == 13 · Learning from preferences and rewards ============================================


@hidden("zero-contrast-share")
def _zero_contrast() -> list[Case]:
    g = _g(20)
    return [
        Case(([0.3], 1), "groups of one answer: never any contrast"),
        Case(([0.177] * 10, 8), "ten problems at the pilot's sampled pass@1"),
        Case((torch.rand(519, generator=g).tolist(), 8), "519 problems, rates anywhere in [0, 1]"),
        Case(([0.0, 0.0, 0.5], 16), "two problems never solved, groups of 16"),
        Case(([0.99, 0.01], 64), "nearly always and nearly never right, groups of 64"),
    ]


@hidden("answer-logprob")
def _answer_logprob() -> list[Case]:
    g = _g(21)
    return [
        Case((torch.randn(2, 3, generator=g), torch.tensor([2, 0]), 1), "T = 2: one prompt token, one answer token"),
        Case((torch.randn(10, 7, generator=g), torch.randint(0, 7, (10,), generator=g), 9), "an answer of one token"),
        Case((torch.randn(5, 4, generator=g) * 1e4, torch.randint(0, 4, (5,), generator=g), 2),
             "huge logits: log(softmax) would give -inf"),
        Case((torch.randn(8, 6, generator=g, dtype=torch.float64), torch.randint(0, 6, (8,), generator=g), 3),
             "float64"),
        Case((torch.randn(20, 1000, generator=g), torch.randint(0, 1000, (20,), generator=g), 1),
             "V = 1,000, every token after the first"),
    ]  # fmt: skip


@hidden("ipo-loss")
def _ipo() -> list[Case]:
    g = _g(22)

    def logps(n, scale=10.0):
        return -torch.rand(n, generator=g) * scale

    ref_c, ref_r = logps(16), logps(16)
    return [
        Case((logps(16), logps(16), ref_c, ref_r, 0.1), "16 pairs, beta 0.1"),
        Case((ref_c + 2.5, ref_r - 2.5, ref_c, ref_r, 0.1), "every pair exactly at the margin 5: loss 0"),
        Case((ref_c + 100, ref_r - 100, ref_c, ref_r, 1.0), "margins far beyond the target: a large loss"),
        Case((torch.tensor([-3.0, -8.0]), torch.tensor([-5.0, -2.0]), torch.tensor([-4.0, -4.0]),
              torch.tensor([-4.0, -6.0]), 2.0), "two pairs, beta 2"),
        Case((logps(8, 50).double(), logps(8, 50).double(), logps(8, 50).double(), logps(8, 50).double(), 0.05),
             "float64, beta 0.05"),
    ]  # fmt: skip


@hidden("addition-checker")
def _addition_checker() -> list[Case]:
    return [
        Case(("0+0=", "0"), "zero"),
        Case(("50+50=", "001"), "100 reversed: two zeros first"),
        Case(("50+50=", "1"), "100 reversed, its zeros dropped: wrong"),
        Case(("12+34=", "64\n"), "right, a newline after it"),
        Case(("12+34=", "6 4"), "a space inside: wrong"),
        Case(("12+34=", "46"), "the usual order: wrong"),
        Case(("12+34=", "6464"), "a hedge: wrong"),
        Case(("12+34=", "064"), "a leading zero: wrong"),
        Case(("12+34=", "-64"), "a sign: wrong"),
        Case(("12+34=", ""), "nothing: wrong"),
        Case(("99+1=", "001"), "a carry through every place"),
    ]


# == 14 · Fast inference on a laptop =======================================================


@hidden("int8-zero-point")
def _zero_point() -> list[Case]:
    g = _g(24)
    return [
        Case((torch.randn(64, 96, generator=g) * 0.05,), "a (64, 96) matrix"),
        Case((torch.relu(torch.randn(6, 10, generator=g)) + 0.1,), "every weight positive: the zero point is 0"),
        Case((-torch.rand(3, 5, generator=g) - 0.5,), "every weight negative: the zero point is 255"),
        Case((torch.randn(8, 6, generator=g).T.contiguous()[:, :5] * 3,), "a slice of a transposed matrix"),
        Case((torch.zeros(3, 4),), "all zeros"),
        Case((torch.randn(5, 7, generator=g, dtype=torch.float64),), "float64 weights: float32 scales"),
        Case((torch.tensor([[0.0, 0.0, 2.0], [1e-6, -3e-6, 2e-6], [1e5, -2.5e4, 0.0]]),), "one weight; tiny; huge"),
    ]


@hidden("int4-unpack")
def _unpack() -> list[Case]:
    g = _g(25)
    return [
        Case((torch.tensor([[0x9C]], dtype=torch.uint8),), "one byte"),
        Case((torch.full((2, 3), 0xFF, dtype=torch.uint8),), "every value 15"),
        Case((torch.zeros(4, 2, dtype=torch.uint8),), "every value 0"),
        Case((torch.randint(0, 256, (64, 48), generator=g).to(torch.uint8),), "a (64, 48) matrix of bytes"),
        Case((torch.randint(0, 256, (8, 6), generator=g).to(torch.uint8).T,), "a transposed (6, 8): not contiguous"),
    ]


@hidden("draft-acceptance")
def _acceptance() -> list[Case]:
    g = _g(26)

    def rows(*shape):
        return torch.softmax(torch.randn(*shape, generator=g) * 2, dim=-1)

    return [
        Case((torch.tensor([0.2, 0.3, 0.5]), torch.tensor([0.0, 0.0, 1.0])), "a one-hot draft (prompt lookup): p(x)"),
        Case((torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])), "disjoint: never accepted"),
        Case((rows(6, 10), rows(6, 10)), "six rows of ten tokens"),
        Case((rows(2, 3, 5), rows(2, 3, 5)), "a (2, 3) batch of rows"),
        Case((rows(4, 50).double(), rows(4, 50).double()), "float64"),
        Case((torch.tensor([0.1, 0.4, 0.5]), torch.tensor([0.0, 0.6, 0.4])), "q is 0 where p is not"),
        Case((torch.tensor([0.0, 0.3, 0.7]), torch.tensor([0.0, 1.0, 0.0])), "one-hot, a token neither gives"),
    ]


@hidden("residual-rows")
def _residual_rows() -> list[Case]:
    g = _g(27)

    def rows(*shape):
        return torch.softmax(torch.randn(*shape, generator=g) * 2, dim=-1)

    same, equal = rows(2, 3, 4), rows(3, 7).double()
    other = same.clone()
    other[1, 2] = rows(4)
    return [
        Case((rows(6, 10), rows(6, 10)), "six rows of ten tokens"),
        Case((torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])), "disjoint: all of p"),
        Case((torch.tensor([0.2, 0.3, 0.5]), torch.tensor([0.0, 0.0, 1.0])), "a one-hot draft (prompt lookup)"),
        Case((same, other), "a (2, 3) batch: one row differs, five have q == p"),
        Case((rows(2, 3).double(), rows(2, 3).double()), "float64"),
        Case((equal, equal.clone()), "float64, q == p in every row"),
        Case((rows(4, 12), rows(4, 9)), "a draft vocabulary of 9 for a target of 12"),
        Case((torch.tensor([0.2, 0.8]), torch.tensor([1.0])), "a draft of one token"),
    ]


# == 15 · What the model learned ===========================================================


@hidden("uniform-previous-token-score")
def _uniform_score() -> list[Case]:
    return [Case((T,), f"T = {T}") for T in (4, 10, 33, 256, 1024)]


def _causal_rows(g: torch.Generator, L: int, B: int, H: int, T: int) -> list[torch.Tensor]:
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return [torch.randn(B, H, T, T, generator=g).masked_fill(~mask, float("-inf")).softmax(-1) for _ in range(L)]


@hidden("duplicate-token-scores")
def _duplicate() -> list[Case]:
    g = _g(25)
    return [
        Case((_causal_rows(g, 1, 2, 2, 8), 4), "a batch of two, T = 2 * period"),
        Case((_causal_rows(g, 3, 1, 4, 13), 5), "three layers, three tokens before the copies"),
        Case((_causal_rows(g, 2, 3, 1, 2), 1), "period 1: each token its own copy"),
        Case((_causal_rows(g, 1, 1, 3, 21), 10), "one token before two copies of 10"),
    ]


@hidden("mean-ablate")
def _mean_ablate() -> list[Case]:
    g = _g(26)
    return [
        Case((torch.randn(2, 3, 4, 5, generator=g), 0), "head 0"),
        Case((torch.randn(2, 3, 4, 5, generator=g), 3), "the last head"),
        Case((torch.randn(5, 1, 3, 2, generator=g), 1), "one position, five sequences"),
        Case((torch.randn(1, 1, 1, 6, generator=g), 0), "one head, one position: z itself"),
        Case((torch.randn(2, 4, 2, 3, generator=g).double(), 1), "float64"),
    ]


@hidden("settled-fraction")
def _settled() -> list[Case]:
    g = _g(27)
    return [
        Case((torch.randn(6, 13, 50, generator=g), torch.randint(50, (6,), generator=g), 5), "6 prompts, top 5"),
        Case((torch.arange(12.0).view(1, 3, 4), torch.tensor([3]), 1), "always the largest: every layer"),
        Case((torch.arange(12.0).view(1, 3, 4).flip(-1), torch.tensor([3]), 1), "always the smallest: none"),
        Case((torch.randn(2, 31, 200, generator=g), torch.tensor([0, 5]), 200), "top 200 of 200: all"),
        Case((torch.zeros(3, 4, 3), torch.tensor([2, 0, 1]), 1), "every logit tied: all"),
    ]
