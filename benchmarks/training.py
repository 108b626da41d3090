"""Training throughput (tokens/s) of the course GPT against llms-from-scratch's GPTModel.

    .venv/bin/pip install --no-deps llms-from-scratch==1.0.19   # the reference, benchmark only
    .venv/bin/python benchmarks/training.py [--layers 6 --heads 6 --d-model 384 --context 256 --batch 8]

Same config (learned positions, LayerNorm, GELU, dropout 0, biases; character vocabulary of
the offline corpus), same weights (copied, outputs checked equal), same batches, AdamW with
the same settings and no clipping: one ``Trainer.train_step`` of the course (in float32, and
in its default ``precision="auto"``, bfloat16 where the CPU has it) against one step of the
book's ``train_model_simple`` loop (forward, loss, backward, AdamW step), alternating rounds.
Goal: the course GPT at least 1.5x the reference's tokens/s.
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F
from reference import alternate, book_model, copy_weights

from course_lib.data import stdlib_docs_text
from course_lib.model import GPT, GPTConfig
from course_lib.tokenization import CharTokenizer
from course_lib.training import TrainConfig, Trainer, WindowBatches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    text = stdlib_docs_text()
    ids = torch.tensor(CharTokenizer.from_text(text).encode(text))
    config = GPTConfig(
        vocab_size=int(ids.max()) + 1,
        context_length=args.context,
        n_layers=args.layers,
        n_heads=args.heads,
        d_model=args.d_model,
        tie_weights=False,
    )
    torch.manual_seed(0)
    course = GPT(config)
    book = book_model(config)
    copy_weights(course, book)
    x, _ = WindowBatches(ids, args.context, args.batch, seed=0)[0]
    with torch.no_grad():
        torch.testing.assert_close(course(x), book(x), atol=1e-4, rtol=1e-4)  # the same function

    def course_trainer(precision: str) -> Trainer:
        model = copy.deepcopy(course)
        config = TrainConfig(
            steps=10_000,
            batch_size=args.batch,
            context_length=args.context,
            lr=4e-4,
            weight_decay=0.1,
            beta2=0.999,
            grad_clip=None,
            precision=precision,
        )
        return Trainer(model, ids, ids, config, progress=False)

    book_optimizer = torch.optim.AdamW(book.parameters(), lr=4e-4, weight_decay=0.1)  # as in the book
    book_batches = WindowBatches(ids, args.context, args.batch, seed=0)  # the batches the trainers see
    book_step_count = [0]

    def book_step() -> None:  # the book's train_model_simple, one step
        x, y = book_batches[book_step_count[0]]
        book_step_count[0] += 1
        loss = F.cross_entropy(book(x).flatten(0, 1), y.flatten())
        book_optimizer.zero_grad()
        loss.backward()
        book_optimizer.step()

    fp32, auto = course_trainer("fp32"), course_trainer("auto")
    auto_name = f"course GPT, auto ({'bf16' if auto.dtype else 'fp32'} here)"
    median = alternate(
        {"course GPT, fp32": fp32.train_step, auto_name: auto.train_step, "llms-from-scratch": book_step}, args.rounds
    )
    tokens = args.batch * args.context
    print(
        f"{args.layers} layers, {args.heads} heads, width {args.d_model}, context {args.context}, batch {args.batch}, "
        f"vocab {config.vocab_size}, {args.threads} threads, median of {args.rounds} steps"
    )
    for name, t in median.items():
        print(f"  {name:<32} {t * 1000:7.0f} ms/step  {tokens / t:9,.0f} tokens/s")
    for name in ("course GPT, fp32", auto_name):
        print(f"{name} vs llms-from-scratch: {median['llms-from-scratch'] / median[name]:.2f}x the tokens/s")


if __name__ == "__main__":
    main()
