"""BPE training: incremental pair counts vs the naive "recount every pair" loop.

    .venv/bin/python benchmarks/bpe_training.py [--merges 512]

Both run on the offline corpus in this process, alternating, and must learn identical merges.
Prints each time and the speed-up ratio (goal: at least 20x).
"""

from __future__ import annotations

import argparse
import time

from course_lib.data import load_corpus
from course_lib.tokenization import train_bpe, train_bpe_naive


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--merges", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3, help="fast runs (the naive one runs once)")
    args = parser.parse_args()
    text = load_corpus()
    vocab_size = 256 + args.merges
    fast_times = []
    fast, t = timed(train_bpe, text, vocab_size)
    fast_times.append(t)
    naive, naive_time = timed(train_bpe_naive, text, vocab_size)
    for _ in range(args.repeats - 1):
        _, t = timed(train_bpe, text, vocab_size)
        fast_times.append(t)
    assert fast.merges == naive.merges, "the two trainers disagree"
    best = min(fast_times)
    print(f"corpus: {len(text):,} characters, {args.merges} merges, identical merges: yes")
    print(f"naive (recount every pair each merge): {naive_time:8.2f} s")
    print(f"incremental (course_lib.train_bpe):    {best:8.2f} s (best of {len(fast_times)})")
    print(f"speed-up: {naive_time / best:.0f}x")


if __name__ == "__main__":
    main()
