"""The grader: one student's notebook run in the sandbox, replayed without a cell that killed its
process, and scored; a class graded several notebooks at a time, each written down when it is done.

How the parts fit, and what a bad notebook costs, is told in :mod:`course_lib.grading`.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from ..exercises import EXERCISES, MAX_RETURNED
from .gradebook import Gradebook, NotebookReport
from .sandbox import ProtocolError, Sandbox, isolation
from .scoring import Answers, CaseSet, Grade, Interruption, load_cases, read_result, score, unfinished
from .submissions import COURSE_NOTEBOOKS, CourseNotebook, Plan, course_notebooks, identify, plan, read_notebook

GRACE_S = 10.0  # the longest a process may ignore its own interrupt before it is killed (half the timeout if less)
MAX_RESTARTS = 4  # processes killed per notebook before the rest of it is given up
STARTUP_S = 120.0  # starting Python, torch and IPython in the student's process
FILE_LIMIT = 64 << 20  # bytes of any file the student's process writes
MAX_PAYLOAD = 16 * MAX_RETURNED + (1 << 20)  # bytes of the largest value sent back (complex128), with room
ISOLATION = {  # what the sandbox's isolation means for a class (INSTRUCTORS.md says more)
    "namespaces": "nothing a student's code does to processes reaches the grader or another student",
    "sessions": "a student's code that signals the grader by its process id, or every process, can stop it",
}


class Cancelled(Exception):
    """The grading run is stopping (Ctrl-C or an error elsewhere): this notebook is not recorded."""


def child_environment(threads: int, home: Path) -> dict[str, str]:
    """The student's process's environment: the CI budget on the CPU, every cache inside its folder."""
    keep = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k in keep}
    for name in ("tmp", "cache", "mpl"):
        (home / name).mkdir(exist_ok=True)
    env.update(
        COURSE_BUDGET="ci",
        COURSE_DEVICE="cpu",
        COURSE_THREADS=str(threads),
        COURSE_PROGRESS="0",
        OMP_NUM_THREADS=str(threads),
        PYTHONHASHSEED="0",
        PYTHONDONTWRITEBYTECODE="1",
        MPLBACKEND="Agg",
        HOME=str(home),
        TMPDIR=str(home / "tmp"),
        XDG_CACHE_HOME=str(home / "cache"),
        MPLCONFIGDIR=str(home / "mpl"),
        COURSE_DATA_DIR=str(home / "cache" / "course_lib"),
    )
    return env


def _index(value: Any, size: int) -> int:
    """``value`` if it is an index into ``size`` items; ValueError otherwise (a report not ours)."""
    if type(value) is not int or not 0 <= value < size:
        raise ValueError(f"not an index below {size}: {value!r}")
    return value


class _Notebook:
    """One notebook being graded: what to run, and what is settled so far across its processes."""

    def __init__(self, label: str, steps: Plan, answers: Answers, timeout: float, threads: int, memory_gb: float):
        self.label, self.steps, self.answers = label, steps, answers
        self.timeout, self.threads, self.memory_gb = timeout, threads, memory_gb
        self.names = [n for point in steps.points.values() for n, _ in point]
        self.grades: dict[str, Grade] = {}
        self.notes: list[str] = []
        self.skip: set[int] = set()
        # what the process is running: ("cell", position) or ("exercise", name); None between steps
        self.step: tuple[str, Any] | None = None
        self.results: dict[int, dict] = {}
        self.reports_left = 0

    def attempt(self, cancel: threading.Event | None) -> bool:
        """One student's process over the notebook; True when it reached the end. Otherwise the cell or
        exercise it was running is settled (skipped, or graded ``timeout``/``error``) and False returned."""
        work = Path(tempfile.mkdtemp(prefix="grading-"))
        job = {
            "cells": self.steps.cells,
            "points": self.steps.points,
            "inputs": {n: self.answers.inputs[n] for n in self.names if n not in self.grades},
            "bans": {n: list(EXERCISES[n].bans) for n in self.names},
            "skip": sorted(self.skip),
            "done": sorted(self.grades),
            "timeout": float(self.timeout),
        }
        buffer = io.BytesIO()
        torch.save(job, buffer)
        box = Sandbox(
            [sys.executable, "-m", "course_lib.grading.student_process"],
            cwd=work,
            env=child_environment(self.threads, work),
            stdin=buffer.getvalue(),
            memory_bytes=int(self.memory_gb * 2**30),
            file_bytes=FILE_LIMIT,
            max_payload=MAX_PAYLOAD,
        )
        self.step, self.results = None, {}
        # more reports than cells, exercises and cases would keep resetting the time limit: refused
        self.reports_left = 2 * len(self.steps.cells) + sum(3 + len(v) for v in job["inputs"].values()) + 1
        deadline = time.monotonic() + STARTUP_S + self.timeout
        grace = min(GRACE_S, self.timeout / 2)
        try:
            while True:
                if cancel is not None and cancel.is_set():
                    raise Cancelled
                left = deadline - time.monotonic()
                if left <= 0:
                    stop = Interruption("timeout", f"it ran past {self.timeout:g} s and did not stop when interrupted")
                    break
                try:
                    frame = box.receive(min(left, 1.0))
                except TimeoutError:
                    continue
                except ProtocolError as err:
                    stop = Interruption("error", f"the notebook's process sent a report the grader cannot read ({err})")
                    break
                if frame is None:
                    stop = Interruption("error", box.ending().describe())
                    break
                try:
                    taken = self._take(frame)
                except (KeyError, TypeError, ValueError) as err:  # a report our student_process does not send
                    stop = Interruption("error", f"the notebook's process sent a report the grader cannot use ({err})")
                    break
                if taken == "end":
                    return True
                if taken == "step":
                    deadline = time.monotonic() + self.timeout + grace
        finally:
            box.stop()
            shutil.rmtree(work, ignore_errors=True)
        return self._settle(stop)

    def _take(self, frame: dict) -> str:
        """Use one report; "end" at the end, "step" when a new time limit starts, else ""."""
        self.reports_left -= 1
        if self.reports_left < 0:
            raise ValueError("more reports than the notebook has cells and cases")
        kind, cells = frame["event"], self.steps.cells
        if kind == "step":
            what = frame["what"]
            if frame["kind"] == "cell":
                self.step = ("cell", _index(what, len(cells)))
            elif frame["kind"] == "exercise" and what in self.names:
                self.step = ("exercise", what)
            else:
                raise ValueError(f"a step this notebook does not have: {frame['kind']!r} {what!r}")
            self.results = {}
            return "step"
        if kind == "cell":
            position = _index(frame["position"], len(cells))
            self._cell_ended(position, frame.get("error"), frame.get("memory") is True)
            self.step = None
            return "step"
        if kind == "end":
            return "end"
        name = frame["name"]
        if name not in self.names:
            raise ValueError(f"no exercise {name!r} in this notebook")
        if kind == "case":
            if self.step != ("exercise", name):
                raise ValueError(f"a case of {name!r} outside its step")
            self.results[_index(frame["k"], len(self.answers.inputs[name]))] = read_result(frame, self.memory_gb)
        elif kind in ("graded", "timeout"):
            stop = Interruption("timeout", f"it ran past the {self.timeout:g} s limit") if kind == "timeout" else None
            self.grades.setdefault(name, score(self.label, name, self.answers, self.results, stop))
            self.step = None
        elif kind == "missing":
            what = f"the function could not be found after its cell ran: {frame['error']}"
            self.grades.setdefault(name, unfinished(self.label, name, self.answers, "error", what))
            self.step = None
        else:
            raise ValueError(f"an event of unknown kind {kind!r}")
        return ""

    def _cell_ended(self, position: int, error: Any, memory: bool) -> None:
        number = self.steps.cells[position][0]
        if error == "timeout":
            self._note(f"cell {number} ran past {self.timeout:g} s and was interrupted")
            self._settle_cell(position, Interruption("timeout", f"it ran past {self.timeout:g} s and was interrupted"))
        elif memory:
            self._note(f"cell {number} reached the memory limit ({self.memory_gb:g} GiB): {str(error)[:300]}")
        elif error is not None and number not in self.steps.demonstrations:
            self._note(f"cell {number} raised {str(error)[:300]}")

    def _note(self, note: str) -> None:
        if note not in self.notes:  # a cell that raises raises again when the notebook is run again
            self.notes.append(note)

    def _settle(self, stop: Interruption) -> bool:
        """Charge ``stop`` to what was running; True when there is nothing to retry."""
        if self.step is None:  # between steps, or before the first: nothing to blame, nothing to retry
            self._note(f"the notebook's process stopped outside any cell: {stop.what}")
            for name in self.names:
                self.grades.setdefault(name, unfinished(self.label, name, self.answers, stop.status, stop.what))
            return True
        kind, what = self.step
        if kind == "cell":
            self._note(f"cell {self.steps.cells[what][0]} did not finish: {stop.what}; the rest ran without it")
            self.skip.add(what)
            self._settle_cell(what, stop)
        else:
            self.grades.setdefault(what, score(self.label, what, self.answers, self.results, stop))
        return False

    def _settle_cell(self, position: int, stop: Interruption) -> None:
        """The exercises checked in a cell that did not finish get its status."""
        for name, _ in self.steps.points.get(position, []):
            what = f"its cell (cell {self.steps.cells[position][0]}) did not finish: {stop.what}"
            self.grades.setdefault(name, unfinished(self.label, name, self.answers, stop.status, what))


def grade_notebook(
    path: Path,
    answers: Answers,
    course: list[CourseNotebook],
    *,
    timeout: float = 60.0,
    threads: int = 1,
    memory_gb: float = 6.0,
    label: str | None = None,
    every_cell: bool = False,
    cancel: threading.Event | None = None,
) -> NotebookReport:
    """Grade one student's notebook (see the package's docstring); never raises for a bad notebook."""
    label = label or str(path)
    start = time.perf_counter()
    try:
        cells = read_notebook(path)
    except ValueError as err:
        return NotebookReport(label, None, [Grade(label, "", "error", feedback=str(err))], [str(err)], 0.0)
    copy_of = identify(cells, course)
    if copy_of is None:
        reason = "not a copy of a course notebook (no exercise and no text cell in common with one)"
        return NotebookReport(label, None, [Grade(label, "", "error", feedback=reason)], [reason], 0.0)
    names = [n for n in copy_of.exercises if n in EXERCISES]
    run = _Notebook(label, plan(cells, names, every_cell), answers, timeout, threads, memory_gb)
    for name in names:
        if name not in run.names:
            run.grades[name] = unfinished(label, name, answers, "not attempted", f'no check("{name}", ...) call')
    for _ in range(MAX_RESTARTS + 1):
        if len(run.grades) == len(names) or run.attempt(cancel):
            break
    else:
        why = f"not graded: the notebook's process had to be stopped {MAX_RESTARTS + 1} times"
        for name in names:
            run.grades.setdefault(name, unfinished(label, name, answers, "error", why))
    for name in names:  # a point never reached: the process ended without grading it
        run.grades.setdefault(name, unfinished(label, name, answers, "error", "not reached"))
    grades = [run.grades[n] for n in names]
    return NotebookReport(label, copy_of.name, grades, run.notes, time.perf_counter() - start)


# == a class ================================================================================


def find_notebooks(paths: Iterable[str | Path]) -> list[Path]:
    """The files to grade: every ``.ipynb`` under each folder (sorted), and each file named directly."""
    found = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        else:
            found.append(path)
    return found


def grade_class(
    paths: Iterable[str | Path],
    out: str | Path,
    *,
    timeout: float = 60.0,
    jobs: int | None = None,
    memory_gb: float = 6.0,
    course_folder: Path = COURSE_NOTEBOOKS,
    every_cell: bool = False,
    cases: CaseSet | None = None,
    regrade: bool = False,
    log: Callable[[str], None] = print,
) -> list[NotebookReport]:
    """Grade every notebook under ``paths`` into ``out``/grades.csv and ``out``/feedback/*.md, each
    written as soon as it is known; notebooks ``out`` already holds (same file, same settings) are kept
    unless ``regrade``. ``cases`` defaults to the shipped demo set."""
    notebooks = find_notebooks(paths)
    cases = cases or load_cases()
    settings = {
        "timeout": float(timeout),
        "memory_gb": float(memory_gb),
        "every_cell": every_cell,
        "cases": cases.digest,
    }
    book = Gradebook(out, notebooks, settings, regrade)
    todo = book.todo()
    kind, detail = isolation()
    log(f"hidden cases: {cases.origin}")
    log(f"each notebook's processes: {detail}; {ISOLATION[kind]}")
    if len(todo) < len(notebooks):
        done = len(notebooks) - len(todo)
        log(f"{done} of {len(notebooks)} notebooks already graded in {out} with these settings (--regrade: all again)")
    jobs = jobs or max(1, min(len(todo), (os.cpu_count() or 2) // 2 or 1))
    threads = 1 if jobs > 1 else 2
    course = course_notebooks(course_folder)
    answers = Answers.build(EXERCISES, cases.hidden)
    cancel = threading.Event()

    def one(path: Path) -> None:
        report = grade_notebook(
            path,
            answers,
            course,
            timeout=timeout,
            threads=threads,
            memory_gb=memory_gb,
            every_cell=every_cell,
            cancel=cancel,
        )
        book.add(path, report)
        statuses = ", ".join(f"{g.exercise or 'file'} {g.status}" for g in report.grades)
        log(f"{path}: {statuses} ({report.seconds:.0f} s)")

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        list(pool.map(one, todo))
    except BaseException:
        cancel.set()  # every notebook still running stops its processes; what is finished stays written
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return book.all_reports()
