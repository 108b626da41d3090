"""Run the notebooks under each of PyTorch's CPU kernel paths this machine has, and report per notebook.

    .venv/bin/python scripts/check_portability.py                       # every notebook, CI budget
    .venv/bin/python scripts/check_portability.py notebooks/13_*.ipynb --budget full

A student's CPU may lack AVX-512 (most laptops) or even AVX2 (older ones): PyTorch then runs other
float32 kernels, which round the last bits of a sum differently. ``ATEN_CPU_CAPABILITY`` makes this
machine run the kernels of such a CPU (``default``: neither AVX2 nor AVX-512; ``avx2``; ``avx512``),
so one machine can check what students on other CPUs will see. Each path is the test command's
notebook part: nbval, strict comparison of the stored outputs, 2 threads, the CPU. Every path must
pass: a cell whose output moves with the kernels is a design flaw (chapter 13 once stopped its
training at a fixed step on the steep part of a loss cliff), unless it is tagged
``nbval-ignore-output`` and the assertions after it hold on every path.

The table lists, per notebook and path, ``passed`` or the cells that failed; the script exits with
the number of failing (notebook, path) pairs. The unit tests cover the most sensitive part
(chapter 13's start, tests/test_rl.py) on every path in seconds; this script is the whole check.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from course_lib.runtime import KERNELS_ENV, cpu_kernel_paths  # noqa: E402

LOGS = ROOT / "runs" / "portability"  # ignored by git
FAILED_CELL = re.compile(r"^FAILED \S+::(Cell \d+)", re.MULTILINE)


def run(notebook: Path, path: str, budget: str) -> tuple[str, float]:
    """``(report, seconds)`` of one notebook under one kernel path."""
    env = dict(os.environ, COURSE_BUDGET=budget, COURSE_THREADS="2", PYTHONHASHSEED="0", COURSE_DEVICE="cpu")
    env[KERNELS_ENV] = path
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(notebook), "-q", "-p", "no:randomly", "-p", "no:xdist"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if result.returncode == 0:
        return "passed", seconds
    cells = FAILED_CELL.findall(result.stdout)
    errors = [line.strip() for line in result.stdout.splitlines() if "Error" in line and "Traceback" not in line]
    detail = "; ".join(dict.fromkeys(errors))[:600]
    log = LOGS / f"{notebook.stem}-{path}-{budget}.log"  # the whole report, to read the cause
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + result.stderr)
    where = f" (pytest's report: {log.relative_to(ROOT)})"
    return ("FAILED " + ", ".join(cells) if cells else "FAILED") + (f" [{detail}]" if detail else "") + where, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in notebooks/")
    parser.add_argument("--budget", choices=("ci", "full"), default="ci")
    parser.add_argument("--paths", nargs="*", help="kernel paths to run (default: every one this CPU has)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    paths = args.paths or cpu_kernel_paths()
    print(f"kernel paths this CPU runs: {', '.join(paths)}; budget {args.budget}", flush=True)
    failures = 0
    print(f"{'notebook':42} {'kernels':8} result", flush=True)
    for notebook in notebooks:
        for path in paths:
            report, seconds = run(notebook, path, args.budget)
            failures += report != "passed"
            print(f"{notebook.name:42} {path:8} {report} ({seconds:.0f} s)", flush=True)
    print(f"{failures} failing (notebook, kernel path) pairs", flush=True)
    return failures


if __name__ == "__main__":
    sys.exit(main())
