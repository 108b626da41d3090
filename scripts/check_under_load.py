"""Run every notebook under nbval several times in a row while another program keeps both
cores busy: what a student's laptop looks like with a browser and an IDE open.

    .venv/bin/python scripts/check_under_load.py            # 3 runs, CI budget, 2-thread load
    .venv/bin/python scripts/check_under_load.py --runs 1 --load-threads 4

The load is a second Python process multiplying 512 x 512 matrices on ``--load-threads``
threads without pause. Each run is the test command's notebook part (``pytest notebooks``,
strict comparison of stored outputs, 2 threads, CI budget, the CPU). Nothing a notebook
asserts may depend on the machine's speed or load, so every run must pass; the script exits
with the number of failed runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOAD = """
import torch
torch.set_num_threads({threads})
a = torch.randn(512, 512)
while True:
    a = torch.tanh(a @ a)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--load-threads", type=int, default=2)
    parser.add_argument("--budget", choices=("ci", "full"), default="ci")
    args, pytest_args = parser.parse_known_args(argv)
    env = dict(os.environ, COURSE_BUDGET=args.budget, COURSE_THREADS="2", PYTHONHASHSEED="0", COURSE_DEVICE="cpu")
    load = subprocess.Popen([sys.executable, "-c", LOAD.format(threads=args.load_threads)])
    failed = 0
    try:
        for run in range(1, args.runs + 1):
            started = time.perf_counter()
            result = subprocess.run(
                [sys.executable, "-m", "pytest", "notebooks", "-q", "-p", "no:randomly", *pytest_args],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-500:]
            print(
                f"run {run}/{args.runs} beside a {args.load_threads}-thread load: "
                f"{'passed' if result.returncode == 0 else 'FAILED'} in {time.perf_counter() - started:.0f} s "
                f"({summary})",
                flush=True,
            )
            if result.returncode != 0:
                failed += 1
                print(result.stdout[-4000:], flush=True)
    finally:
        load.kill()
        load.wait()
    return failed


if __name__ == "__main__":
    sys.exit(main())
