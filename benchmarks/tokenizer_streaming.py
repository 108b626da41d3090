"""Streaming encoding: course_lib's ``encode_iterable`` against tiktoken's GPT-2 encoder.

    .venv/bin/python benchmarks/tokenizer_streaming.py [--megabytes 8]

The text is the offline corpus repeated to the size asked for, fed line by line to
``BPETokenizer.encode_iterable`` (GPT-2's vocabulary and merges, recovered from the shipped
ranks) and, for comparison, to tiktoken's Rust encoder (``encode_ordinary`` per line, then
the whole text at once). The ids are checked equal first; the script prints MB/s and the
ratio. Pure Python is expected to be several times slower than Rust: the goal is bounded
memory with exactly tiktoken's ids. The lines are in memory already, so the peak traced
memory is what encoding adds.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from course_lib.data import stdlib_docs_text
from course_lib.tokenization import gpt2_encoding, gpt2_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=8.0)
    args = parser.parse_args()
    corpus = stdlib_docs_text()
    text = corpus * max(1, round(args.megabytes * 2**20 / len(corpus.encode("utf-8"))))
    size_mb = len(text.encode("utf-8")) / 2**20
    lines = text.splitlines(keepends=True)
    ours, reference = gpt2_tokenizer(), gpt2_encoding()

    sample = corpus[:200_000]
    assert list(ours.encode_iterable(sample.splitlines(keepends=True))) == reference.encode_ordinary(sample)

    start = time.perf_counter()
    count = sum(1 for _ in ours.encode_iterable(lines))
    course_s = time.perf_counter() - start
    tracemalloc.start()  # a second pass for memory: tracing slows Python down several times
    sum(1 for _ in ours.encode_iterable(lines))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    start = time.perf_counter()
    for line in lines:  # line by line: not the same ids (a pre-token may span a line end), the same work
        reference.encode_ordinary(line)
    tik_lines_s = time.perf_counter() - start
    start = time.perf_counter()
    whole = reference.encode_ordinary(text)
    tik_whole_s = time.perf_counter() - start
    assert count == len(whole)  # encode_iterable gives the ids of the whole text, streamed

    print(
        f"{size_mb:.1f} MB of text ({len(lines):,} lines), {count:,} tokens (as many as tiktoken on the whole text; "
        "identical ids checked on a 200,000-character sample)"
    )
    print(
        f"  course_lib encode_iterable (pure Python): {size_mb / course_s:6.2f} MB/s, "
        f"peak traced memory {peak / 1024:.0f} kB"
    )
    print(f"  tiktoken, line by line:                   {size_mb / tik_lines_s:6.2f} MB/s")
    print(f"  tiktoken, whole text:                     {size_mb / tik_whole_s:6.2f} MB/s")
    print(f"course_lib vs tiktoken line by line: {tik_lines_s / course_s:.2f}x the speed")


if __name__ == "__main__":
    main()
