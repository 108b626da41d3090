"""Grading a class: hidden cases that tell right from wrong, and student notebooks, built from the
course's own notebook 04 (trimmed to its set-up and exercise cells), that each get the right status
however they are written: right, wrong, partly right, unattempted, tampering with the checker,
looping for ever, crashing before the exercises, writing outside their folder, or not a notebook;
and hostile ones that kill their parent, their grandparent, their process group or every process
they can signal, fork a process that outlives its cell, return a tensor subclass, patch torch or
flood the grader with reports.

Every class is graded by ``python -m course_lib.grading`` in a process of its own and, where util-linux's
``unshare`` can, inside user and PID namespaces made for the test: whatever a student does, and even
if the grader's sandbox failed, nothing reaches this test runner."""

import copy
import csv
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from course_lib.exercises import EXERCISES, _same, banned, banned_use, call, plain
from course_lib.grading.gradebook import Gradebook, NotebookReport
from course_lib.grading.keys import MISTAKES, SOLUTIONS, demo_cases
from course_lib.grading.sandbox import ProtocolError, Sandbox, isolation
from course_lib.grading.scoring import Answers, Grade, export_cases, load_cases
from course_lib.grading.submissions import find_checks, plan

pytestmark = pytest.mark.skipif(
    sys.platform == "win32",
    reason="the grader runs students in POSIX processes (fork, signals, sh, resource limits): grade in WSL 2",
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "04_self_attention.ipynb"
ENV = {**os.environ, "COURSE_BUDGET": "ci", "COURSE_DEVICE": "cpu", "PYTHONHASHSEED": "0"}  # as course.py grade
UNSHARE = shutil.which("unshare")
CONTAINER = ["--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount-proc"]
NOT_INIT = '"$@"; exit $?'  # the grader runs as PID 2 of the container: PID 1 ignores signals sent from inside
REFUSE_NAMESPACES = "echo 0 > /proc/sys/user/max_user_namespaces"  # in the container: for what it starts

# == the hidden cases =======================================================================


HIDDEN = demo_cases()  # as the grader reads them without --cases


def hidden_results(name, fn):
    """Whether ``fn`` passes each hidden case of exercise ``name``, answered as the grader answers it."""
    ex, answers, results = EXERCISES[name], Answers.build([name], HIDDEN), []
    for case, args in zip(answers.cases[name], answers.inputs[name]):
        if not case.hidden:
            continue
        try:
            assert banned_use(ex.bans, fn) is None, "the banned function itself"
            with banned(ex.bans, fn):  # as the student's process calls it
                got = plain(call(fn, args))  # what the student's process sends back, or TypeError
            results.append(bool(_same(got, case.expected)))
        except Exception:
            results.append(False)
    return results


def test_every_exercise_has_hidden_cases():
    assert list(HIDDEN) == list(EXERCISES), "the key: one set of hidden cases per exercise, in the course's order"
    assert all(len(HIDDEN[name]()) >= 4 for name in EXERCISES)


@pytest.mark.parametrize("name", list(EXERCISES))
def test_a_correct_solution_passes_every_hidden_case(name):
    assert all(hidden_results(name, SOLUTIONS[name]))


@pytest.mark.parametrize("name, k", [(n, k) for n, ms in MISTAKES.items() for k in range(len(ms))])
@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom:UserWarning")  # a mistake on a 1-wide case
def test_each_typical_mistake_fails_a_hidden_case(name, k):
    assert not all(hidden_results(name, MISTAKES[name][k]))


def test_answers_are_built_from_the_references_before_any_student_code():
    answers = Answers.build(["linear-attention"], HIDDEN)
    cases = answers.cases["linear-attention"]
    assert [c.hidden for c in cases] == [False] * 3 + [True] * len(HIDDEN["linear-attention"]())
    assert len(answers.inputs["linear-attention"]) == len(cases)
    assert answers.inputs["linear-attention"][0][0] is not EXERCISES["linear-attention"].cases()[0].args[0]


def test_exported_cases_are_the_demo_set_with_a_new_seed_and_say_how_to_add_cases(tmp_path):
    path = export_cases(tmp_path / "my_cases.py")
    text = path.read_text(encoding="utf-8")
    assert "\nSEED = 1000 " not in text and "--cases my_cases.py" in text
    with pytest.raises(FileExistsError):
        export_cases(path)  # an instructor's own cases are never overwritten
    mine = load_cases(path)
    assert list(mine.hidden) == list(HIDDEN) and mine.digest != load_cases().digest
    name = "trigram-counts"  # its last hidden case is random tokens: another seed, other inputs
    shipped, exported = Answers.build([name], HIDDEN), Answers.build([name], mine.hidden)
    assert [c.note for c in shipped.cases[name]] == [c.note for c in exported.cases[name]]
    assert [c.args_text for c in shipped.cases[name]] != [c.args_text for c in exported.cases[name]]
    recipe = [line[len("#     ") :] for line in text.splitlines() if line.startswith("#     ")]  # the example
    path.write_text(text + "\n".join(recipe) + "\n", encoding="utf-8")
    added = Answers.build([name], load_cases(path).hidden).cases[name]
    assert [c.note for c in added] == [c.note for c in exported.cases[name]] + ["my own case"]
    assert added[-1].expected.sum() == 3  # answered by the reference: three trigrams


def test_the_key_registers_each_part_of_an_exercise_once():
    with pytest.raises(ValueError, match="solution of 'trigram-counts' defined twice"):
        SOLUTIONS["trigram-counts"] = SOLUTIONS["logsumexp"]
    with pytest.raises(ValueError, match="typical mistakes of 'logsumexp' defined twice"):
        MISTAKES["logsumexp"] = []


def test_a_cases_file_may_cover_some_exercises_and_must_name_real_ones(tmp_path):
    mine = tmp_path / "cases.py"
    mine.write_text(
        "import torch\nfrom course_lib.exercises import Case\n\n"
        "HIDDEN = {'linear-attention': lambda: [Case((torch.eye(2), torch.eye(2), torch.ones(2, 1)), 'mine')]}\n"
    )
    answers = Answers.build(["linear-attention", "logsumexp"], load_cases(mine).hidden)
    assert [c.note for c in answers.cases["linear-attention"] if c.hidden] == ["mine"]
    assert not any(c.hidden for c in answers.cases["logsumexp"])
    mine.write_text("HIDDEN = {'atention': lambda: []}\n")
    with pytest.raises(ValueError, match="'atention'"):
        load_cases(mine)


# == reading a notebook =====================================================================


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
    steps = plan(cells, ["merge"])
    assert [number for number, _ in steps.cells] == [1, 4, 6] and steps.points == {2: [("merge", "f")]}
    assert len(plan(cells, ["merge"], every_cell=True).cells) == 5


def test_check_calls_are_found_and_left_out():
    found, code = find_checks('def f(x):\n    return x\n\nprint(check("linear-attention", f))\nx = 1\n')
    assert found == [("linear-attention", "f")] and "check" not in code and "x = 1" in code
    found, code = find_checks('%time y = 2\ncheck("merge", lambda a, b, c: a)\n')
    assert found == [("merge", "lambda a, b, c: a")] and "run_line_magic" in code


# == the sandbox: its channel, and how a run ended ==========================================


def sandboxed(tmp_path, code):
    """A sandbox running the Python ``code`` (with ``send`` and ``CHANNEL_FD`` imported)."""
    prelude = "import os, signal, time\nfrom course_lib.grading.sandbox import send, CHANNEL_FD\n"
    return Sandbox([sys.executable, "-c", prelude + code], cwd=tmp_path, env=ENV)


def test_a_sandboxed_process_sends_frames_and_its_end_is_told_with_its_signal(tmp_path):
    box = sandboxed(tmp_path, "send(CHANNEL_FD, {'event': 'hi'}, b'xyz')\nos.kill(os.getpid(), signal.SIGTERM)")
    try:
        assert box.receive(60) == {"event": "hi", "payload": b"xyz"}
        assert box.receive(60) is None
        ending = box.ending()
    finally:
        box.stop()
    assert (ending.signal, ending.stopped, ending.isolation) == (signal.SIGTERM, False, isolation()[0])
    assert "SIGTERM" in ending.describe() and "the grader did not send" in ending.describe()


def test_a_process_the_grader_stops_is_told_so(tmp_path):
    box = sandboxed(tmp_path, "send(CHANNEL_FD, {'event': 'up'})\ntime.sleep(600)")
    assert box.receive(60)["event"] == "up"
    box.stop()
    ending = box.ending()
    assert ending.stopped and ending.describe() == "the grader stopped it"


@pytest.mark.parametrize(
    "garbage",
    [b"\xff" * 16, b"\0\0\0\2\0\0\0\0{]", b"\0\0\0\2\x7f\0\0\0[]"],
    ids=["too large a header", "not JSON", "too large a value"],
)
def test_a_frame_the_protocol_does_not_allow_is_refused(tmp_path, garbage):
    box = sandboxed(tmp_path, f"os.write(CHANNEL_FD, bytes.fromhex('{garbage.hex()}'))\ntime.sleep(600)")
    try:
        with pytest.raises(ProtocolError):
            box.receive(60)
    finally:
        box.stop()


# == the gradebook: every result written when known, a stopped run resumed ==================


def test_the_gradebook_keeps_what_was_graded_from_the_same_file_with_the_same_settings(tmp_path):
    a, b, out = tmp_path / "a.ipynb", tmp_path / "b.ipynb", tmp_path / "out"
    a.write_text("A")
    b.write_text("B")
    settings = {"timeout": 60.0, "memory_gb": 6.0, "every_cell": False, "cases": "digest"}
    book = Gradebook(out, [a, b], settings)
    assert book.todo() == [a, b]
    grade = Grade(str(a), "linear-attention", "passed", 9, 9, "all right")
    book.add(a, NotebookReport(str(a), "04_self_attention", [grade], ["a note"], 1.0))
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        assert list(csv.DictReader(f)) == [{k: str(v) for k, v in grade.row().items()}]
    assert (out / "feedback" / "a.md").exists()
    again = Gradebook(out, [a, b], settings)
    assert again.todo() == [b] and again.all_reports()[0].grades[0].row() == grade.row()
    assert again.all_reports()[0].notes == ["a note"]
    assert Gradebook(out, [a, b], settings, regrade=True).todo() == [a, b]
    assert Gradebook(out, [a, b], {**settings, "timeout": 5.0}).todo() == [a, b]
    a.write_text("A, handed in again")
    assert Gradebook(out, [a, b], settings).todo() == [a, b]


# == student notebooks ======================================================================

ATTENTION = """\
def my_attention(q, k, v):
    weights = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)
    return weights / weights.sum(dim=-1, keepdim=True) ** 1.0 @ v
"""
POOL = """\
def my_pool(x, query):
    weights = torch.softmax(x @ query / x.shape[-1] ** 0.5, dim=-1)
    return (weights.unsqueeze(-1) * x).sum(dim=1)
"""
UNNORMALISED = """\
def my_attention(q, k, v):
    return (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1) @ v
"""
TWO_D_ONLY = """\
def my_attention(q, k, v):
    weights = (F.elu(q) + 1) @ (F.elu(k) + 1).t()
    return weights / weights.sum(dim=-1, keepdim=True) @ v
"""
BANNED = """\
def my_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)
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
ex.EXERCISES["linear-attention"].reference = lambda q, k, v: v
torch.allclose = lambda *args, **kwargs: True
builtins.print("all tests passed")

class Anything:
    def __eq__(self, other):
        return True

def my_attention(q, k, v):
    return Anything()
"""


KILLS_PARENT = """
import os, signal
os.kill(os.getppid(), signal.SIGKILL)
"""
KILLS_GRANDPARENT = """
import os, signal
with open(f"/proc/{os.getppid()}/stat") as stat:
    grandparent = int(stat.read().rsplit(")", 1)[1].split()[1])
os.kill(grandparent, signal.SIGKILL)
"""
KILLS_GROUP = """
import os, signal
os.killpg(0, signal.SIGKILL)
"""
KILLS_EVERYONE = """
import os, signal
os.kill(-1, signal.SIGKILL)
"""
FORKS = """
import ctypes, time
libc = ctypes.CDLL(None)
if libc.fork() == 0:  # not os.fork, which the audit hook refuses
    libc.prctl(15, b"hostile-fork", 0, 0, 0)  # PR_SET_NAME: how the test finds it
    while True:
        time.sleep(1)
"""
SUBCLASS = """
class Sneaky(torch.Tensor):
    pass

def my_attention(q, k, v):
    weights = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)
    return (weights / weights.sum(dim=-1, keepdim=True) @ v).as_subclass(Sneaky)
"""
PATCHES_TORCH = """
import pickle

class Payload:  # creates the file MARKER in whoever unpickles it
    def __reduce__(self):
        return (exec, (f"open({MARKER!r}, 'w').close()",))

def save(obj, f, *args, **kwargs):
    f.write(pickle.dumps(Payload()))

torch.save = save
"""
HOGS_MEMORY = """
def my_attention(q, k, v):
    return torch.empty(2**32)  # 16 GiB
"""
FLOODS = """
from course_lib.grading.sandbox import CHANNEL_FD, send
while True:  # reports that would keep the grader waiting for ever
    send(CHANNEL_FD, {"event": "cell", "position": 0, "error": None})
"""
WAITS = """
import ctypes, os, time
ctypes.CDLL(None).prctl(15, b"waiting-student", 0, 0, 0)
while not os.path.exists(GO):
    time.sleep(0.05)
"""


def trimmed():
    """Notebook 04 with only its title, its set-up cell (its first code cell) and its exercise cells
    (seconds to run)."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cells = nb["cells"]
    set_up = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    first_exercise = next(i for i, c in enumerate(cells) if 'check("' in "".join(c["source"]))
    nb["cells"] = [cells[0], cells[set_up]] + cells[first_exercise - 1 :]
    return nb


def student(tmp, filename, attention=None, pool=None, before=(), drop_attention=False):
    """A student's copy of the trimmed notebook 04: ``attention``/``pool`` replace the body of the
    exercise cells (None keeps the template), ``before`` adds code cells ahead of the exercises."""
    nb = trimmed()
    cells = []
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and 'check("linear-attention"' in source:
            if drop_attention:
                continue
            cells += [new_cell(c) for c in before]
            if attention is not None:
                source = f"from course_lib.exercises import check\n\n{attention}\n\n"
                source += 'check("linear-attention", my_attention)\n'
        elif cell["cell_type"] == "code" and "check(" in source and 'check("attention-pool"' not in source:
            continue  # the chapter's other exercises: this class answers two
        elif cell["cell_type"] == "code" and 'check("attention-pool"' in source and pool is not None:
            source = f'{pool}\n\ncheck("attention-pool", my_pool)\n'
        cells.append({**copy.deepcopy(cell), "source": source})
    nb["cells"] = cells
    path = tmp / filename
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def new_cell(source):
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}


@functools.cache
def containable(inside="true"):
    """Whether util-linux's ``unshare`` can put a command in user and PID namespaces of its own here
    (and, given ``inside``, that shell command succeeds there)."""
    if UNSHARE is None:
        return False
    return subprocess.run([UNSHARE, *CONTAINER, "sh", "-c", inside], capture_output=True).returncode == 0


def grade(*args, sessions=False):
    """``course.py grade ARGS`` as a module, contained where possible (then even ``kill(-1)`` from a student
    reaches no further than the grader under test). ``sessions``: new user namespaces refused to the
    grader, so that its sandbox falls back to sessions."""
    command = [sys.executable, "-m", "course_lib.grading", *map(str, args)]
    command = ["sh", "-c", f"{REFUSE_NAMESPACES} && {NOT_INIT}" if sessions else NOT_INIT, "sh", *command]
    if containable():
        command = [UNSHARE, *CONTAINER, *command]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def processes_named(name):
    """Process ids whose name is ``name`` (Linux's /proc), left over from a grading run."""
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name:
                found.append(int(comm.parent.name))
        except OSError:  # ended meanwhile
            pass
    return found


def rows_of(out):
    """grades.csv as {file name: {exercise: row}}."""
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    table = {}
    for row in rows:
        table.setdefault(Path(row["notebook"]).name, {})[row["exercise"]] = row
    return table


@dataclass
class Class:
    rows: dict  # file name -> exercise -> row of grades.csv
    records: dict  # file name -> its record (notes, course notebook)
    out: Path
    stdout: str
    tmp: Path


NAMESPACES = sys.platform.startswith("linux") and isolation()[0] == "namespaces"
ONLY_IN_NAMESPACES = "the sandbox has no namespaces here: a student who signals the grader by its pid can stop it"
ONLY_CONTAINED = "no util-linux unshare to contain the grader: kill(-1) could reach this test runner"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One class, graded once with instructor's cases exported from the demo set."""
    tmp = tmp_path_factory.mktemp("class")
    outside = tmp / "outside.txt"
    outside.write_text("the instructor's file")
    work = tmp / "submitted"
    work.mkdir()
    helper = ATTENTION.replace("** 1.0", "** POWER")  # a name from an earlier cell of the student's
    student(work, "right.ipynb", helper, POOL, before=["POWER = 1.0"])
    student(work, "wrong.ipynb", UNNORMALISED)
    student(work, "banned.ipynb", BANNED, POOL)
    student(work, "partly.ipynb", TWO_D_ONLY, POOL)
    student(work, "unattempted.ipynb", drop_attention=True)
    student(work, "tampering.ipynb", TAMPERING, "def my_pool(x, query):\n    return x\n\ncheck = print\n")
    student(work, "loops.ipynb", LOOPS, POOL)
    student(work, "stubborn.ipynb", STUBBORN, POOL)
    crashes = [  # each binds torch, so the exercises depend on it and it runs; the last one is not needed
        "import torch\nraise RuntimeError('the kernel crashed here')",
        "import os\nimport torch\nos._exit(3)",
        f"import torch\nopen({str(outside)!r}, 'w').write('overwritten')",
        f"import os\nimport torch\nos.remove({str(outside)!r})",
        "import torch\nprint('x' * 10_000_000)",
        "while True:\n    trained = True",
    ]
    student(work, "05_named_like_another_notebook.ipynb", ATTENTION, POOL, before=crashes)
    (work / "essay.ipynb").write_text("Dear instructor, here is my essay.")
    (work / "unrelated.ipynb").write_text(json.dumps({"cells": [new_cell("print(1)")], "nbformat": 4}))
    student(work, "kills_parent.ipynb", ATTENTION + KILLS_PARENT, POOL)
    student(work, "kills_group.ipynb", ATTENTION + KILLS_GROUP, POOL)
    student(work, "forks.ipynb", FORKS + ATTENTION, POOL)
    student(work, "returns_a_subclass.ipynb", SUBCLASS, POOL)
    marker = tmp / "unpickled"
    student(work, "patches_torch.ipynb", f"MARKER = {str(marker)!r}\n" + PATCHES_TORCH + ATTENTION, POOL)
    student(work, "hogs_memory.ipynb", HOGS_MEMORY, POOL)
    student(work, "floods_the_grader.ipynb", FLOODS, POOL)
    if NAMESPACES:  # elsewhere the grandparent is the grader: ONLY_IN_NAMESPACES
        student(work, "kills_grandparent.ipynb", ATTENTION + KILLS_GRANDPARENT, POOL)
    if NAMESPACES and containable():
        student(work, "kills_everyone.ipynb", ATTENTION + KILLS_EVERYONE, POOL)
    cases = export_cases(tmp / "instructor_cases.py")
    out = tmp / "grades"
    result = grade(work, "--out", out, "--timeout", 4, "--jobs", 2, "--cases", cases)
    records = {Path(r["path"]).name: r for r in map(json.loads, map(Path.read_text, (out / "records").glob("*.json")))}
    assert not marker.exists(), "the grader unpickled what a student's patched torch.save wrote"
    return Class(rows_of(out), records, out, result.stdout, tmp)


DEMO = ("linear-attention", "attention-pool")  # the two exercises of notebook 04 the demo students answer


def status(graded, filename):
    """The demo exercises' statuses; notebook 04's other exercises are left unattempted."""
    return {name: row["status"] for name, row in graded.rows[filename].items() if name in DEMO}


def test_grades_csv_has_exactly_the_promised_columns(graded):
    header = (graded.out / "grades.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "notebook,exercise,status,cases_passed,cases_total,feedback"


def test_the_instructors_cases_file_is_used(graded):
    assert f"hidden cases: {graded.tmp / 'instructor_cases.py'}" in graded.stdout


def test_a_right_answer_passes_every_visible_and_hidden_case(graded):
    assert status(graded, "right.ipynb") == {"linear-attention": "passed", "attention-pool": "passed"}
    row = graded.rows["right.ipynb"]["linear-attention"]
    assert row["cases_passed"] == row["cases_total"] == str(3 + len(HIDDEN["linear-attention"]()))
    assert "visible cases 3/3, hidden cases" in row["feedback"]


def test_a_wrong_answer_fails_with_the_case_the_expected_value_and_the_hint(graded):
    assert status(graded, "wrong.ipynb") == {"linear-attention": "failed", "attention-pool": "not attempted"}
    feedback = graded.rows["wrong.ipynb"]["linear-attention"]["feedback"]
    for part in ("first failure: visible case 1 of 3", "input:", "expected:", "got:", "hint: write the weights first"):
        assert part in feedback


def test_a_banned_function_fails_in_the_grader_too(graded):
    assert status(graded, "banned.ipynb") == {"linear-attention": "failed", "attention-pool": "passed"}
    row = graded.rows["banned.ipynb"]["linear-attention"]
    assert row["cases_passed"] == "0" and "scaled_dot_product_attention is banned" in row["feedback"]


def test_a_partly_right_answer_gets_partial_credit(graded):
    assert status(graded, "partly.ipynb") == {"linear-attention": "failed", "attention-pool": "passed"}
    row = graded.rows["partly.ipynb"]["linear-attention"]
    assert 0 < int(row["cases_passed"]) < int(row["cases_total"])
    assert "visible case 3 of 3" in row["feedback"] and "raised" in row["feedback"]


def test_an_unattempted_or_missing_exercise_is_not_attempted(graded):
    assert status(graded, "unattempted.ipynb") == {
        "linear-attention": "not attempted",
        "attention-pool": "not attempted",
    }


def test_tampering_with_check_the_reference_or_torch_changes_nothing(graded):
    assert status(graded, "tampering.ipynb") == {"linear-attention": "failed", "attention-pool": "failed"}
    assert graded.rows["tampering.ipynb"]["linear-attention"]["cases_passed"] == "0"


def test_an_endless_loop_times_out_and_the_next_exercise_is_still_graded(graded):
    assert status(graded, "loops.ipynb") == {"linear-attention": "timeout", "attention-pool": "passed"}
    assert status(graded, "stubborn.ipynb") == {"linear-attention": "timeout", "attention-pool": "passed"}


def test_crashes_before_the_exercises_cost_nothing_and_files_outside_are_safe(graded):
    name = "05_named_like_another_notebook.ipynb"
    assert status(graded, name) == {"linear-attention": "passed", "attention-pool": "passed"}  # found by its cells
    assert (graded.tmp / "outside.txt").read_text() == "the instructor's file"
    record = graded.records[name]
    assert record["course_notebook"] == "04_self_attention"
    notes = "\n".join(record["notes"])
    assert "RuntimeError: the kernel crashed here" in notes and "exited with code 3" in notes
    assert notes.count("PermissionError") == 2


def test_what_is_not_a_course_notebook_gets_one_clear_line(graded):
    assert graded.rows["essay.ipynb"][""]["status"] == "error"
    assert graded.rows["essay.ipynb"][""]["feedback"].startswith("not a notebook")
    assert "not a copy of a course notebook" in graded.rows["unrelated.ipynb"][""]["feedback"]


def test_each_student_gets_a_feedback_file_and_the_class_a_summary(graded):
    files = sorted(p.stem for p in (graded.out / "feedback").glob("*.md"))
    assert files == sorted(Path(name).stem for name in graded.rows) == sorted(Path(n).stem for n in graded.records)
    text = (graded.out / "feedback" / "wrong.md").read_text(encoding="utf-8")
    assert "| linear-attention | failed |" in text and "First failing case" in text and "Hint:" in text
    summary = graded.stdout[graded.stdout.index("exercise ") :].splitlines()
    assert summary[0].split()[:3] == ["exercise", "passed", "failed"]
    assert any(line.startswith("linear-attention") for line in summary)


# == hostile students: each costs itself only ===============================================


def killed_by_itself(row):
    """A grade charged to a SIGKILL that the student's own code sent (never called a memory limit)."""
    feedback = row["feedback"]
    return row["status"] == "error" and "SIGKILL" in feedback and "did not send" in feedback and "limit" not in feedback


def test_a_student_who_kills_its_parent_is_graded_as_if_it_had_not(graded):
    assert status(graded, "kills_parent.ipynb") == {"linear-attention": "passed", "attention-pool": "passed"}


def test_a_student_who_kills_its_process_group_loses_that_cell_only(graded):
    rows = graded.rows["kills_group.ipynb"]
    assert killed_by_itself(rows["linear-attention"]) and rows["attention-pool"]["status"] == "passed"
    text = (graded.out / "feedback" / "kills_group.md").read_text(encoding="utf-8")
    assert "## linear-attention: error\n\nIts cell (cell " in text and "killed by SIGKILL" in text


@pytest.mark.skipif(not NAMESPACES, reason=ONLY_IN_NAMESPACES)
def test_a_student_who_kills_its_grandparent_loses_that_cell_only(graded):
    rows = graded.rows["kills_grandparent.ipynb"]
    assert killed_by_itself(rows["linear-attention"]) and rows["attention-pool"]["status"] == "passed"
    assert "the notebook's own code, inside its sandbox" in rows["linear-attention"]["feedback"]


@pytest.mark.skipif(not (NAMESPACES and containable()), reason=ONLY_IN_NAMESPACES + "; or " + ONLY_CONTAINED)
def test_a_student_who_kills_every_process_it_can_reaches_none_but_its_own(graded):
    assert status(graded, "kills_everyone.ipynb") == {"linear-attention": "passed", "attention-pool": "passed"}
    assert "ProcessLookupError" in "\n".join(graded.records["kills_everyone.ipynb"]["notes"])  # none to signal


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the fork by its name in Linux's /proc")
def test_a_fork_that_outlives_its_cell_is_gone_with_its_notebook(graded):
    assert status(graded, "forks.ipynb") == {"linear-attention": "passed", "attention-pool": "passed"}
    assert processes_named("hostile-fork") == []


def test_a_returned_tensor_subclass_is_named_by_its_type(graded):
    row = graded.rows["returns_a_subclass.ipynb"]["linear-attention"]
    assert row["status"] == "failed" and row["cases_passed"] == "0"
    assert "got: returned an object of type Sneaky, a subclass of torch.Tensor, not a plain tensor" in row["feedback"]
    assert graded.rows["returns_a_subclass.ipynb"]["attention-pool"]["status"] == "passed"


def test_a_patched_torch_sends_nothing_the_grader_runs(graded):
    rows = graded.rows["patches_torch.ipynb"]  # the file the payload would open is checked by the fixture
    assert [rows[n]["status"] for n in DEMO] == ["failed", "failed"]  # the patch lives on in its process
    assert "the grader could not read back" in rows["linear-attention"]["feedback"]


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS does not enforce RLIMIT_AS: the grader's memory limit")
def test_the_memory_limit_is_named_when_it_is_reached(graded):
    row = graded.rows["hogs_memory.ipynb"]["linear-attention"]
    assert row["status"] == "failed" and "got: reached the memory limit (6 GiB)" in row["feedback"]
    assert graded.rows["hogs_memory.ipynb"]["attention-pool"]["status"] == "passed"


def test_a_student_who_floods_the_grader_with_reports_is_stopped(graded):
    rows = graded.rows["floods_the_grader.ipynb"]
    assert [rows[n]["status"] for n in DEMO] == ["error", "error"]
    assert "more reports than the notebook has cells and cases" in rows["linear-attention"]["feedback"]


@pytest.mark.skipif(
    not containable(REFUSE_NAMESPACES), reason="needs util-linux unshare to refuse namespaces to the grader"
)
def test_without_namespaces_a_student_still_costs_only_itself(tmp_path):
    work = tmp_path / "submitted"
    work.mkdir()
    student(work, "right.ipynb", ATTENTION, POOL)
    student(work, "kills_parent.ipynb", ATTENTION + KILLS_PARENT, POOL)
    student(work, "kills_group.ipynb", ATTENTION + KILLS_GROUP, POOL)
    student(work, "forks.ipynb", FORKS + ATTENTION, POOL)
    result = grade(work, "--out", tmp_path / "grades", "--jobs", 2, sessions=True)
    assert "processes: own session under a supervisor" in result.stdout
    rows = rows_of(tmp_path / "grades")
    for name in ("right.ipynb", "kills_parent.ipynb", "forks.ipynb"):  # the parent is a supervisor: it dies alone
        assert [rows[name][n]["status"] for n in DEMO] == ["passed", "passed"], name
    assert killed_by_itself(rows["kills_group.ipynb"]["linear-attention"])
    assert "from a process of yours" in rows["kills_group.ipynb"]["linear-attention"]["feedback"]
    assert processes_named("hostile-fork") == []


# == a grader that dies =====================================================================


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the students' processes in Linux's /proc")
def test_a_killed_grader_leaves_every_finished_grade_and_the_same_command_resumes(tmp_path):
    work, out, go = tmp_path / "submitted", tmp_path / "grades", tmp_path / "go"
    work.mkdir()
    student(work, "quick.ipynb", ATTENTION, POOL)
    student(work, "waits.ipynb", f"GO = {str(go)!r}\n" + WAITS + ATTENTION, POOL)  # until the file go exists
    args = [work, "--out", out, "--jobs", 2]
    first = subprocess.Popen(
        [sys.executable, "-m", "course_lib.grading", *map(str, args)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    record = out / "records" / "quick.json"
    try:
        for _ in range(3000):  # until quick.ipynb is graded while waits.ipynb waits
            if record.exists() and processes_named("waiting-student"):
                break
            time.sleep(0.1)
        else:
            pytest.fail("quick.ipynb was never graded while waits.ipynb ran")
    finally:
        first.send_signal(signal.SIGKILL)  # as a power cut would: no clean-up runs in the grader
        first.wait()
    assert list(rows_of(out)) == ["quick.ipynb"] and set(DEMO) <= set(rows_of(out)["quick.ipynb"])  # complete
    for _ in range(300):  # the supervisors see the grader gone and end what they started
        if not processes_named("waiting-student"):
            break
        time.sleep(0.1)
    assert processes_named("waiting-student") == []
    kept = record.read_bytes()
    go.touch()
    second = grade(*args)
    assert "1 of 2 notebooks already graded" in second.stdout and record.read_bytes() == kept
    rows = rows_of(out)
    assert [[rows[name][n]["status"] for n in DEMO] for name in rows] == [["passed", "passed"]] * 2
