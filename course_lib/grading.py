"""Grade a class: every student's exercises, checked where the student's code cannot reach the checker.

``python3 course.py grade PATH... [--out DIR] [--timeout SECONDS]`` (or ``python -m course_lib.grading``)
grades student copies of the course notebooks. How one notebook is graded:

1. **Which notebook is it?** Found by its cells: the exercises its ``check("name", fn)`` calls name, else
   the markdown cells it shares with a course notebook. File names do not matter.
2. **The answers come first.** Before any student code runs, this process builds every case of every
   exercise (the visible ones of ``exercises.py`` and the instructor-only ones of ``hidden_cases.py``)
   and computes the expected answers with the reference solutions.
3. **The student's code runs elsewhere.** A fresh Python process (its own temporary working folder,
   memory and file-size limits, an audit hook refusing writes, deletes and new processes outside that
   folder, output discarded) runs, in order and with the CI training budget, the code cells the
   exercises depend on: each exercise's cell and every earlier cell that binds or changes a name one of
   them reads (``--every-cell`` runs them all). Training, plots and explorers are then skipped, and a
   broken or endless cell the exercises do not need costs nothing. The statements that call
   ``check(...)`` are left out; right after an exercise's cell the process takes
   the function the call named, calls it on the cases' *inputs* (only inputs are sent) and sends back
   what it returned, as tensors and plain values (read back with ``torch.load(weights_only=True)``:
   nothing the student's process sends can run code here).
4. **This process compares**, with the checker's own comparison, so a student who redefines ``check``,
   patches ``course_lib`` or torch in their kernel, or prints "passed" changes nothing.

A bad notebook costs one student: a cell that raises is noted and the next cells still run; a cell or
an exercise that runs past ``--timeout`` is interrupted (its exercise is ``timeout``) and the rest goes
on; a process that dies or cannot be interrupted is replaced by a new one that replays the notebook
without the offending cell. Several notebooks are graded in parallel (``--jobs``).
"""

from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import io
import json
import numbers
import os
import queue
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .exercises import EXERCISES, _same, _show
from .hidden_cases import HIDDEN

COURSE_NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
STATUSES = ("passed", "failed", "error", "timeout", "not attempted")
COLUMNS = ("notebook", "exercise", "status", "cases_passed", "cases_total", "feedback")
GRACE_S = 10.0  # how long a process may ignore its own interrupt before it is killed
MAX_RESTARTS = 4  # processes killed per notebook before the rest of it is given up
MAX_RETURNED = 1 << 24  # elements of a returned tensor sent back; more is reported, not sent
_UNPORTABLE = "__grading_unportable__"


# == the cases and their answers (computed here, before any student code runs) ==============


@dataclass
class GradedCase:
    """One case of one exercise: its inputs as shown, its expected answer, visible or hidden."""

    note: str
    hidden: bool
    args_text: str
    expected: Any


@dataclass
class Answers:
    """Every exercise's cases: inputs to send to the student's process, answers to keep here."""

    cases: dict[str, list[GradedCase]]
    inputs: dict[str, list[tuple]]

    @classmethod
    def build(cls, names: Iterable[str] | None = None) -> Answers:
        cases, inputs = {}, {}
        for name in names if names is not None else EXERCISES:
            ex = EXERCISES[name]
            hidden = HIDDEN.get(name, lambda: [])
            made = [(c, False) for c in ex.cases()] + [(c, True) for c in hidden()]
            fresh = ex.cases() + hidden()  # a second copy: the one sent cannot be the one answered from
            cases[name] = [
                GradedCase(c.note, h, ", ".join(_show(a, 120) for a in c.args), ex.reference(*c.args)) for c, h in made
            ]
            inputs[name] = [c.args for c in fresh]
        return cls(cases, inputs)


# == finding the exercises in a notebook ====================================================


def read_notebook(path: Path) -> list[dict]:
    """The cells of the notebook at ``path``; ValueError with a readable reason if it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not a notebook (cannot be read as JSON: {type(err).__name__}: {err})") from None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise ValueError("not a notebook (no list of cells in its JSON)")
    return cells


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _python(source: str) -> str:
    """A cell's source as plain Python: IPython's ``%magics`` and ``!shell`` lines rewritten."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:
        return source


_CHECK_RE = re.compile(r"""check\(\s*["']([A-Za-z0-9_-]+)["']\s*,\s*([^)]*?)\s*\)""")


def _is_check_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or len(node.args) < 2:
        return False
    func = node.func
    named = (isinstance(func, ast.Name) and func.id == "check") or (
        isinstance(func, ast.Attribute) and func.attr == "check"
    )
    first = node.args[0]
    return named and isinstance(first, ast.Constant) and isinstance(first.value, str)


def find_checks(source: str) -> tuple[list[tuple[str, str]], str]:
    """The ``check("name", fn)`` calls of one cell, as (name, source of fn), and the cell without the
    statements that make them (the grader checks; the student's own call is not needed)."""
    python = _python(source)
    try:
        tree = ast.parse(python)
    except SyntaxError:  # the cell will fail when run; still say which exercise it was meant to be
        return [(m[0], m[1]) for m in _CHECK_RE.findall(source)], python
    found, kept = [], []
    for statement in tree.body:
        calls = [n for n in ast.walk(statement) if _is_check_call(n)]
        found += [(c.args[0].value, ast.unparse(c.args[1])) for c in calls]
        compound = isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For))
        if not calls or compound or isinstance(statement, (ast.While, ast.With, ast.Try)):
            kept.append(statement)
    return found, ast.unparse(ast.Module(body=kept, type_ignores=[])) if len(kept) < len(tree.body) else python


@dataclass
class CourseNotebook:
    name: str
    exercises: list[str]
    markdown: set[str]


def _fingerprint(text: str) -> str:
    return hashlib.sha1(" ".join(text.split()).encode()).hexdigest()


def course_notebooks(folder: Path = COURSE_NOTEBOOKS) -> list[CourseNotebook]:
    """The course's notebooks: the exercises each one checks, the markdown cells that identify it."""
    found = []
    for path in sorted(folder.glob("*.ipynb")):
        cells = read_notebook(path)
        names = [n for c in cells if c.get("cell_type") == "code" for n, _ in _CHECK_RE.findall(_source(c))]
        markdown = {_fingerprint(_source(c)) for c in cells if c.get("cell_type") == "markdown" and _source(c).strip()}
        found.append(CourseNotebook(path.stem, list(dict.fromkeys(names)), markdown))
    return found


def identify(cells: list[dict], course: list[CourseNotebook]) -> CourseNotebook | None:
    """The course notebook these cells are a copy of: most exercises in common, then most markdown cells."""
    checked = {n for c in cells if c.get("cell_type") == "code" for n, _ in _CHECK_RE.findall(_source(c))}
    markdown = {_fingerprint(_source(c)) for c in cells if c.get("cell_type") == "markdown"}
    scored = [(len(checked & set(nb.exercises)), len(markdown & nb.markdown), nb) for nb in course]
    best = max(scored, key=lambda s: s[:2], default=None)
    if best is None or (best[0] == 0 and best[1] < 2):
        return None
    return best[2]


@dataclass
class Plan:
    """What the student's process runs: the code cells (check statements left out) and, after the cell
    of each exercise's last ``check`` call, that exercise's function (the source of its second argument)."""

    cells: list[tuple[int, str]]  # (cell number in the notebook, 1-based; code to run)
    points: dict[int, list[tuple[str, str]]]  # position in cells -> [(exercise, source of fn)]
    demonstrations: set[int] = field(default_factory=set)  # cells tagged raises-exception: errors expected


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _top_level(body: list[ast.stmt]) -> Iterable[ast.AST]:
    """The nodes of a cell outside its functions' bodies (their decorators, defaults, annotations included)."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _SCOPES):
            a = node.args
            given = (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
            stack += [*getattr(node, "decorator_list", []), *a.defaults, *a.kw_defaults, getattr(node, "returns", None)]
            stack += [x.annotation for x in given if x is not None]  # evaluated when the function is defined
            stack = [n for n in stack if n is not None]
        else:
            stack += ast.iter_child_nodes(node)


def _reads(body: list[ast.stmt], params: frozenset[str] | None = None) -> set[str]:
    """The names a cell (``params`` None) or a function reads from outside: a function's parameters and
    the names it assigns are its own, so ``def f(step): ...`` does not need an earlier ``step``."""
    loaded, stored, declared = set(), set(params or ()), set()
    for node in _top_level(body):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, _SCOPES):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None]
            inner = node.body if isinstance(node.body, list) else [node.body]
            loaded |= _reads(inner, frozenset(names))
            if not isinstance(node, ast.Lambda):
                stored.add(node.name)
    own = stored - declared if params is not None else set()
    return loaded - own


def names_of(python: str) -> tuple[set[str] | None, set[str], set[str], set[str]]:
    """What a cell does with names: those it may bind or change (None: any, as ``import *`` does),
    those it reads (inside its functions too), those it imports, and those whose methods it calls."""
    try:
        tree = ast.parse(python)
    except SyntaxError:
        return set(), set(), set(), set()
    bound: set[str] = set()
    imported: set[str] = set()
    called: set[str] = set()
    used = _reads(tree.body)
    bound = {n.id for n in _top_level(tree.body) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    for node in ast.walk(tree):  # what a function changes when called counts too
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None, used, imported, called
                imported.add((alias.asname or alias.name).split(".")[0])
                bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Global):
            bound.update(node.names)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = node.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                bound.add(base.id)  # F.softmax = ..., table[0] = ...: the object changes
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                called.add(base.id)  # items.append(...), model.load_state_dict(...): may change it
    return bound, used, imported, called


def plan(cells: list[dict], exercises: Iterable[str], every_cell: bool = False) -> Plan:
    """The cells to run and where each exercise is graded. Unless ``every_cell``, only the cells an
    exercise depends on run: those that bind (or change) a name that its cell, or a cell it depends on,
    reads. Training, plots and explorers are then not run, and cannot fail or hang."""
    wanted = set(exercises)
    code, last, demonstrations, names = [], {}, set(), []
    for number, cell in enumerate(cells, start=1):
        if cell.get("cell_type") != "code":
            continue
        metadata = cell.get("metadata")
        tags = metadata.get("tags") if isinstance(metadata, dict) else None
        if isinstance(tags, list) and "raises-exception" in tags:
            demonstrations.add(number)
        checks, runnable = find_checks(_source(cell))
        for name, fn in checks:
            if name in wanted:
                last[name] = (len(code), fn)
        code.append((number, runnable))
        names.append(names_of(runnable))
    modules = set().union(*(n[2] for n in names))  # torch.manual_seed(0) does not change what torch is
    keep = set(range(len(code))) if every_cell else set()
    for position, fn in last.values():
        needed = set(names[position][1]) | names_of(fn)[1]
        keep.add(position)
        for earlier in range(position - 1, -1, -1):
            bound, used, _, called = names[earlier]
            if bound is None or (bound | (called - modules)) & needed:
                keep.add(earlier)
                needed |= used
    kept = sorted(keep)
    index = {position: k for k, position in enumerate(kept)}
    points: dict[int, list[tuple[str, str]]] = {}
    for name in exercises:
        if name in last:
            position, fn = last[name]
            points.setdefault(index[position], []).append((name, fn))
    return Plan([code[k] for k in kept], points, demonstrations)


# == the student's process ==================================================================


class StepTimeout(BaseException):
    """Raised in the student's process when a cell or an exercise runs past the time limit."""


def _portable(value: Any, depth: int = 0) -> Any:
    """What a student's function returned, as tensors and plain values only (safe to read back)."""
    try:
        if depth > 20:
            raise ValueError("nested too deeply")
        if isinstance(value, torch.Tensor):
            if value.numel() > MAX_RETURNED:
                raise ValueError(f"a tensor of shape {tuple(value.shape)} is too large to return")
            return value.detach().to("cpu").clone()
        if value is None or type(value) in (bool, int, float, str):
            return value
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):
            return float(value)
        if isinstance(value, str):
            return str(value)
        if isinstance(value, dict):
            return {_portable(k, depth + 1): _portable(v, depth + 1) for k, v in list(value.items())[:100_000]}
        if isinstance(value, tuple):
            return tuple(_portable(v, depth + 1) for v in value[:100_000])
        if isinstance(value, list):
            return [_portable(v, depth + 1) for v in value[:100_000]]
        raise TypeError("not a tensor or a plain value")
    except Exception as err:
        try:
            shown = repr(value)[:200]
        except Exception:
            shown = "?"
        return {_UNPORTABLE: f"an object of type {type(value).__name__} ({err}): {shown}"}


def _guard(root: Path) -> None:
    """Refuse writes, deletes and new processes outside ``root`` from now on (an audit hook)."""
    allowed = (str(root.resolve()), "/dev/null", "/dev/shm")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    path_events = {"os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.link"}
    path_events |= {"os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "os.removexattr", "os.setxattr"}
    spawn_events = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork"}
    spawn_events |= {"os.forkpty", "pty.spawn"}
    realpath, startswith, fspath = os.path.realpath, str.startswith, os.fspath

    def inside(path: Any) -> bool:
        if isinstance(path, int) or path is None:
            return True
        try:
            resolved = realpath(fspath(path))
        except Exception:
            return False
        return any(resolved == a or startswith(resolved, a + os.sep) for a in allowed)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(m in mode for m in "wax+")) or bool((flags or 0) & write_flags)
            if writing and not inside(path):
                raise PermissionError(f"grading: writing {path!r} outside the working folder is not allowed")
        elif event in path_events:
            for path in args[:2] if event in ("os.rename", "os.link", "os.symlink") else args[:1]:
                if not inside(path):
                    raise PermissionError(f"grading: changing {path!r} outside the working folder is not allowed")
        elif event in spawn_events:
            raise PermissionError("grading: starting other processes is not allowed")

    sys.addaudithook(hook)


def _child_main() -> None:  # pragma: no cover - runs in the student's process (tested through grade_notebook)
    """The student's process: read the job from stdin, run it, report on file descriptor ``argv[1]``."""
    channel = os.fdopen(int(sys.argv[1]), "wb", buffering=0)
    job = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)

    def send(event: dict) -> None:
        buffer = io.BytesIO()
        torch.save(event, buffer)
        channel.write(struct.pack(">Q", buffer.tell()) + buffer.getvalue())

    try:
        import resource

        limit = int(job["memory_gb"] * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails instead of killing
    except (ImportError, ValueError, OSError, AttributeError):
        pass
    torch.set_num_threads(int(os.environ.get("COURSE_THREADS", "1")))

    def on_alarm(signum, frame):
        raise StepTimeout

    signal.signal(signal.SIGALRM, on_alarm)

    def timed(kind: str, what: Any) -> None:
        send({"event": "step", "kind": kind, "what": what})
        signal.setitimer(signal.ITIMER_REAL, job["timeout"])

    def untimed() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    namespace = shell.user_ns
    _guard(Path.cwd())
    skip, done = set(job["skip"]), set(job["done"])
    for position, (number, code) in enumerate(job["cells"]):
        if position not in skip:
            error = None
            try:
                timed("cell", position)
                exec(compile(code, f"<cell {number}>", "exec"), namespace)
                untimed()
            except StepTimeout:
                error = "timeout"
            except BaseException as err:  # the student's cell failing is a result to report
                untimed()
                error = f"{type(err).__name__}: {err}"[:300]
            send({"event": "cell", "position": position, "error": error})
        for name, fn_source in job["points"].get(position, []):
            if name in done:
                continue
            try:
                timed("exercise", name)
                try:
                    fn = eval(fn_source, namespace)
                    if not callable(fn):
                        raise TypeError(f"{fn_source} is not a function")
                except Exception as err:
                    untimed()
                    send({"event": "missing", "name": name, "error": f"{type(err).__name__}: {err}"[:300]})
                    continue
                for k, args in enumerate(job["inputs"][name]):
                    try:
                        got = {"value": _portable(fn(*args))}
                    except StepTimeout:
                        raise
                    except BaseException as err:
                        got = {"error": f"raised {type(err).__name__}: {err}"[:300], "type": type(err).__name__}
                    send({"event": "case", "name": name, "k": k, **got})
                untimed()
                send({"event": "graded", "name": name})
            except StepTimeout:
                send({"event": "timeout", "name": name})
    untimed()
    send({"event": "end"})
    channel.close()
    os._exit(0)  # no clean-up code of the student's objects runs after the report


# == grading one notebook ===================================================================


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

    def row(self) -> dict:
        return {
            "notebook": self.notebook,
            "exercise": self.exercise,
            "status": self.status,
            "cases_passed": self.cases_passed,
            "cases_total": self.cases_total,
            "feedback": " ".join(self.feedback.split()),
        }


@dataclass
class NotebookReport:
    path: str
    course_notebook: str | None
    grades: list[Grade]
    notes: list[str]
    seconds: float


def _got_text(result: dict) -> str:
    if "error" in result:
        return str(result["error"])[:300]
    value = result.get("value")
    try:
        if isinstance(value, dict) and _UNPORTABLE in value:
            return str(value[_UNPORTABLE])[:300]
        return _show(value)
    except Exception:
        return "a value that cannot be shown"


def _score(notebook: str, name: str, answers: Answers, results: dict[int, dict], ending: str | None) -> Grade:
    """Compare what the function returned with the answers; ``ending`` is how grading stopped early
    (``timeout`` or ``error: ...``), None when every case ran."""
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
        checked.append((case, ok, _got_text(result)))
    passed = sum(ok for _, ok, _ in checked)
    total = len(cases)
    visible = sum(not c.hidden for c in cases)
    vis_ok = sum(ok for c, ok, _ in checked if not c.hidden)
    hid_ok = passed - vis_ok
    counts = f"visible cases {vis_ok}/{visible}, hidden cases {hid_ok}/{total - visible}"
    if ending is None and results and all(r.get("type") == "NotImplementedError" for r in results.values()):
        return Grade(
            notebook, name, "not attempted", 0, total, "the function still raises NotImplementedError", checked
        )
    failing = next(((k, c, got) for k, (c, ok, got) in enumerate(checked) if not ok), None)
    parts = [counts]
    if ending == "timeout":
        status = "timeout"
        parts.append(f"stopped after {len(checked)} of {total} cases: it ran past the time limit")
    elif ending is not None:
        status = "error"
        parts.append(f"stopped after {len(checked)} of {total} cases: {ending}")
    else:
        status = "passed" if passed == total else "failed"
    if failing is not None:
        k, case, got = failing
        kind = "hidden" if case.hidden else "visible"
        number = k + 1 - (visible if case.hidden else 0)
        of = total - visible if case.hidden else visible
        parts.append(
            f"first failure: {kind} case {number} of {of}"
            + (f" ({case.note})" if case.note else "")
            + f"; input: {case.args_text}; expected: {_show(case.expected)}; got: {got}; hint: {ex.hint}"
        )
    return Grade(notebook, name, status, passed, total, "; ".join(parts), checked)


def _read_frames(stream, events: queue.Queue) -> None:
    """Read length-prefixed frames from the student's process; anything malformed ends the stream."""
    try:
        while True:
            header = stream.read(8)
            if len(header) < 8:
                break
            (size,) = struct.unpack(">Q", header)
            if size > 1 << 31:
                break
            payload = stream.read(size)
            if len(payload) < size:
                break
            event = torch.load(io.BytesIO(payload), weights_only=True)
            if not isinstance(event, dict) or "event" not in event:
                break
            events.put(event)
    except Exception:
        pass
    events.put(None)


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
) -> NotebookReport:
    """Grade one student's notebook (see the module's docstring); never raises for a bad notebook."""
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
    steps = plan(cells, names, every_cell)
    notes: list[str] = []
    grades: dict[str, Grade] = {}
    for name in names:
        if not any(name == n for point in steps.points.values() for n, _ in point):
            grades[name] = Grade(
                label, name, "not attempted", 0, len(answers.cases[name]), f'no check("{name}", ...) call'
            )
    skip: set[int] = set()
    restarts = 0
    while len(grades) < len(names):
        ended = _run_once(path, steps, answers, grades, skip, notes, label, timeout, threads, memory_gb)
        if ended:
            break
        restarts += 1
        if restarts > MAX_RESTARTS:
            for name in names:
                if name not in grades:
                    why = f"not graded: the notebook's process had to be stopped {restarts} times"
                    grades[name] = Grade(label, name, "error", 0, len(answers.cases[name]), why)
            break
    for name in names:  # a point never reached: the process ended without grading it
        grades.setdefault(name, Grade(label, name, "error", 0, len(answers.cases[name]), "not reached"))
    return NotebookReport(label, copy_of.name, [grades[n] for n in names], notes, time.perf_counter() - start)


def _run_once(
    path: Path,
    steps: Plan,
    answers: Answers,
    grades: dict[str, Grade],
    skip: set[int],
    notes: list[str],
    label: str,
    timeout: float,
    threads: int,
    memory_gb: float,
) -> bool:
    """One student's process over the notebook; True when it reached the end. After a kill or a crash
    the cell or exercise that was running is settled (skipped, or graded ``timeout``/``error``)."""
    work = Path(tempfile.mkdtemp(prefix="grading-"))
    names = [n for point in steps.points.values() for n, _ in point]
    job = {
        "cells": steps.cells,
        "points": steps.points,
        "inputs": {n: answers.inputs[n] for n in names if n not in grades},
        "skip": sorted(skip),
        "done": sorted(grades),
        "timeout": float(timeout),
        "memory_gb": float(memory_gb),
    }
    buffer = io.BytesIO()
    torch.save(job, buffer)
    read_fd, write_fd = os.pipe()
    command = [sys.executable, "-c", "from course_lib.grading import _child_main; _child_main()", str(write_fd)]
    process = subprocess.Popen(
        command,
        cwd=work,
        env=child_environment(threads, work),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(write_fd,),
        start_new_session=True,
    )
    os.close(write_fd)
    events: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_frames, args=(os.fdopen(read_fd, "rb"), events), daemon=True)
    reader.start()
    try:
        process.stdin.write(buffer.getvalue())
        process.stdin.close()
    except OSError:
        pass
    step, results, ended, killed = None, {}, False, None
    deadline = time.monotonic() + 120 + timeout  # starting Python and torch
    try:
        while True:
            try:
                event = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                killed = "timeout"
                break
            if event is None:
                break
            try:
                kind = event["event"]
                if kind == "step":
                    step = (event["kind"], event["what"])
                    results = {}
                    deadline = time.monotonic() + timeout + GRACE_S
                elif kind == "cell":
                    number = steps.cells[event["position"]][0]
                    if event["error"] == "timeout":
                        notes.append(f"cell {number} ran past {timeout:g} s and was interrupted")
                        _settle_cell(steps, event["position"], "timeout", grades, answers, label, timeout)
                    elif event["error"] and number not in steps.demonstrations:
                        notes.append(f"cell {number} raised {event['error']}")
                    step = None
                    deadline = time.monotonic() + timeout + GRACE_S
                elif kind == "case":
                    results[int(event["k"])] = event
                elif kind in ("graded", "timeout"):
                    name = event["name"]
                    if name not in names:
                        raise ValueError(name)
                    if name not in grades:
                        grades[name] = _score(label, name, answers, results, None if kind == "graded" else "timeout")
                    step = None
                elif kind == "missing":
                    name = event["name"]
                    if name not in names:
                        raise ValueError(name)
                    if name not in grades:
                        why = f"the function could not be found after its cell ran: {event['error']}"
                        grades[name] = Grade(label, name, "error", 0, len(answers.cases[name]), why)
                    step = None
                elif kind == "end":
                    ended = True
                    break
            except Exception:  # a report this process did not send: stop trusting the process
                killed = "protocol"
                break
    finally:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                process.kill()
        process.wait()
        reader.join(timeout=5)
        shutil.rmtree(work, ignore_errors=True)
    if ended:
        return True
    if killed == "protocol":
        why = "error: the process sent a malformed report"
    else:
        why = "timeout" if killed else f"error: the process died ({_exit_reason(process.returncode)})"
    if step is None:  # between steps, or before the first: nothing to blame, nothing to retry
        notes.append(f"the notebook's process stopped outside any cell ({why})")
        for name in names:
            grades.setdefault(name, Grade(label, name, "error", 0, len(answers.cases[name]), why))
        return True
    kind, what = step
    if kind == "cell":
        number = steps.cells[what][0]
        stuck = "ran past the time limit and could not be interrupted"
        notes.append(f"cell {number}: {stuck if why == 'timeout' else why}")
        skip.add(what)
        _settle_cell(steps, what, why, grades, answers, label, timeout)
    elif what in names and what not in grades:
        grades[what] = _score(label, what, answers, results, why)
    return False


def _settle_cell(
    steps: Plan, position: int, why: str, grades: dict, answers: Answers, label: str, timeout: float
) -> None:
    """A cell that timed out or killed the process: the exercises checked in it get that status."""
    for name, _ in steps.points.get(position, []):
        if name not in grades:
            status = "timeout" if why == "timeout" else "error"
            text = f"its cell ran past {timeout:g} s" if why == "timeout" else f"its cell failed: {why}"
            grades[name] = Grade(label, name, status, 0, len(answers.cases[name]), text)


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return f"killed by {name}" + (", probably out of memory" if name == "SIGKILL" else "")
    return f"exit code {code}"


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


def feedback_markdown(report: NotebookReport) -> str:
    """The file a student gets back: each exercise's status, every case, the first failure in full."""
    lines = [f"# Feedback: {Path(report.path).name}", ""]
    if report.course_notebook:
        lines += [f"Graded as notebook `{report.course_notebook}`, with the CI training budget.", ""]
    lines += ["| exercise | status | cases passed |", "|---|---|---|"]
    lines += [f"| {g.exercise or '-'} | {g.status} | {g.cases_passed}/{g.cases_total} |" for g in report.grades]
    for g in report.grades:
        lines += ["", f"## {g.exercise or 'the file'}: {g.status}", ""]
        if g.cases and g.status != "not attempted":
            for case, ok, _ in g.cases:
                kind = "hidden" if case.hidden else "visible"
                lines.append(f"- {'✅' if ok else '❌'} {kind}: {case.note or 'case'}")
            missing = g.cases_total - len(g.cases)
            if missing:
                lines.append(f"- ⏹ {missing} more case(s) not run")
            failing = next(((c, got) for c, ok, got in g.cases if not ok), None)
            if failing:
                case, got = failing
                hint = EXERCISES[g.exercise].hint
                lines += ["", "First failing case" + (f" ({case.note})" if case.note else "") + ":", "", "```"]
                lines += [f"input:    {case.args_text}", f"expected: {_show(case.expected)}", f"got:      {got}"]
                lines += ["```", "", f"Hint: {hint}"]
        elif g.feedback:
            lines.append(g.feedback)
    if report.notes:
        lines += ["", "## Notes on the run", ""] + [f"- {n}" for n in report.notes[:20]]
    return "\n".join(lines) + "\n"


def summary_table(reports: list[NotebookReport]) -> str:
    """One line per exercise: how many students got each status, and the mean share of cases passed."""
    rows: dict[str, dict[str, int]] = {}
    share: dict[str, list[float]] = {}
    for report in reports:
        for g in report.grades:
            key = g.exercise or "(not gradable)"
            rows.setdefault(key, dict.fromkeys(STATUSES, 0))[g.status] += 1
            share.setdefault(key, []).append(g.cases_passed / g.cases_total if g.cases_total else 0.0)
    width = max([len("exercise"), *map(len, rows)])
    head = f"{'exercise':<{width}}  " + "  ".join(f"{s:>13}" for s in STATUSES) + "   mean cases"
    lines = [head, "-" * len(head)]
    for key, counts in rows.items():
        mean = sum(share[key]) / len(share[key])
        lines.append(f"{key:<{width}}  " + "  ".join(f"{counts[s]:>13}" for s in STATUSES) + f"   {mean:>9.0%}")
    return "\n".join(lines)


def grade_class(
    paths: Iterable[str | Path],
    out: str | Path,
    *,
    timeout: float = 60.0,
    jobs: int | None = None,
    memory_gb: float = 6.0,
    course_folder: Path = COURSE_NOTEBOOKS,
    every_cell: bool = False,
    log: Callable[[str], None] = print,
) -> list[NotebookReport]:
    """Grade every notebook under ``paths`` into ``out``/grades.csv and ``out``/feedback/*.md."""
    notebooks = find_notebooks(paths)
    jobs = jobs or max(1, min(len(notebooks), (os.cpu_count() or 2) // 2 or 1))
    threads = 1 if jobs > 1 else 2
    course = course_notebooks(course_folder)
    answers = Answers.build()
    out = Path(out)
    (out / "feedback").mkdir(parents=True, exist_ok=True)

    def one(path: Path) -> NotebookReport:
        report = grade_notebook(
            path, answers, course, timeout=timeout, threads=threads, memory_gb=memory_gb, every_cell=every_cell
        )
        statuses = ", ".join(f"{g.exercise or 'file'} {g.status}" for g in report.grades)
        log(f"{path}: {statuses} ({report.seconds:.0f} s)")
        return report

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        reports = list(pool.map(one, notebooks))
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for report in reports:
            writer.writerows(g.row() for g in report.grades)
    used: set[str] = set()
    for report in reports:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(report.path).stem) or "notebook"
        name, k = stem, 1
        while name in used:
            k += 1
            name = f"{stem}-{k}"
        used.add(name)
        (out / "feedback" / f"{name}.md").write_text(feedback_markdown(report), encoding="utf-8")
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course.py grade", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="student notebooks, or folders of them")
    parser.add_argument("--out", default="grades", help="folder for grades.csv and feedback/ (default: grades)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per cell and per exercise (default 60)")
    parser.add_argument("--jobs", type=int, default=None, help="notebooks graded at once (default: half the cores)")
    parser.add_argument(
        "--every-cell", action="store_true", help="run every code cell, not only those the exercises depend on"
    )
    parser.add_argument("--memory", type=float, default=6.0, help="GiB of memory per notebook (default 6)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    reports = grade_class(
        args.paths, args.out, timeout=args.timeout, jobs=args.jobs, memory_gb=args.memory, every_cell=args.every_cell
    )
    if not reports:
        print("no notebooks found under " + ", ".join(args.paths))
        return 2
    print()
    print(summary_table(reports))
    took = time.perf_counter() - start
    print(f"\n{len(reports)} notebooks in {took:.0f} s; grades in {Path(args.out) / 'grades.csv'}, ", end="")
    print(f"feedback in {Path(args.out) / 'feedback'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
