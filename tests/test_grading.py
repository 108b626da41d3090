"""Grading a class: hidden cases that tell right from wrong, and student notebooks, built from the
course's own notebook 04 (trimmed to its set-up and exercise cells), that each get the right status
however they are written: right, wrong, partly right, unattempted, tampering with the checker,
looping for ever, crashing before the exercises, writing outside their folder, or not a notebook."""

import copy
import csv
import json
from pathlib import Path

import pytest
from test_exercises import MISTAKES, SOLUTIONS

from course_lib import grading
from course_lib.exercises import EXERCISES, _same
from course_lib.hidden_cases import HIDDEN

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "04_self_attention.ipynb"

# == the hidden cases =======================================================================


def hidden_results(name, fn):
    """Whether ``fn`` passes each hidden case of exercise ``name``, answered by the reference."""
    ex, results = EXERCISES[name], []
    for answered, given in zip(HIDDEN[name](), HIDDEN[name]()):
        try:
            results.append(bool(_same(fn(*given.args), ex.reference(*answered.args))))
        except Exception:
            results.append(False)
    return results


def test_every_exercise_has_hidden_cases():
    assert list(HIDDEN) == list(EXERCISES), "hidden_cases.py: one set per exercise, in the course's order"
    assert all(len(HIDDEN[name]()) >= 4 for name in EXERCISES)


@pytest.mark.parametrize("name", list(EXERCISES))
def test_a_correct_solution_passes_every_hidden_case(name):
    assert all(hidden_results(name, SOLUTIONS[name]))


@pytest.mark.parametrize("name, k", [(n, k) for n, ms in MISTAKES.items() for k in range(len(ms))])
def test_each_typical_mistake_fails_a_hidden_case(name, k):
    assert not all(hidden_results(name, MISTAKES[name][k]))


def test_answers_are_built_from_the_references_before_any_student_code():
    answers = grading.Answers.build(["attention"])
    cases = answers.cases["attention"]
    assert [c.hidden for c in cases] == [False] * 3 + [True] * len(HIDDEN["attention"]())
    assert len(answers.inputs["attention"]) == len(cases)
    assert answers.inputs["attention"][0][0] is not EXERCISES["attention"].cases()[0].args[0]


def test_only_the_cells_the_exercises_depend_on_run():
    sources = [
        "import torch\nx = 2",  # 1: read by the annotation
        "train()",  # 3: binds nothing the exercise reads
        "step = 0\ny = x",  # 4: y is read; step is only the function's own parameter
        "step = 1",  # 5
        'def f(step: torch.Tensor):\n    return step * y\ncheck("merge", f)',  # 6
    ]
    cells = [new_cell(source) for source in sources]
    cells.insert(1, {"cell_type": "markdown", "metadata": {}, "source": "# text"})
    steps = grading.plan(cells, ["merge"])
    assert [number for number, _ in steps.cells] == [1, 4, 6] and steps.points == {2: [("merge", "f")]}
    assert len(grading.plan(cells, ["merge"], every_cell=True).cells) == 5


def test_check_calls_are_found_and_left_out():
    found, code = grading.find_checks('def f(x):\n    return x\n\nprint(check("attention", f))\nx = 1\n')
    assert found == [("attention", "f")] and "check" not in code and "x = 1" in code
    found, code = grading.find_checks('%time y = 2\ncheck("merge", lambda a, b, c: a)\n')
    assert found == [("merge", "lambda a, b, c: a")] and "run_line_magic" in code


# == student notebooks ======================================================================

ATTENTION = """\
def my_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v
"""
CAUSAL = """\
def my_causal_softmax(scores):
    T = scores.shape[-1]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
"""
UNSCALED = """\
def my_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
"""
TWO_D_ONLY = """\
def my_attention(q, k, v):
    return torch.softmax(q @ k.T / q.shape[-1] ** 0.5, dim=-1) @ v
"""
LOOPS = """\
def my_attention(q, k, v):
    while True:
        pass
"""
STUBBORN = """\
import time

def my_attention(q, k, v):
    while True:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
"""
TAMPERING = """\
import builtins
import course_lib.exercises as ex

def check(name, fn):
    print(f"✅ {name}: all cases passed")
    return True

ex._same = lambda got, expected: True
ex.EXERCISES["attention"].reference = lambda q, k, v: v
torch.allclose = lambda *args, **kwargs: True
builtins.print("all tests passed")

class Anything:
    def __eq__(self, other):
        return True

def my_attention(q, k, v):
    return Anything()
"""


def trimmed():
    """Notebook 04 with only its title, its set-up cell and its exercise cells (seconds to run)."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cells = nb["cells"]
    first_exercise = next(i for i, c in enumerate(cells) if 'check("' in "".join(c["source"]))
    nb["cells"] = cells[:2] + cells[first_exercise - 1 :]
    return nb


def student(tmp, filename, attention=None, causal=None, before=(), drop_attention=False):
    """A student's copy of the trimmed notebook 04: ``attention``/``causal`` replace the body of the
    exercise cells (None keeps the template), ``before`` adds code cells ahead of the exercises."""
    nb = trimmed()
    cells = []
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and 'check("attention"' in source:
            if drop_attention:
                continue
            cells += [new_cell(c) for c in before]
            if attention is not None:
                source = f'from course_lib.exercises import check\n\n{attention}\n\ncheck("attention", my_attention)\n'
        elif cell["cell_type"] == "code" and 'check("causal-softmax"' in source and causal is not None:
            source = f'{causal}\n\ncheck("causal-softmax", my_causal_softmax)\n'
        cells.append({**copy.deepcopy(cell), "source": source})
    nb["cells"] = cells
    path = tmp / filename
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def new_cell(source):
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One class, graded once: {file name: {exercise: row}}, the reports and the output folder."""
    tmp = tmp_path_factory.mktemp("class")
    outside = tmp / "outside.txt"
    outside.write_text("the instructor's file")
    work = tmp / "submitted"
    work.mkdir()
    helper = ATTENTION.replace("** 0.5", "** POWER")  # a name from an earlier cell of the student's
    student(work, "right.ipynb", helper, CAUSAL, before=["POWER = 0.5"])
    student(work, "wrong.ipynb", UNSCALED)
    student(work, "partly.ipynb", TWO_D_ONLY, CAUSAL)
    student(work, "unattempted.ipynb", drop_attention=True)
    student(work, "tampering.ipynb", TAMPERING, "def my_causal_softmax(s):\n    return s\n\ncheck = print\n")
    student(work, "loops.ipynb", LOOPS, CAUSAL)
    student(work, "stubborn.ipynb", STUBBORN, CAUSAL)
    crashes = [  # each binds torch, so the exercises depend on it and it runs; the last one is not needed
        "import torch\nraise RuntimeError('the kernel crashed here')",
        "import os\nimport torch\nos._exit(3)",
        f"import torch\nopen({str(outside)!r}, 'w').write('overwritten')",
        f"import os\nimport torch\nos.remove({str(outside)!r})",
        "import torch\nprint('x' * 10_000_000)",
        "while True:\n    trained = True",
    ]
    student(work, "05_named_like_another_notebook.ipynb", ATTENTION, CAUSAL, before=crashes)
    (work / "essay.ipynb").write_text("Dear instructor, here is my essay.")
    (work / "unrelated.ipynb").write_text(json.dumps({"cells": [new_cell("print(1)")], "nbformat": 4}))
    out = tmp / "grades"
    grading.GRACE_S = 2.0
    reports = grading.grade_class([work], out, timeout=4, jobs=2, log=lambda line: None)
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    table = {}
    for row in rows:
        table.setdefault(Path(row["notebook"]).name, {})[row["exercise"]] = row
    return table, reports, out, outside


def status(graded, filename):
    return {name: row["status"] for name, row in graded[0][filename].items()}


def test_grades_csv_has_exactly_the_promised_columns(graded):
    _, _, out, _ = graded
    header = (out / "grades.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "notebook,exercise,status,cases_passed,cases_total,feedback"


def test_a_right_answer_passes_every_visible_and_hidden_case(graded):
    rows = graded[0]["right.ipynb"]
    assert status(graded, "right.ipynb") == {"attention": "passed", "causal-softmax": "passed"}
    row = rows["attention"]
    assert row["cases_passed"] == row["cases_total"] == str(3 + len(HIDDEN["attention"]()))
    assert "visible cases 3/3, hidden cases" in row["feedback"]


def test_a_wrong_answer_fails_with_the_case_the_expected_value_and_the_hint(graded):
    assert status(graded, "wrong.ipynb") == {"attention": "failed", "causal-softmax": "not attempted"}
    feedback = graded[0]["wrong.ipynb"]["attention"]["feedback"]
    for part in ("first failure: visible case 1 of 3", "input:", "expected:", "got:", "hint: scores = q @ k"):
        assert part in feedback


def test_a_partly_right_answer_gets_partial_credit(graded):
    assert status(graded, "partly.ipynb") == {"attention": "failed", "causal-softmax": "passed"}
    row = graded[0]["partly.ipynb"]["attention"]
    assert 0 < int(row["cases_passed"]) < int(row["cases_total"])
    assert "visible case 3 of 3" in row["feedback"] and "raised" in row["feedback"]


def test_an_unattempted_or_missing_exercise_is_not_attempted(graded):
    assert status(graded, "unattempted.ipynb") == {"attention": "not attempted", "causal-softmax": "not attempted"}


def test_tampering_with_check_the_reference_or_torch_changes_nothing(graded):
    assert status(graded, "tampering.ipynb") == {"attention": "failed", "causal-softmax": "failed"}
    assert graded[0]["tampering.ipynb"]["attention"]["cases_passed"] == "0"


def test_an_endless_loop_times_out_and_the_next_exercise_is_still_graded(graded):
    assert status(graded, "loops.ipynb") == {"attention": "timeout", "causal-softmax": "passed"}
    assert status(graded, "stubborn.ipynb") == {"attention": "timeout", "causal-softmax": "passed"}


def test_crashes_before_the_exercises_cost_nothing_and_files_outside_are_safe(graded):
    table, reports, out, outside = graded
    name = "05_named_like_another_notebook.ipynb"
    assert status(graded, name) == {"attention": "passed", "causal-softmax": "passed"}  # found by its cells
    assert outside.read_text() == "the instructor's file"
    report = next(r for r in reports if r.path.endswith(name))
    assert report.course_notebook == "04_self_attention"
    notes = "\n".join(report.notes)
    assert "RuntimeError: the kernel crashed here" in notes and "exit code 3" in notes
    assert notes.count("PermissionError") == 2


def test_what_is_not_a_course_notebook_gets_one_clear_line(graded):
    assert graded[0]["essay.ipynb"][""]["status"] == "error"
    assert graded[0]["essay.ipynb"][""]["feedback"].startswith("not a notebook")
    assert "not a copy of a course notebook" in graded[0]["unrelated.ipynb"][""]["feedback"]


def test_each_student_gets_a_feedback_file_and_the_class_a_summary(graded):
    _, reports, out, _ = graded
    files = sorted(p.name for p in (out / "feedback").glob("*.md"))
    assert len(files) == len(reports) == 10
    text = (out / "feedback" / "wrong.md").read_text(encoding="utf-8")
    assert "| attention | failed |" in text and "First failing case" in text and "Hint:" in text
    summary = grading.summary_table(reports)
    assert summary.splitlines()[0].split()[:3] == ["exercise", "passed", "failed"]
    assert any(line.startswith("attention") for line in summary.splitlines())
