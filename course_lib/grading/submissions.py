"""A student's notebook, read without running it: which course notebook it is a copy of, where it
calls ``check(...)``, and which of its code cells the exercises need.

Nothing here runs the student's code: cells are parsed (IPython's magics rewritten first) and the
names they bind and read decide what :mod:`course_lib.grading.grader` sends to the student's process.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

COURSE_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


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
