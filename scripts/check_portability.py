"""Run the course as it runs on other CPUs, and report per notebook (or the whole test command).

    .venv/bin/python scripts/check_portability.py                       # every notebook, laptop and default
    .venv/bin/python scripts/check_portability.py notebooks/13_*.ipynb --budget full --profiles native laptop
    .venv/bin/python scripts/check_portability.py --suite --profiles laptop   # `course.py test` as a laptop runs it

Most students' laptops have AVX2 and no AVX-512; older CPUs not even AVX2; a Mac has neither oneDNN nor
fbgemm. Each library that picks its own kernels computes other last bits on such a CPU, and some of
those kernels are missing there. A profile (``runtime.CPU_PROFILES``) makes this machine behave as such a
CPU by holding every library back: ``laptop`` sets ``ATEN_CPU_CAPABILITY=avx2`` and oneDNN's, MKL's and
fbgemm's own limits to AVX2 (``ATEN_CPU_CAPABILITY`` alone leaves those three on AVX-512); ``default``
holds ATen to its plain kernels and oneDNN and MKL to SSE4. A profile can only take away: the profiles
offered are those this CPU's hardware can act as (``runtime.cpu_profiles``). A Mac is simulated in the
unit tests instead (tests/test_quantization.py patches the probes).

Each notebook run is the test command's notebook part: nbval, strict comparison of the stored outputs,
2 threads, the CPU. Every run must pass: a cell whose output moves with the kernels is a design flaw
(chapter 13 once stopped its training at a fixed step on the steep part of a loss cliff), unless it is
tagged ``nbval-ignore-output`` and the assertions after it hold on every CPU. ``--suite`` runs the whole
test command instead (unit tests and notebooks, as CI does) under each profile and reports its time.

The script exits with the number of failing runs; the reports of failures land in runs/portability/.
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
from course_lib.runtime import CPU_PROFILES, cpu_profiles  # noqa: E402

LOGS = ROOT / "runs" / "portability"  # ignored by git
FAILED_CELL = re.compile(r"^FAILED \S+::(Cell \d+)", re.MULTILINE)
FAILED_TEST = re.compile(r"^FAILED (\S+)", re.MULTILINE)


def profile_env(profile: str, budget: str) -> dict[str, str]:
    """The environment of a run: this process's, the profile's limits, and the test command's settings."""
    env = dict(os.environ, COURSE_BUDGET=budget, COURSE_THREADS="2", PYTHONHASHSEED="0", COURSE_DEVICE="cpu")
    return {**env, **CPU_PROFILES[profile]}


def report(result: subprocess.CompletedProcess, name: str, failed: re.Pattern) -> str:
    """``passed``, or what failed, the errors' lines and where the whole report was written."""
    if result.returncode == 0:
        return "passed"
    items = failed.findall(result.stdout)
    errors = [line.strip() for line in result.stdout.splitlines() if "Error" in line and "Traceback" not in line]
    detail = "; ".join(dict.fromkeys(errors))[:600]
    log = LOGS / f"{name}.log"  # the whole report, to read the cause
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + result.stderr)
    where = f" (pytest's report: {log.relative_to(ROOT)})"
    return ("FAILED " + ", ".join(items) if items else "FAILED") + (f" [{detail}]" if detail else "") + where


def run_notebook(notebook: Path, profile: str, budget: str) -> tuple[str, float]:
    """``(report, seconds)`` of one notebook under one profile."""
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(notebook), "-q", "-p", "no:randomly", "-p", "no:xdist"],
        cwd=ROOT, env=profile_env(profile, budget), capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    return report(result, f"{notebook.stem}-{profile}-{budget}", FAILED_CELL), seconds


def run_suite(profile: str) -> tuple[str, float]:
    """``(report, seconds)`` of the whole test command (``course.py test``) under one profile."""
    started = time.perf_counter()
    env = {**os.environ, **CPU_PROFILES[profile]}
    command = [sys.executable, str(ROOT / "course.py"), "test", "--", "-q", "-p", "no:randomly"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    return report(result, f"suite-{profile}", FAILED_TEST), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in notebooks/")
    parser.add_argument("--budget", choices=("ci", "full"), default="ci")
    parser.add_argument("--profiles", nargs="*", choices=list(CPU_PROFILES),
                        help="CPU profiles to run (default: each but native that this CPU can act as)")  # fmt: skip
    parser.add_argument("--suite", action="store_true", help="run the whole test command under each profile")
    args = parser.parse_args(argv)
    offered = cpu_profiles()
    profiles = args.profiles or [p for p in offered if p != "native"]
    lacking = [p for p in profiles if p not in offered]
    if lacking:
        parser.error(f"this CPU cannot act as {', '.join(lacking)}: it offers {', '.join(offered)}")
    for profile in profiles:
        limits = " ".join(f"{k}={v}" for k, v in CPU_PROFILES[profile].items()) or "no limits"
        print(f"{profile}: {limits}", flush=True)
    failures = 0
    if args.suite:
        for profile in profiles:
            result, seconds = run_suite(profile)
            failures += result != "passed"
            print(f"course.py test under {profile}: {result} ({seconds:.0f} s)", flush=True)
        return failures
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    print(f"budget {args.budget}", flush=True)
    print(f"{'notebook':42} {'profile':8} result", flush=True)
    for notebook in notebooks:
        for profile in profiles:
            result, seconds = run_notebook(notebook, profile, args.budget)
            failures += result != "passed"
            print(f"{notebook.name:42} {profile:8} {result} ({seconds:.0f} s)", flush=True)
    print(f"{failures} failing (notebook, profile) pairs", flush=True)
    return failures


if __name__ == "__main__":
    sys.exit(main())
