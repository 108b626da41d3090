"""The comparison: every case and its expected answer, made before any student code runs, and what a
student's function sent back, read safely and checked against them.

The cases of an exercise are its visible ones (``course_lib/exercises/chNN.py``, those ``check()`` shows in the
notebook) and its hidden ones. The hidden ones come from a Python file that defines ``HIDDEN`` (exercise
name -> a function building its cases). By default they are the course's demo set, each chapter's in its
key, ``course_lib/grading/keys/chNN.py``: a public repository holds it, so **students can read it**. For
real grades an instructor starts their own file with :func:`export_cases` (``course.py grade
--export-cases FILE``: the demo set drawn from a new random seed, and room for cases of their own), keeps
it from students, and grades with :func:`load_cases` (``--cases FILE``). A case without its own answer is
answered by the exercise's reference, else by its solution in the key (:func:`_answer`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..exercises import _FROM_REFERENCE, EXERCISES, Case, _difference, _same, _show
from ..files import sha256_file, write_atomically

STATUSES = ("passed", "failed", "error", "timeout", "not attempted")
KEY = Path(__file__).with_name("keys")  # the instructors' key; a course handed to students leaves it out


# == the hidden cases: the shipped demo set, or the instructor's own file ====================


@dataclass
class CaseSet:
    """Hidden cases per exercise, where they come from (in words) and a digest of their file."""

    hidden: dict[str, Callable[[], list[Case]]]
    origin: str
    digest: str


def load_cases(path: str | Path | None = None) -> CaseSet:
    """The hidden cases of the file at ``path`` (run as Python: it is the instructor's own), or the
    shipped demo set when ``path`` is None. ValueError if the file names an exercise the course lacks."""
    if path is None:
        if not KEY.is_dir():
            raise FileNotFoundError("course_lib/grading/keys/ is not here: grade with --cases FILE")
        from .keys import demo_cases

        origin = "the shipped demo set, course_lib/grading/keys/, which students can read"
        return CaseSet(demo_cases(), origin, _digest())
    path = Path(path)
    digest = _digest(path)
    spec = importlib.util.spec_from_file_location(f"instructor_cases_{digest[:12]}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python file of hidden cases")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    hidden = getattr(module, "HIDDEN", None)
    if not isinstance(hidden, dict) or not all(callable(v) for v in hidden.values()):
        raise ValueError(f"{path}: defines no HIDDEN dict of exercise name -> function building its cases")
    unknown = sorted(set(hidden) - set(EXERCISES))
    if unknown:
        raise ValueError(f"{path}: no exercise of the course is called {', '.join(map(repr, unknown))}")
    return CaseSet(hidden, str(path), digest)


def _digest(path: Path | None = None) -> str:
    """One digest of the cases file at ``path`` (if any) and of the key, which draws the demo set and
    answers the cases of an exercise without a reference (where the course has it): a change to either is
    a change of the cases."""
    files = ([path] if path else []) + sorted(KEY.glob("*.py"))
    return hashlib.sha256("".join(sha256_file(f) for f in files).encode()).hexdigest()


EXPORTED = """\
# Hidden cases of your own, exported by `course.py grade --export-cases`: keep this file away from
# students and grade with `course.py grade --cases {name} ...`.
from course_lib.exercises import Case
from course_lib.grading.keys import demo_cases

SEED = {seed}  # the demo set's random inputs are drawn from it: a new one for every export
HIDDEN = demo_cases(SEED)  # exercise name -> a function returning its hidden cases

# The demo set's cases are in course_lib/grading/keys/chNN.py, which a public repository shows to
# students: the seed above makes only their random inputs new. Replace an exercise's cases, or add to
# them, with a function of your own; a Case without `expected` is answered by the exercise's
# reference, or by its solution in course_lib/grading/keys/:
#
#     demo = HIDDEN["trigram-counts"]
#     HIDDEN["trigram-counts"] = lambda: demo() + [Case(([5, 1, 5, 1, 5], 6), "my own case")]
"""


def export_cases(path: str | Path) -> Path:
    """Write a new file of hidden cases to ``path``: the demo set drawn from a new random ``SEED``, and how
    to change or add cases. A file that exists is never overwritten."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; export to a new file (your own cases are never overwritten)")
    return write_atomically(path, EXPORTED.format(name=path.name, seed=secrets.randbelow(10**9)))


# == the cases and their answers (computed here, before any student code runs) ==============


@dataclass
class GradedCase:
    """One case of one exercise: its inputs as shown, its expected answer, visible or hidden."""

    note: str
    hidden: bool
    args_text: str
    expected: Any
    hint: int | str | None = None  # the step of the hint this case tests, or its own (Case.hint)


@dataclass
class Answers:
    """Every exercise's cases: inputs to send to the student's process, answers to keep here."""

    cases: dict[str, list[GradedCase]]
    inputs: dict[str, list[tuple]]

    @classmethod
    def build(cls, names: Iterable[str], hidden: dict[str, Callable[[], list[Case]]]) -> Answers:
        cases, inputs = {}, {}
        for name in names:
            ex = EXERCISES[name]
            more = hidden.get(name, lambda: [])
            made = [(c, False) for c in ex.cases()] + [(c, True) for c in more()]
            fresh = ex.cases() + more()  # a second copy: the one sent cannot be the one answered from
            cases[name] = [
                GradedCase(c.note, h, ", ".join(_show(a, 120) for a in c.args), _answer(name, c), c.hint)
                for c, h in made
            ]
            inputs[name] = [c.args for c in fresh]
        return cls(cases, inputs)


def _answer(name: str, case: Case) -> Any:
    """The expected answer of ``case``: its own, the reference's, else (a hidden case of an exercise with
    no course_lib reference) the solution's in the key, course_lib/grading/keys/chNN.py."""
    if case.expected is _FROM_REFERENCE and EXERCISES[name].reference is None:
        from .keys import SOLUTIONS

        return SOLUTIONS[name](*case.args)
    return EXERCISES[name].expected(case)


# == what came back, and the verdict ========================================================


def read_result(header: dict, memory_gb: float) -> dict:
    """One case's result as the student's process reported it: ``{"value": ...}``, read with
    ``torch.load(weights_only=True)`` (tensors and plain values only: reading it runs no code), or
    ``{"error": what went wrong, in words}``."""
    if header.get("error") is not None:
        text = str(header["error"])
        if header.get("memory") is True:
            return {"error": f"reached the memory limit ({memory_gb:g} GiB): {text}"[:300]}
        return {"error": f"raised {text}"[:300], "exception": str(header.get("exception"))}
    if header.get("unsent") is not None:
        return {"error": f"returned {header['unsent']}"[:300]}
    try:
        return {"value": torch.load(io.BytesIO(header["payload"]), weights_only=True)}
    except Exception as err:
        why = f"{type(err).__name__}: {err}".splitlines()[0]
        return {"error": f"returned something the grader could not read back as tensors and values ({why})"[:300]}


@dataclass
class Interruption:
    """Why an exercise or a cell did not finish: its status (``timeout`` or ``error``) and what happened."""

    status: str
    what: str


@dataclass
class Grade:
    """One row of grades.csv, with the per-case detail behind it for the feedback file."""

    notebook: str
    exercise: str
    status: str
    cases_passed: int = 0
    cases_total: int = 0
    feedback: str = ""
    cases: list[tuple[GradedCase, bool, str]] = field(default_factory=list)  # (case, passed, what came back)
    what_happened: str = ""  # for error, timeout and not attempted: one sentence for the student

    def row(self) -> dict:
        return {
            "notebook": self.notebook,
            "exercise": self.exercise,
            "status": self.status,
            "cases_passed": self.cases_passed,
            "cases_total": self.cases_total,
            "feedback": " ".join(self.feedback.split()),
        }


def unfinished(notebook: str, name: str, answers: Answers, status: str, what: str) -> Grade:
    """The grade of an exercise none of whose cases ran: ``what`` says why."""
    return Grade(notebook, name, status, 0, len(answers.cases[name]), what, what_happened=what)


def _got_text(result: dict, expected: Any = None, ok: bool = True) -> str:
    """What came back, in words; for a wrong value, also where it first differs from ``expected``."""
    if "error" in result:
        return str(result["error"])[:300]
    try:
        where = None if ok else _difference(result.get("value"), expected)
        return _show(result.get("value")) + (f"\ndiffers:  {where}" if where else "")
    except Exception:
        return "a value that cannot be shown"


def score(notebook: str, name: str, answers: Answers, results: dict[int, dict], stop: Interruption | None) -> Grade:
    """Compare what the function returned (``results``: case number -> :func:`read_result`) with the
    answers; ``stop`` says why grading stopped before every case ran (None when it did not)."""
    cases, ex = answers.cases[name], EXERCISES[name]
    checked = []
    for k, case in enumerate(cases):
        if k not in results:
            break
        result = results[k]
        try:
            ok = "error" not in result and bool(_same(result.get("value"), case.expected))
        except Exception:  # whatever came back, it is not the answer
            ok = False
        checked.append((case, ok, _got_text(result, case.expected, ok)))
    passed = sum(ok for _, ok, _ in checked)
    total = len(cases)
    visible = sum(not c.hidden for c in cases)
    vis_ok = sum(ok for c, ok, _ in checked if not c.hidden)
    counts = f"visible cases {vis_ok}/{visible}, hidden cases {passed - vis_ok}/{total - visible}"
    if stop is None and results and all(r.get("exception") == "NotImplementedError" for r in results.values()):
        what = "the function still raises NotImplementedError"
        return Grade(notebook, name, "not attempted", 0, total, what, checked, what)
    parts, what = [counts], ""
    if stop is None:
        status = "passed" if passed == total else "failed"
    else:
        status, what = stop.status, f"it stopped after {len(checked)} of {total} cases: {stop.what}"
        parts.append(what)
    failing = next(((k, c, got) for k, (c, ok, got) in enumerate(checked) if not ok), None)
    if failing is not None:
        k, case, got = failing
        kind = "hidden" if case.hidden else "visible"
        number = k + 1 - (visible if case.hidden else 0)
        of = total - visible if case.hidden else visible
        parts.append(
            f"first failure: {kind} case {number} of {of}"
            + (f" ({case.note})" if case.note else "")
            + f"; input: {case.args_text}; expected: {_show(case.expected)}; got: {got}; hint: {ex.hint(case.hint)}"
        )
    return Grade(notebook, name, status, passed, total, "; ".join(parts), checked, what)
