"""Self-checks for the exercises at the end of each notebook.

A student writes a function and calls ``check("exercise-name", their_function)``. The
checker runs it on a handful of cases and answers "passed" or, for the first case that
fails, the input, the expected answer, what the function returned and a hint. Hints come in
steps: a nudge on the first failure, more on each failure after it (counted per exercise in
the running kernel). A starter function that still raises ``NotImplementedError`` gets one
neutral line, so a notebook is stored showing no case, no answer and no hint. Each call gets a
fresh copy of its case's inputs (:func:`call`), and a function that changes one of them in place
fails that case: the statements ask for a new value, and the caller's tensors must stay as they were.

An exercise may ban functions (``bans``). Before the first case, the student's function is read
(:func:`banned_use`): its code and the code nested in it, its default arguments, closures, the globals
it names (followed through the student's own functions, classes and containers) and the attributes it
names on modules (a re-export such as ``course_lib.rl.wilson_interval`` is the banned function itself);
reaching a banned function, or torch's private namespaces (``torch._C``, ``torch.ops``, ``torch._*``),
fails every case with a sentence saying how. While the cases run, each banned function is replaced,
in its module and in every module that re-exports it, by one that raises :class:`BannedFunction`. A
ban is a rule the checker enforces against these routes, not a sandbox: code built to hide what it
calls (names assembled at run time) can still get through, and the grader runs the same checks.

Each case's expected answer is either the case's own ``expected`` value (for an exercise whose
answer is no course_lib function: nothing a student could import answers it) or the
``reference`` applied to the case's inputs (a tested course_lib function, so the exercise and
the course can never disagree). Reference solutions for instructors are in
:mod:`course_lib.grading.solutions` (``python3 course.py solutions NAME``).

The file reads in the order of the course: first the checker, then one block per exercise,
grouped by notebook (00's exercises first). A block holds everything about one exercise:
``@exercise(name, reference=..., hint=...)`` on the function that builds its cases.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import inspect
import math
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .attention import causal_mask, softmax
from .quantization import unpack_int4

_FROM_REFERENCE: Any = object()  # a case without its own expected value: the reference answers it


@dataclass
class Case:
    args: tuple
    note: str = ""
    expected: Any = _FROM_REFERENCE  # the answer, for an exercise without a reference
    hint: int | str | None = None  # what this case tests: a step of the exercise's hint (from 0), or its own


@dataclass
class Exercise:
    """The cases to try a student's function on, how each is answered, hints in steps, bans."""

    name: str
    reference: Callable | None
    cases: Callable[[], list[Case]]
    hints: tuple[str, ...]
    bans: tuple[str, ...] = ()
    prediction: bool = False  # a visible failure does not show the expected value: it is to be predicted

    def steps(self, case_hint: int | str | None = None) -> tuple[str, ...]:
        """The hint's steps in the order a failure of a case naming ``case_hint`` shows them: the
        step that case tests (or its own hint) first, then the exercise's steps in their order."""
        if case_hint is None:
            return self.hints
        if isinstance(case_hint, str):
            return (case_hint, *self.hints)
        return (self.hints[case_hint], *(h for i, h in enumerate(self.hints) if i != case_hint))

    def hint(self, case_hint: int | str | None = None) -> str:
        """Every step of the hint in one line (the grader's feedback, after the deadline)."""
        return " Then: ".join(self.steps(case_hint))

    def expected(self, case: Case) -> Any:
        """The answer to ``case``: its own ``expected`` value, else the reference's."""
        if case.expected is not _FROM_REFERENCE:
            return case.expected
        if self.reference is None:
            raise ValueError(f"exercise {self.name!r}: a case without an expected value and no reference")
        return self.reference(*case.args)


EXERCISES: dict[str, Exercise] = {}  # name -> Exercise, in the order the course uses them


def exercise(
    name: str,
    *,
    reference: Callable | None = None,
    hint: str | Sequence[str],
    bans: Sequence[str] = (),
    prediction: bool = False,
) -> Callable[[Callable[[], list[Case]]], Callable[[], list[Case]]]:
    """Register exercise ``name``; the decorated function returns its cases.

    ``hint`` is one string or a list of steps (a nudge first); a case may name the step it tests
    (``Case(..., hint=2)``) or bring a step of its own, shown first when that case fails. ``bans``
    names functions the student may not use, as dotted paths (``"torch.logsumexp"``,
    ``"torch.Tensor.logsumexp"``). ``prediction``: the exercise asks the student to predict its
    answers, so a failed check does not show the expected value. The cases are built afresh for
    every :func:`check`, so a student's function that changes its inputs in place cannot spoil
    the next attempt.
    """
    hints = (hint,) if isinstance(hint, str) else tuple(hint)
    for path in bans:
        _resolve(path)  # a misspelt ban fails here, not silently later

    def register(cases: Callable[[], list[Case]]) -> Callable[[], list[Case]]:
        if name in EXERCISES:
            raise ValueError(f"exercise {name!r} is defined twice")
        EXERCISES[name] = Exercise(name, reference, cases, hints, tuple(bans), prediction)
        return cases

    return register


# == bans: a function made unavailable while a check runs ===================================


class BannedFunction(RuntimeError):
    """Raised by a banned function called while its exercise is checked."""


def _resolve(path: str) -> tuple[Any, str]:
    """``"torch.nn.functional.layer_norm"`` -> (the module torch.nn.functional, "layer_norm")."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            owner = getattr(owner, part)
        if not hasattr(owner, parts[-1]):
            raise AttributeError(f"cannot ban {path!r}: there is no such function")
        return owner, parts[-1]
    raise ImportError(f"cannot ban {path!r}: no module to find it in")


def _originals(paths: Sequence[str]) -> dict[int, str]:
    """id of each banned function -> its path."""
    originals = {}
    for path in paths:
        owner, attr = _resolve(path)
        originals[id(getattr(owner, attr))] = path
    return originals


def _is_banned(fn: Any, originals: dict[int, str]) -> str | None:
    """The banned path ``fn`` is (or wraps with functools.partial or a decorator), else None."""
    for _ in range(100):
        if id(fn) in originals:
            return originals[id(fn)]
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif isinstance(getattr(fn, "__dict__", None), dict) and "__wrapped__" in fn.__dict__:
            fn = fn.__dict__["__wrapped__"]
        else:
            return None
    return None


_MODULE_INDEX: dict[tuple[frozenset[int], int], dict[int, list[tuple[Any, str]]]] = {}


def _module_names(ids: frozenset[int]) -> dict[int, list[tuple[Any, str]]]:
    """Every (module, name) of a loaded module that holds one of the objects ``ids``: the
    re-exports of a banned function (``course_lib.rl.wilson_interval`` is ``course_lib.evaluation``'s)."""
    key = (ids, len(sys.modules))
    if key not in _MODULE_INDEX:
        found: dict[int, list[tuple[Any, str]]] = {}
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                if id(value) in ids:
                    found.setdefault(id(value), []).append((module, name))
        _MODULE_INDEX.clear()  # one set of bans at a time is all a check needs
        _MODULE_INDEX[key] = found
    return _MODULE_INDEX[key]


@contextlib.contextmanager
def banned(paths: Sequence[str], fn: Any = None) -> Iterator[None]:
    """While inside, each of ``paths`` raises :class:`BannedFunction`: in its module or class, in every
    loaded module that re-exports it, and under any name ``fn``'s module or closure bound it to
    (``from torch import logsumexp``). What the call cannot reach this way (a default argument, a
    container, torch's private namespaces) :func:`banned_use` finds by reading ``fn``."""
    _missing = object()
    undo: list[tuple[Any, str, Any]] = []
    originals: dict[int, str] = {}

    def replace(owner: Any, attr: str, value: Any) -> None:
        before = owner.__dict__.get(attr, _missing) if isinstance(owner, type) else getattr(owner, attr)
        undo.append((owner, attr, before))
        setattr(owner, attr, value)

    def refusal(path: str) -> Callable:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise BannedFunction(f"{path} is banned in this exercise")

        return refuse

    try:
        for path in paths:
            owner, attr = _resolve(path)
            originals[id(getattr(owner, attr))] = path
            replace(owner, attr, refusal(path))
        for held, places in _module_names(frozenset(originals)).items():
            for module, name in places:
                if module.__dict__.get(name) is not None and id(module.__dict__[name]) == held:
                    replace(module, name, refusal(originals[held]))
        scopes = [getattr(fn, "__globals__", {})] if paths else []
        for scope in scopes:  # the student's own names for a banned function
            for name, value in list(scope.items()):
                if id(value) in originals:
                    undo.append((scope, name, value))
                    scope[name] = refusal(originals[id(value)])
        for cell in getattr(fn, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                if id(cell.cell_contents) in originals:
                    undo.append((cell, "cell_contents", cell.cell_contents))
                    cell.cell_contents = refusal(originals[id(cell.cell_contents)])
        yield
    finally:
        for owner, attr, before in reversed(undo):
            if isinstance(owner, dict):
                owner[attr] = before
            elif before is _missing:
                delattr(owner, attr)
            else:
                setattr(owner, attr, before)


class BanBypassed(RuntimeError):
    """Raised for a function that reaches a banned function by a route the check cannot close."""


_PRIVATE_TORCH = frozenset({"_C", "ops", "_ops", "_VF", "_execution_engine", "_refs", "_prims", "_decomp"})
"""Attribute names of torch's private namespaces (besides every ``torch._name``): where an exercise
bans a function, its C and ATen versions are reachable through them, so the check refuses them all."""

_LIBRARY_ROOTS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {*(sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")), Path(__file__).parent}
)


def _library(obj: Any) -> bool:
    """``obj`` is defined by the standard library, an installed package or course_lib (not read
    further: the ban replaces what they call by name), not by the student."""
    code = getattr(obj, "__code__", None)
    if code is not None:
        filename = code.co_filename
    else:
        module = getattr(obj, "__module__", None)
        if not isinstance(module, str) or module == "__main__":  # a notebook's own class
            return False
        filename = getattr(sys.modules.get(module), "__file__", None) or ("<built-in>" if module == "builtins" else "")
    if filename.startswith(("<frozen", "<built-in")):
        return True
    return bool(filename) and not filename.startswith("<") and str(Path(filename).resolve()).startswith(_LIBRARY_ROOTS)


def _code_names(code: Any) -> tuple[set[str], set[str]]:
    """The names a code object and the code nested in it use, and its string constants."""
    names, strings = set(code.co_names), set()
    for const in code.co_consts:
        if isinstance(const, str):
            strings.add(const)
        elif inspect.iscode(const):
            more, more_strings = _code_names(const)
            names |= more
            strings |= more_strings
    return names, strings


def _private(names: set[str], strings: set[str], scope: dict) -> list[str]:
    """The names and strings by which code reaches torch's private namespaces."""
    hits = {n for n in names if n not in scope and (n in _PRIVATE_TORCH or _torch_private(n))}
    hits |= {s for s in strings if s in _PRIVATE_TORCH or _torch_private(s) or s.startswith(("torch._", "torch.ops"))}
    return sorted(hits)


def _torch_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name in vars(torch)


def banned_use(paths: Sequence[str], fn: Any) -> str | None:
    """How ``fn`` uses a function that ``paths`` ban, in a sentence, read from ``fn`` before it runs:
    it is one (passing ``torch.logsumexp`` as the answer), or reaches one through a default argument,
    a closure, a global or an attribute it names, a container or class of its own, a function of its
    own that does (recursively), a re-export under another module's name, or torch's private
    namespaces (``torch._C``, ``torch.ops``, ``torch._*``). None when it does none of these."""
    if not paths:
        return None
    originals = _originals(paths)
    seen: set[int] = set()
    todo: list[tuple[Any, str]] = [(fn, "")]
    while todo and len(seen) < 100_000:
        obj, route = todo.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, complex, bool, torch.Tensor)) or obj is None:
            continue
        seen.add(id(obj))
        hit = _is_banned(obj, originals)
        if hit is not None:
            if not route:
                return f"{hit} is banned in this exercise: passing it is not writing it"
            return f"{hit} is banned in this exercise, and the function reaches it {route}"
        if isinstance(obj, functools.partial):
            todo += [(v, route or "through functools.partial") for v in (obj.func, *obj.args, *obj.keywords.values())]
        elif inspect.ismethod(obj):
            todo += [(obj.__func__, route), (obj.__self__, route)]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo += [(v, route or "kept in a container") for v in list(obj)]
        elif isinstance(obj, dict):
            todo += [(v, route or "kept in a container") for v in list(obj.values()) + list(obj)]
        elif inspect.ismodule(obj) or _library(obj):
            continue  # reached by name below, attribute by attribute
        elif inspect.isfunction(obj):
            name = obj.__qualname__
            found = _reached_by(obj, originals)
            if found is not None:
                return found
            todo += [(d, f"as a default argument of {name}") for d in obj.__defaults__ or ()]
            todo += [(d, f"as a default argument of {name}") for d in (obj.__kwdefaults__ or {}).values()]
            for cell in obj.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    todo.append((cell.cell_contents, route or f"through a name {name} closes over"))
            names, _ = _code_names(obj.__code__)
            todo += [
                (obj.__globals__[n], route or f"through the global {n} of {name}")
                for n in names
                if n in obj.__globals__
            ]
        elif isinstance(obj, type):
            todo += [(v, route or f"through the class {obj.__name__}") for v in list(vars(obj).values())]
        elif isinstance(getattr(obj, "__dict__", None), dict):
            todo += [
                (type(obj), route),
                *((v, route or "through an object's attribute") for v in list(vars(obj).values())),
            ]
    return None


def _reached_by(fn: Any, originals: dict[int, str]) -> str | None:
    """What ``fn``'s code reaches by attribute: a banned function as ``module.name`` (followed through
    the modules and classes it names, and modules named by a string), or torch's private namespaces."""
    names, strings = _code_names(fn.__code__)
    private = _private(names, strings, fn.__globals__)
    if private:
        return (
            f"{fn.__qualname__} reaches torch's private namespaces ({', '.join(private)}), which are banned in "
            "this exercise: they hold the C and ATen versions of its banned functions"
        )
    frontier = [fn.__globals__[n] for n in names if n in fn.__globals__]
    frontier += [sys.modules[s] for s in strings if s in sys.modules]
    frontier = [v for v in frontier if inspect.ismodule(v) or isinstance(v, type)]
    seen = {id(v) for v in frontier}
    for _ in range(4):  # torch.nn.functional.cross_entropy: three attributes deep
        following = []
        for owner in frontier:
            for n in names:
                value = inspect.getattr_static(owner, n, None)
                hit = None if value is None else _is_banned(value, originals)
                if hit is not None:
                    where = getattr(owner, "__name__", "?")
                    return f"{hit} is banned in this exercise, and {fn.__qualname__} reaches it as {where}.{n}"
                if (inspect.ismodule(value) or isinstance(value, type)) and id(value) not in seen:
                    seen.add(id(value))
                    following.append(value)
        frontier = following
    return None


# == one call: a fresh copy of the inputs, left as it was =================================


class ChangedInput(Exception):
    """Raised when a student's function changed one of its inputs in place."""


def _identical(a: Any, b: Any) -> bool:
    """``a`` is exactly ``b`` again: same type, shape, dtype and values (NaN equal to NaN)."""
    if isinstance(b, torch.Tensor):
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        return bool(((a == b) | (a != a) & (b != b)).all()) if b.is_floating_point() else torch.equal(a, b)
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in b)
    if isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _parameter_name(fn: Callable, k: int) -> str:
    """The name of ``fn``'s parameter number ``k`` (from 0), else "argument k + 1"."""
    with contextlib.suppress(TypeError, ValueError):
        names = list(inspect.signature(fn).parameters)
        if k < len(names):
            return f"`{names[k]}`"
    return f"argument {k + 1}"


def call(fn: Callable, args: tuple) -> Any:
    """``fn`` applied to a fresh copy of ``args`` (so that no case can spoil another); raises
    :class:`ChangedInput` if ``fn`` changed that copy in place."""
    given, kept = copy.deepcopy(args), copy.deepcopy(args)
    got = fn(*given)
    for k, (now, before) in enumerate(zip(given, kept)):
        if not _identical(now, before):
            name = _parameter_name(fn, k)
            raise ChangedInput(f"changed its input {name} in place: leave the inputs as they were, return a new value")
    return got


# == the check ==============================================================================


@dataclass
class CheckResult:
    """The outcome of :func:`check`; truthy when every case passed; shows as a message."""

    name: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message


def _same(got: Any, expected: Any) -> bool:
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or got.dtype != expected.dtype:
            return False  # the dtype a statement names is part of the answer
        if expected.is_floating_point():
            return torch.allclose(got, expected, rtol=1e-4, atol=1e-5)
        return torch.equal(got, expected)
    if isinstance(expected, bool):
        return isinstance(got, (bool, int)) and bool(got) == expected
    if isinstance(expected, float):
        try:
            value = float(got)
        except (TypeError, ValueError):
            return False
        return math.isclose(value, expected, rel_tol=1e-4, abs_tol=1e-6)
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return False
        return {k: v for k, v in got.items() if v} == {k: v for k, v in expected.items() if v}
    if isinstance(expected, tuple) and isinstance(got, (tuple, list)):
        return len(got) == len(expected) and all(_same(g, e) for g, e in zip(got, expected))
    if isinstance(expected, list) and isinstance(got, (list, tuple, torch.Tensor)):
        got = got.tolist() if isinstance(got, torch.Tensor) else list(got)
        if any(isinstance(e, float) for e in expected):
            return len(got) == len(expected) and all(_same(g, e) for g, e in zip(got, expected))
        return got == expected
    return got == expected


def _entry(t: torch.Tensor, flat: int) -> tuple[tuple[int, ...], Any]:
    """The index and value of entry number ``flat`` of ``t`` in row-major order."""
    index, rest = [], flat
    for size in reversed(t.shape):
        index.append(rest % size)
        rest //= size
    index = tuple(reversed(index))
    return index, t[index].item()


def _difference(got: Any, expected: Any) -> str | None:
    """Where ``got`` first differs from ``expected``, in words: a tensor's shape, dtype or first wrong
    entry (with its index), a sequence's first wrong element, a string's first wrong character, a
    dict's first wrong key. None when there is nothing more to say than the two values."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"a tensor is expected, not {type(got).__name__}"
        if got.shape != expected.shape:
            return f"the shape: expected {tuple(expected.shape)}, got {tuple(got.shape)}"
        if got.dtype != expected.dtype:
            agree = got.dtype.is_complex == expected.dtype.is_complex and _same(got.to(expected.dtype), expected)
            return f"the dtype: expected {expected.dtype}, got {got.dtype}" + (" (the values agree)" if agree else "")
        if expected.is_floating_point():
            wrong = ~torch.isclose(got, expected, rtol=1e-4, atol=1e-5)
        else:
            wrong = got != expected
        if not bool(wrong.any()):
            return None
        index, want = _entry(expected, int(wrong.flatten().nonzero()[0]))
        where = f"at index {list(index)}" if index else "its value"
        return (
            f"first {where}: expected {want}, got {got[index].item()} "
            f"({int(wrong.sum())} of {wrong.numel()} entries differ)"
        )
    if isinstance(expected, str) and isinstance(got, str):
        k = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        return f"first at character {k}: expected {expected[k : k + 10]!r}, got {got[k : k + 10]!r}"
    if isinstance(expected, dict) and isinstance(got, dict):
        keys = sorted(set(got) | set(expected), key=repr)
        key = next((k for k in keys if not _same(got.get(k, 0), expected.get(k, 0))), None)
        return None if key is None else f"at key {key!r}: expected {expected.get(key)!r}, got {got.get(key)!r}"
    if isinstance(expected, (tuple, list)) and isinstance(got, (tuple, list, torch.Tensor)):
        kind = type(expected).__name__
        if isinstance(got, torch.Tensor):
            got = got.tolist()
        for k, (g, e) in enumerate(zip(got, expected)):
            if not _same(g, e):
                inner = None if isinstance(e, str) else _difference(g, e)  # a short string: shown whole
                return f"element {k} of the {kind}: " + (inner or f"expected {_show(e, 80)}, got {_show(g, 80)}")
        if len(got) != len(expected):
            return f"the length: expected a {kind} of {len(expected)}, got {len(got)}"
    return None


def _show(value: Any, limit: int = 300) -> str:
    if isinstance(value, torch.Tensor):
        text = f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}:\n{value}"
    elif isinstance(value, dict):
        text = repr(dict(sorted(value.items())))
    else:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + " ..."


NOT_ATTEMPTED, NEXT_STEP = "✏️", "write your function and run this cell"


def _hint_labels(steps: int) -> list[str]:
    return ["hint:     "] if steps == 1 else [f"hint {i}:   " for i in range(1, steps + 1)]


FAILURES: dict[str, int] = {}  # exercise name -> failed checks so far in this kernel: how much hint to show


def check(name: str, fn: Callable) -> CheckResult:
    """Run ``fn`` on every case of exercise ``name``; explain the first failure, with one more
    step of the hint on each failed attempt. A function that raises NotImplementedError has not
    been written yet: one neutral line, no case, no hint."""
    if name not in EXERCISES:
        raise KeyError(f"no exercise named {name!r}; known exercises: {', '.join(sorted(EXERCISES))}")
    ex = EXERCISES[name]
    cases = ex.cases()
    answers = [ex.expected(case) for case in ex.cases()]  # a second copy: fn cannot change these
    use = banned_use(ex.bans, fn)
    for k, (case, expected) in enumerate(zip(cases, answers), start=1):
        args_text = ", ".join(_show(a, 120) for a in case.args)
        got: Any = _FROM_REFERENCE  # nothing returned (yet)
        if use is not None:
            got_text, ok = use, False
        else:
            try:
                with banned(ex.bans, fn):
                    got = call(fn, case.args)
            except ChangedInput as err:
                got_text, ok = str(err), False
            except NotImplementedError:
                if k == 1:
                    return CheckResult(name, False, f"{NOT_ATTEMPTED} {name}: not attempted yet; {NEXT_STEP}")
                got_text, ok = "raised NotImplementedError", False
            except Exception as err:  # the student's code failing is a result to explain
                got_text, ok = f"raised {type(err).__name__}: {err}", False
            else:
                got_text, ok = _show(got), _same(got, expected)
        if not ok:
            FAILURES[name] = FAILURES.get(name, 0) + 1
            steps = ex.steps(case.hint)
            shown = steps[: FAILURES[name]]
            more = " (each failed run shows one more step)" if len(shown) < len(steps) else ""
            if ex.prediction:  # the expected value is the number the student is asked to predict
                expected_text, where = "not shown: it is what this exercise asks you to predict", None
            else:
                returned = got is not _FROM_REFERENCE
                expected_text, where = _show(expected), _difference(got, expected) if returned else None
            message = (
                f"❌ {name}: case {k} of {len(cases)} failed"
                + (f" ({case.note})" if case.note else "")
                + f"\n  input:    {args_text}\n  expected: {expected_text}\n  got:      {got_text}"
                + (f"\n  differs:  {where}" if where else "")
                + "".join(f"\n  {label}{h}" for label, h in zip(_hint_labels(len(steps)), shown))
                + more
            )
            return CheckResult(name, False, message)
    return CheckResult(name, True, f"✅ {name}: all {len(cases)} cases passed")


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# == 00 · Language models and PyTorch ======================================================


def _dense(shape: tuple[int, ...], entries: dict[tuple[int, ...], float], dtype=torch.long) -> torch.Tensor:
    """A tensor of zeros with a few entries set: an expected answer written out by hand."""
    out = torch.zeros(shape, dtype=dtype)
    for index, value in entries.items():
        out[index] = value
    return out


@exercise(
    "trigram-counts",
    hint=[
        "a trigram is three tokens in a row; how many start positions does a list of n tokens have?",
        "three shifted views of the list walked together give every (a, b, c); the table has vocab_size "
        "entries on each axis, even for ids that never occur",
        "usual mistakes: the indices in another order, the vocabulary taken from the data, the last trigram lost",
    ],
)
def _trigram_cases() -> list[Case]:
    return [
        Case(([0, 1, 1, 2], 3), "two trigrams", _dense((3, 3, 3), {(0, 1, 1): 1, (1, 1, 2): 1})),
        Case(([2, 2, 2, 2], 3), "a repeated token", _dense((3, 3, 3), {(2, 2, 2): 2})),
        Case(([0, 1], 4), "two tokens: no trigram", torch.zeros(4, 4, 4, dtype=torch.long)),
        Case(([], 2), "an empty list", torch.zeros(2, 2, 2, dtype=torch.long)),
        Case(([1, 0, 1, 0, 1], 2), "alternating", _dense((2, 2, 2), {(1, 0, 1): 2, (0, 1, 0): 1})),
    ]


@exercise(
    "interpolated-bigram",
    hint=[
        "build two tables from the counts: P(b | a) from each row, P(b) from the whole table; then mix them",
        "P(b | a) divides each row by its own total; P(b) counts how often b came SECOND, so it sums a column, "
        "over the total of the whole table",
        "a row a that never came first has no P(b | a): use P(b) there (torch.where on the row sums); usual "
        "mistakes: P(b) from the rows (counts.sum(1)), lam on the wrong table, dividing by 0",
    ],
)
def _interpolated_cases() -> list[Case]:
    counts = torch.tensor([[0, 2], [1, 1]])  # pairs: (0, 1) twice, (1, 0) once, (1, 1) once
    unseen = torch.tensor([[1, 1, 0], [0, 0, 2], [0, 0, 0]])  # token 2 never comes first
    return [
        Case((counts, 1.0), "lam = 1: the bigram alone", torch.tensor([[0.0, 1.0], [0.5, 0.5]])),
        Case((counts, 0.0), "lam = 0: the unigram of the next token", torch.tensor([[0.25, 0.75], [0.25, 0.75]])),
        Case((counts, 0.5), "half and half", torch.tensor([[0.125, 0.875], [0.375, 0.625]])),
        Case((unseen, 0.8), "a row never seen: the unigram", torch.tensor([[0.45, 0.45, 0.1], [0.05, 0.05, 0.9],
                                                                           [0.25, 0.25, 0.5]])),
    ]  # fmt: skip


@exercise(
    "accumulated-grad",
    hint=[
        "what does backward() do to a .grad that already holds a number: replace it, or something else?",
        "backward() does not replace x.grad: it adds this call's dy/dx to what is there, and nothing "
        "clears it between the calls",
    ],
    bans=("torch.Tensor.backward", "torch.autograd.backward", "torch.autograd.grad"),
    prediction=True,
)
def _accumulated_cases() -> list[Case]:
    return [
        Case((2.0, 1), "x = 2, once", 10.0),
        Case((2.0, 3), "x = 2, three times", 30.0),
        Case((0.0, 2), "x = 0, twice: the slope is negative there", -4.0),
        Case((0.5, 4), "x = 0.5, four times", -5.0),
    ]


@exercise(
    "logsumexp",
    reference=lambda x: torch.logsumexp(x, dim=-1),
    hint=[
        "the function is right for one row; feed it a batch whose rows are far apart and look at the small row",
        "x.max() is the maximum of the WHOLE tensor: in a row far below it every exp(x - m) underflows to 0, "
        "and log 0 = -inf; what maximum does each row need?",
        "then subtract it with keepdim and add it back after the log, squeezing the last dimension",
        "a row of -inf only has the maximum -inf, and -inf - (-inf) is nan: subtract 0 from such a row "
        "instead (torch.where); its answer is log 0 = -inf",
    ],
    bans=("torch.logsumexp", "torch.Tensor.logsumexp", "torch.special.logsumexp"),
)
def _logsumexp_cases() -> list[Case]:
    return [
        Case((torch.tensor([0.0, 0.0]),), "two zeros: log 2"),
        Case((torch.tensor([1000.0, 1000.0]),), "large values"),
        Case((torch.tensor([[1.0, 2.0], [500.0, 0.0]]),), "a batch of rows far apart"),
        Case((torch.tensor([[-1000.0, -1000.0], [3.0, 4.0]]),), "a very negative row beside a small one"),
        Case((torch.tensor([[0.0, float("-inf")], [float("-inf"), float("-inf")]]),),
             "-inf is probability 0; a row of -inf only: log 0 = -inf", hint=3),
    ]  # fmt: skip


# == 01 · Tokenization =====================================================================


@exercise(
    "chunk-pair-counts",
    hint=[
        "count the pairs inside each chunk only, then weigh them by how often the chunk occurs",
        "a chunk that occurs n times contributes each of its pairs n times; a chunk of one token has no pair, "
        "and the end of one chunk never pairs with the start of the next",
        "usual mistakes: each chunk counted once instead of n times, pairs across chunk boundaries, "
        "pairs that do not overlap ([7, 7, 7] holds (7, 7) twice)",
    ],
)
def _chunk_pair_cases() -> list[Case]:
    return [
        Case(({(1, 2, 3): 1, (1, 2): 2},), "a chunk counted twice", {(1, 2): 3, (2, 3): 1}),
        Case(({(7, 7, 7): 5},), "overlapping pairs, five times", {(7, 7): 10}),
        Case(({(4,): 3, (5, 6): 1},), "a one-token chunk has no pair", {(5, 6): 1}),
        Case(({(1, 2): 1, (3, 4): 1},), "no pair across two chunks: (2, 3) is not one", {(1, 2): 1, (3, 4): 1}),
    ]


@exercise(
    "encode-with-special",
    hint=[
        "try the buggy function on 'a<|endoftext|>b' and count the special ids in what it returns",
        "text.split(marker) gives one piece more than there are markers: a marker goes BETWEEN two pieces, "
        "not after every piece",
        "empty pieces (a marker at the start, at the end, two in a row) add no bytes but keep their markers",
    ],
)
def _special_cases() -> list[Case]:
    eot = 1000
    return [
        Case(("a<|endoftext|>b", eot), "one marker between two texts", [97, eot, 98]),
        Case(("hi", eot), "no marker", [104, 105]),
        Case(("<|endoftext|>", eot), "only a marker", [eot]),
        Case(("é<|endoftext|>", eot), "a two-byte character, then a marker at the end", [195, 169, eot]),
    ]


@exercise(
    "longest-match",
    hint=[
        "stand at position i: which vocabulary entries does text[i:] start with? Take the longest",
        "try the lengths from the longest possible down to 1: the first piece in vocab wins; with no entry at "
        "all, take one character; then move on past what you took",
        "usual mistakes: the shortest match, the first entry of the set that matches, restarting too early",
    ],
)
def _longest_match_cases() -> list[Case]:
    return [
        Case(("hello", {"he", "hell", "ll", "o"}), "the longest entry first", ["hell", "o"]),
        Case(("abc", {"ab", "bc"}), "greedy: 'ab' is taken, 'c' is left alone", ["ab", "c"]),
        Case(("xyz", set()), "an empty vocabulary: characters", ["x", "y", "z"]),
        Case(("aaaa", {"aa", "aaa"}), "the longest first, then what is left", ["aaa", "a"]),
    ]


@exercise(
    "unk-rate",
    hint=[
        "first the vocabulary (which words are kept?), then the share of validation words outside it",
        "a word is kept when it occurs at least min_count times in train_words; the rate counts validation "
        "words with their repetitions",
        "usual mistakes: > min_count instead of >=, distinct validation words instead of occurrences",
    ],
)
def _unk_rate_cases() -> list[Case]:
    train = ["the", "cat", "the", "mat", "sat", "the", "cat"]
    return [
        Case((train, ["the", "dog"], 1), "min_count 1: every training word", 0.5),
        Case((train, ["cat", "mat", "cat", "the"], 2), "min_count 2: 'mat' is out", 0.25),
        Case((train, ["the", "the", "sat", "hat"], 3), "repeated validation words count each time", 0.5),
        Case((train, ["dog"], 1), "nothing known", 1.0),
    ]


# == 02 · Embeddings and training data =====================================================


@exercise(
    "padded-windows",
    hint=[
        "how many windows does it take so that every token after the first is a target exactly once?",
        "window i starts at i * context_length; its targets are its inputs shifted by one; count the windows "
        "from the number of targets, len(ids) - 1, and let the last one come up short",
        "pad a short window on the RIGHT: inputs with pad_id, targets with -100 (cross-entropy skips -100); "
        "usual mistakes: the short window dropped, targets padded with pad_id",
    ],
)
def _padded_window_cases() -> list[Case]:
    return [
        Case(([1, 2, 3, 4, 5], 2, 0), "an exact fit: two windows",
             (torch.tensor([[1, 2], [3, 4]]), torch.tensor([[2, 3], [4, 5]]))),
        Case((list(range(10)), 4, 99), "one short window at the end",
             (torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 99, 99]]),
              torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, -100, -100, -100]]))),
        Case(([7, 8], 3, 0), "fewer tokens than the context",
             (torch.tensor([[7, 8, 0]]), torch.tensor([[8, -100, -100]]))),
    ]  # fmt: skip


@exercise(
    "embedding-grad",
    hint=[
        "what is the gradient of x ** 2 for one looked-up row, and what happens when a row is looked up twice?",
        "a row looked up n times gets n times the gradient of one lookup; a row never looked up gets 0",
        "the gradient of (row ** 2).sum() with respect to the row is 2 * row; count how often each id occurs "
        "(every id of the vocabulary, seen or not)",
    ],
    bans=("torch.Tensor.backward", "torch.autograd.backward", "torch.autograd.grad"),
    prediction=True,
)
def _embedding_grad_cases() -> list[Case]:
    w = torch.arange(6.0).view(3, 2)  # rows [0, 1], [2, 3], [4, 5]
    return [
        Case((w, torch.tensor([1])), "one lookup", torch.tensor([[0.0, 0.0], [4.0, 6.0], [0.0, 0.0]])),
        Case((w, torch.tensor([2, 0, 2])), "row 2 twice", torch.tensor([[0.0, 2.0], [0.0, 0.0], [16.0, 20.0]])),
        Case((w, torch.tensor([[1, 1], [1, 2]])), "a (2, 2) batch of ids",
             torch.tensor([[0.0, 0.0], [12.0, 18.0], [8.0, 10.0]])),
    ]  # fmt: skip


def _windows(start: int, count: int, step: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of consecutive integers: the expected answer of a split of torch.arange."""
    starts = torch.arange(count) * step + start  # (N,)
    x = starts[:, None] + torch.arange(context)  # (N, T)
    return x, x + 1


@exercise(
    "split-windows",
    hint=[
        "with stride 2 and context 4, take one validation window: are its tokens inside some training window?",
        "a random split of overlapping windows puts the same tokens on both sides; what could be split before "
        "any window is cut?",
        "each part's windows start at 0, stride, 2 * stride ... while c + 1 tokens fit; a part too short "
        "for one window gives tensors of shape (0, context_length)",
    ],
)
def _split_window_cases() -> list[Case]:
    return [
        Case((torch.arange(20), 4, 2, 0.25), "stride 2: the random split leaks",
             (*_windows(0, 6, 2, 4), *_windows(15, 1, 2, 4))),
        Case((torch.arange(30), 3, 3, 0.2), "stride = context",
             (*_windows(0, 7, 3, 3), *_windows(24, 1, 3, 3))),
        Case((torch.arange(12), 4, 1, 0.25), "validation too short for one window",
             (*_windows(0, 5, 1, 4), torch.zeros(0, 4, dtype=torch.long), torch.zeros(0, 4, dtype=torch.long))),
    ]  # fmt: skip


@exercise(
    "nearest-tokens",
    hint=[
        "cosine similarity compares directions, not lengths: normalise the rows first",
        "normalise every row to length 1; then one matrix-vector product gives every cosine at once; take the "
        "k largest, leaving token itself out",
        "usual mistakes: token itself first in the list, a plain dot product (long rows win), the k least similar",
    ],
)
def _nearest_cases() -> list[Case]:
    w = torch.tensor([[1.0, 0.0], [10.0, 10.0], [0.0, 1.0], [-1.0, 0.0], [0.9, 0.1]])
    return [
        Case((w, 0, 2), "direction, not length: row 1 is long but 45 degrees away", [4, 1]),
        Case((w, 2, 1), "the closest direction to (0, 1)", [1]),
        Case((w, 3, 4), "every other row, most similar first", [2, 1, 4, 0]),
    ]


# == 03 · The MLP language model ===========================================================


@exercise(
    "label-smoothing",
    hint=[
        "the target is now a distribution over all V classes: how much does the true class get, how much "
        "does every other one?",
        "-sum_j q_j log p_j splits in two: (1 - eps) times -log p(target), plus eps times the MEAN over all V "
        "classes of -log p_j; both come from one table of log-probabilities",
        "log p = logits - logsumexp(logits) per row stays finite for logits like 1000; usual mistakes: eps / (V - 1) "
        "on the other classes, softmax then log (-inf), the sum over rows instead of the mean",
    ],
    bans=("torch.nn.functional.cross_entropy",),
)
def _label_smoothing_cases() -> list[Case]:
    g = _seeded(2)

    def answer(logits: torch.Tensor, targets: torch.Tensor, eps: float) -> torch.Tensor:
        return F.cross_entropy(logits.double(), targets, label_smoothing=eps).to(logits.dtype)  # PyTorch's rule

    inputs = [
        ((torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([0]), 0.0), "eps = 0: plain cross-entropy"),
        ((torch.zeros(2, 4), torch.tensor([1, 3]), 0.3), "equal logits: ln 4 whatever eps"),
        ((torch.tensor([[1000.0, 0.0, -1000.0]]), torch.tensor([0]), 0.1), "large logits, a confident right answer"),
        ((torch.randn(5, 7, generator=g) * 2, torch.tensor([0, 6, 2, 2, 5]), 0.2), "a batch of 5, eps 0.2"),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


def _window_mean(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The expected answer of a window-losses case, one window at a time."""
    means = []
    for row_logits, row_targets in zip(logits, targets):  # (T, V), (T,)
        real = row_targets != -100
        log_p = row_logits[real].double().log_softmax(dim=-1)  # (n_real, V)
        means.append(-log_p[torch.arange(int(real.sum())), row_targets[real]].mean())
    return torch.stack(means).to(logits.dtype)  # (B,)


@exercise(
    "window-losses",
    hint=[
        "run the function above on two windows, the second ending in -100 targets: what does F.cross_entropy put "
        "at a -100 position, and how many positions does mean(dim=1) divide by?",
        "a -100 position gets a loss of 0 but still counts in the mean: divide each window's sum by its OWN number "
        "of real targets",
        "the mask is targets != -100, one count per row; usual mistakes: one count for the whole batch, the mean "
        "over every position, a scalar instead of one loss per window",
    ],
)
def _window_loss_cases() -> list[Case]:
    g = _seeded(3)
    padded = torch.tensor([[1, 2, 0, 3], [4, 1, -100, -100]])
    ragged = torch.tensor([[0, 1, 2, 3, 4, 5], [5, 4, 3, -100, -100, -100], [2, -100, -100, -100, -100, -100]])
    inputs = [
        ((torch.randn(2, 4, 5, generator=g), torch.tensor([[1, 2, 0, 3], [4, 1, 1, 0]])), "no padding"),
        ((torch.randn(2, 4, 5, generator=g), padded), "the second window ends in two -100 targets"),
        ((torch.randn(3, 6, 6, generator=g) * 2, ragged), "three windows, 6, 3 and 1 real targets"),
        (
            (torch.randn(2, 3, 4, generator=g, dtype=torch.float64), torch.tensor([[0, 1, -100], [2, 3, 0]])),
            "float64 logits: float64 losses",
        ),
    ]
    return [Case(args, note, _window_mean(*args)) for args, note in inputs]


@exercise(
    "min-training-loss",
    hint=[
        "for one context, the best model predicts each next token with the share of times it followed that context "
        "in this text; what does that give at c = 0?",
        "count N(context, next) over the positions t = c .. n - 1 (context ids[t - c:t], next ids[t]), and "
        "N(context) as the sum of N(context, next) over next; the loss is the mean over those positions of "
        "-ln(N(context, next) / N(context))",
        "usual mistakes: N(context) counted wherever the context occurs (also at the very end, where no token "
        "follows), bits instead of nats, the mean over distinct contexts instead of over positions",
    ],
    bans=("course_lib.ngram.NGramLanguageModel",),
    prediction=True,
)
def _min_training_loss_cases() -> list[Case]:
    return [
        Case(([0, 1, 0, 1], 0), "c = 0: the frequencies of the tokens themselves", math.log(2)),
        Case(([0, 1, 0, 1, 0], 1), "c = 1: every context decides its next token", 0.0),
        Case(([0, 0, 1, 0, 0, 1], 1), "c = 1: after 0, half 0 and half 1", 0.8 * math.log(2)),
        Case(([1, 2, 3, 1, 2, 4], 2), "c = 2: (1, 2) is followed by 3 once and 4 once", math.log(2) / 2),
    ]


@exercise(
    "bits-per-character",
    hint=[
        "a model with longer tokens has fewer of them: which total is the same for two tokenizers of one text?",
        "add up the nats of every token, turn the total into bits (divide by ln 2), and divide by the number of "
        "characters of the whole text",
        "a ratio of two sums, not a mean of ratios; a token that decodes to no characters still costs its nats; "
        "usual mistakes: bits per token, each token's bits per character averaged, multiplying by ln 2",
    ],
)
def _bits_per_character_cases() -> list[Case]:
    ln2 = math.log(2)
    return [
        Case(([ln2, ln2, ln2], ["a", "b", "c"]), "one character a token, 1 bit each", 1.0),
        Case(([2 * ln2, 2 * ln2], ["ab", "c"]), "2 bits a token, 3 characters", 4 / 3),
        Case(([1.0, 3.0, 0.5], ["the", " ", "cat"]), "4.5 nats for 7 characters", 4.5 / ln2 / 7),
        Case(([1.0, 1.0], ["", "ab"]), "a token with no characters still costs", 2 / ln2 / 2),
        Case(
            ([3 * ln2, ln2], ["né", "e"]),
            "characters as len counts them: é is one (two UTF-8 bytes)",
            4 / 3,
            hint="count characters as len does: 'é' is one character, though UTF-8 needs two bytes for it",
        ),
    ]


# == 04 · Self-attention ===================================================================


def _feature_map(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1  # positive everywhere: a similarity without exp


@exercise(
    "linear-attention",
    hint=[
        "write the weights first, as softmax's would be: phi(q) phi(k)^T, each row divided by its own sum",
        "phi goes on q and on k, not on v; the denominator of row i is the sum over j of phi(q_i) . phi(k_j), "
        "the same sum as the numerator's without v",
        "no sqrt(d) and no softmax here; usual mistakes: no denominator, phi on v, k.T on a batch",
    ],
    bans=("torch.nn.functional.scaled_dot_product_attention", "torch.softmax", "torch.Tensor.softmax"),
)
def _linear_attention_cases() -> list[Case]:
    g = _seeded(3)

    def answer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        w = _feature_map(q) @ _feature_map(k).transpose(-2, -1)  # (..., Tq, Tk)
        return (w / w.sum(dim=-1, keepdim=True)) @ v  # (..., Tq, dv)

    inputs = [
        (
            (torch.zeros(2, 2), torch.zeros(2, 2), torch.tensor([[1.0, 2.0], [3.0, 4.0]])),
            "equal similarities: the mean of v",
        ),
        (
            tuple(torch.randn(n, d, generator=g, dtype=torch.float64) for n, d in ((3, 4), (5, 4), (5, 2))),
            "3 queries, 5 keys: not square; float64 inputs, a float64 output",
        ),
        (
            (torch.randn(2, 5, 16, generator=g), torch.randn(2, 5, 16, generator=g), torch.randn(2, 5, 8, generator=g)),
            "a batch, d = 16",
        ),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]  # fmt: skip


@exercise(
    "score-scale",
    hint=[
        "start from one product q_i k_i of independent, mean-0 entries: what is its variance?",
        "with mean-0 independent factors, Var(q_i k_i) = E[q_i^2] E[k_i^2]; and the d products are independent",
        "the variance of q . k is the sum of d of them; divide by its square root to bring it back to 1",
    ],
    prediction=True,
)
def _score_scale_cases() -> list[Case]:
    return [
        Case((64, 1.0, 1.0), "unit variances, d = 64", 8.0),
        Case((16, 4.0, 1.0), "queries of variance 4", 8.0),
        Case((100, 0.25, 0.25), "both of variance 1/4", 2.5),
    ]


@exercise(
    "attention-pool",
    hint=[
        "run the buggy function on one text, then on two, and sum its weights: over what do they sum to 1?",
        "the scores are (B, T): the softmax must run over the tokens of each text (dim=1 or -1), not over "
        "the batch (dim=0), which mixes different texts",
        "weights (B, T) -> (B, T, 1) to multiply x (B, T, C), then sum over T",
    ],
)
def _attention_pool_cases() -> list[Case]:
    g = _seeded(4)

    def answer(x: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(x @ query / math.sqrt(x.shape[-1]), dim=-1)  # (B, T)
        return torch.einsum("bt,btc->bc", weights, x)  # (B, C)

    inputs = [
        ((torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]), torch.zeros(2)), "one text, a query of zeros: the mean"),
        ((torch.randn(2, 3, 4, generator=g), torch.randn(4, generator=g)), "two texts of 3 tokens"),
        ((torch.randn(4, 6, 8, generator=g), torch.randn(8, generator=g) * 3), "four texts, a sharp query"),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


@exercise(
    "attention-entropy",
    hint=[
        "the entropy of one row is -sum p log p; what should a weight of exactly 0 contribute?",
        "0 * log 0 is nan in floating point but 0 in the limit: leave the zero weights out of the sum",
        "sum over the last dimension (the keys), then the mean over every other dimension",
    ],
)
def _entropy_cases() -> list[Case]:
    return [
        Case((torch.tensor([[0.25, 0.25, 0.25, 0.25]]),), "uniform over 4: log 4", math.log(4)),
        Case((torch.tensor([[1.0, 0.0], [0.5, 0.5]]),), "one-hot (0) and uniform (log 2): their mean", math.log(2) / 2),
        Case((torch.tensor([[[0.9, 0.1], [0.1, 0.9]], [[1.0, 0.0], [1.0, 0.0]]]),), "a batch of two (2, 2) maps",
             -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)) / 2),
    ]  # fmt: skip


# == 05 · Causal masking and multi-head attention ==========================================


def _allowed(rows: list[str]) -> torch.Tensor:
    """A boolean mask written out row by row: '1' may attend, '.' may not."""
    return torch.tensor([[c == "1" for c in row] for row in rows])


@exercise(
    "local-causal-mask",
    hint=[
        "draw the mask for T = 5, window = 2 on paper: which keys may query 3 see?",
        "query i may attend key j when j <= i (causal) AND i - j < window (at most window tokens, itself included)",
        "a column of query positions against a row of key positions broadcasts to (T, T); usual mistakes: "
        "one key too many, the window on both sides, the upper triangle",
    ],
)
def _local_mask_cases() -> list[Case]:
    return [
        Case((4, 1), "window 1: only itself", _allowed(["1...", ".1..", "..1.", "...1"])),
        Case((5, 2), "window 2: itself and the one before", _allowed(["1....", "11...", ".11..", "..11.", "...11"])),
        Case((3, 5), "a window longer than T: the causal mask", _allowed(["1..", "11.", "111"])),
    ]


@exercise(
    "left-padded-mask",
    hint=[
        "in a left-padded row, where are the real tokens: at the start or at the end?",
        "row b's real tokens are its LAST lengths[b] positions: j >= T - lengths[b]; a key must be real AND not in "
        "the future",
        "a padding query would then see nothing at all (a row of -inf: NaN after softmax): let it attend to itself",
    ],
)
def _left_padded_cases() -> list[Case]:
    return [
        Case((torch.tensor([3]), 3), "no padding: the causal mask", _allowed(["1..", "11.", "111"]).unsqueeze(0)),
        Case((torch.tensor([2]), 4), "two pads, then two tokens",
             _allowed(["1...", ".1..", "..1.", "..11"]).unsqueeze(0)),
        Case((torch.tensor([1, 3]), 3), "a batch of two",
             torch.stack([_allowed(["1..", ".1.", "..1"]), _allowed(["1..", "11.", "111"])])),
    ]  # fmt: skip


@exercise(
    "mha-parameters",
    hint=[
        "count one head's query, key and value weights and biases, then all heads, then the output projection",
        "each head maps C to D = C / n_heads, with a weight and a bias for each of query, key and value; "
        "multiply by the number of heads and simplify",
        "the output projection is C x C plus a bias of C",
    ],
    bans=("course_lib.attention.MultiHeadAttentionWrapper", "course_lib.attention.MultiHeadAttention"),
)
def _mha_parameter_cases() -> list[Case]:
    return [
        Case((12, 3), "the wrapper above: C = 12, 3 heads", 624),
        Case((12, 1), "one head", 624),
        Case((768, 12), "GPT-2 small's attention", 2362368),
    ]


@exercise(
    "previous-token-score",
    hint=[
        "where in a (T, T) map is the weight of query i on the token just before it?",
        "those weights w[i, i - 1] lie on the diagonal just below the main one (torch.diagonal has an offset); "
        "there are T - 1 of them",
        "average them over the last dimension; the leading dimensions (heads, batch) stay",
    ],
)
def _previous_token_cases() -> list[Case]:
    uniform = torch.tril(torch.ones(3, 3)) / torch.arange(1, 4)[:, None]  # (3, 3): rows 1, 1/2 1/2, 1/3 ...
    previous = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # always the token before
    return [
        Case((previous,), "a previous-token head", torch.tensor(1.0)),
        Case((uniform,), "uniform over the past: (1/2 + 1/3) / 2", torch.tensor(5 / 12)),
        Case((torch.stack([previous, uniform, torch.eye(3)]),), "three heads", torch.tensor([1.0, 5 / 12, 0.0])),
    ]


# == 06 · Positional encodings =============================================================


def _rope_thetas(head_dim: int, base: float) -> torch.Tensor:
    """theta_i = base ** (-2i / head_dim), in float64: the expected answers of rope-scaling."""
    return base ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (D/2,)


@exercise(
    "rope-scaling",
    hint=[
        "linear: what happens to every angle position * theta_i when every position is divided by scale? "
        "NTK: only the base changes; write theta_0 and theta_last with a new base b",
        "theta_0 = b ** 0 = 1 whatever b is; the last pair, i = D/2 - 1, has theta = b ** (-(D - 2) / D): "
        "solve b ** (-(D - 2) / D) = 10000 ** (-(D - 2) / D) / scale for b",
        "b = 10000 * scale ** (D / (D - 2)); usual mistakes: the base times scale (the slowest pair then slows "
        "by less than scale), linear that multiplies by scale, the exponent upside down",
    ],
)
def _rope_scaling_cases() -> list[Case]:
    def answer(head_dim: int, scale: float, method: str) -> torch.Tensor:
        if method == "linear":
            return (_rope_thetas(head_dim, 10000.0) / scale).float()
        return _rope_thetas(head_dim, 10000.0 * scale ** (head_dim / (head_dim - 2))).float()

    inputs = [
        ((8, 1.0, "ntk"), "scale 1: RoPE's own frequencies"),
        ((8, 4.0, "linear"), "linear, scale 4"),
        ((8, 4.0, "ntk"), "NTK, scale 4"),
        ((64, 8.0, "ntk"), "NTK, D = 64, scale 8"),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


def _alibi_by_loops(slopes: torch.Tensor, T: int) -> torch.Tensor:
    """The expected answer of an alibi-bias case, entry by entry: the bias, -inf for future keys."""
    bias = torch.full((len(slopes), T, T), float("-inf"), dtype=slopes.dtype)  # (H, T, T)
    for h in range(len(slopes)):
        for i in range(T):  # the query
            for j in range(i + 1):  # the keys at or before it
                bias[h, i, j] = -slopes[h] * (i - j)
    return bias


@exercise(
    "alibi-bias",
    hint=[
        "print the buggy bias for one head and T = 4: which of its entries are neither 0 nor -inf?",
        "rows are queries i and columns keys j: a key j <= i lies i - j positions back; the function above "
        "measures j - i, which is positive only for FUTURE keys, and those are -inf: no bias is left",
        "-slope * (i - j) where j <= i, -inf where j > i, one (T, T) table per head; usual mistakes: the sign "
        "(far keys favoured), 0 for the future (the bias without its mask), one position too many",
    ],
    bans=("course_lib.positional.alibi_bias",),
)
def _alibi_bias_cases() -> list[Case]:
    inputs = [
        ((torch.tensor([0.5]), 3), "one head, T = 3"),
        ((torch.tensor([0.25, 0.0625]), 4), "two heads, T = 4"),
        ((torch.tensor([0.5, 0.25, 0.125, 0.0625]), 1), "T = 1: nothing to look back on"),
        ((torch.tensor([0.5, 0.125], dtype=torch.float64), 3), "float64 slopes: a float64 bias"),
    ]
    return [Case(args, note, _alibi_by_loops(*args)) for args, note in inputs]


def _stretched_by_loops(table: torch.Tensor, new_length: int) -> torch.Tensor:
    """The expected answer of a stretch-positions case, row by row."""
    L = table.shape[0]
    rows = []
    for p in range(new_length):
        x = p * (L - 1) / (new_length - 1)  # the old position this row stands for
        low = min(int(math.floor(x)), L - 2)
        w = x - low  # 0 at row low, 1 at row low + 1
        rows.append((1 - w) * table[low].double() + w * table[low + 1].double())
    return torch.stack(rows).to(table.dtype)  # (new_length, C)


@exercise(
    "stretch-positions",
    hint=[
        "row p of the new table stands for an old position x that is usually not a whole number: which two old "
        "rows lie either side of it?",
        "x = p * (L - 1) / (new_length - 1), so the first and last rows map to the first and last; mix rows "
        "floor(x) and floor(x) + 1 with weights 1 - (x - floor(x)) and x - floor(x)",
        "at the last row x = L - 1 exactly: there is no row L, take the last row itself; usual mistakes: "
        "x = p * L / new_length (the ends move), the nearest row instead of a mix, interpolating along C",
    ],
    bans=("torch.nn.functional.interpolate",),
)
def _stretch_positions_cases() -> list[Case]:
    g = _seeded(8)
    inputs = [
        ((torch.tensor([[0.0, 10.0], [2.0, 20.0]]), 3), "two rows to three: the middle is their mean"),
        ((torch.tensor([[0.0], [1.0], [4.0]]), 5), "three rows to five"),
        ((torch.randn(4, 3, generator=g), 4), "the same length: unchanged"),
        ((torch.randn(8, 5, generator=g), 3), "shrinking, eight rows to three"),
    ]
    return [Case(args, note, _stretched_by_loops(*args)) for args, note in inputs]


def _reach_by_loop(slope: float, T: int, share: float) -> int:
    """The expected answer of an alibi-reach case: add the weights from the nearest key back."""
    weights = [math.exp(-slope * k) for k in range(T)]  # k positions back, equal raw scores
    total, running = sum(weights), 0.0
    for r, w in enumerate(weights, start=1):
        running += w
        if running >= share * total:
            return r
    return T


@exercise(
    "alibi-reach",
    hint=[
        "with equal raw scores, the bias alone sets the weights: what is the weight of the key k positions back, "
        "before the softmax divides?",
        "exp(-slope * k) for k = 0 (the query itself) .. T - 1; divide by their sum over all T keys, then add "
        "them up from k = 0 until the total reaches share",
        "the answer is how many keys you added (1 .. T), an int; usual mistakes: adding from the oldest key, the "
        "sum of an infinite series (T ignored), a count one too small",
    ],
)
def _alibi_reach_cases() -> list[Case]:
    inputs = [
        ((0.0, 10, 0.55), "slope 0: equal weights"),
        ((10.0, 10, 0.99), "a steep slope: the query itself"),
        ((0.5, 64, 0.9), "slope 1/2, 64 keys, 90%"),
        ((0.0625, 64, 0.5), "slope 1/16, 64 keys, half the weight"),
    ]
    return [Case(args, note, _reach_by_loop(*args)) for args, note in inputs]


# == 07 · The transformer block and the GPT model ==========================================


@exercise(
    "llama-parameters",
    hint=[
        "list the parts first: embedding, head, and per layer attention, feed-forward and norms; what is gone "
        "compared with GPT-2?",
        "per layer: four C x C projections with no biases; SwiGLU's three matrices between C and hidden; "
        "two RMSNorms, each a weight of C and no shift",
        "then the token embedding, the untied LM head (as large again) and the final RMSNorm; no position "
        "table: RoPE has no weights",
    ],
    bans=("course_lib.model.parameter_formula", "course_lib.model.count_parameters", "course_lib.model.GPT"),
)
def _llama_parameter_cases() -> list[Case]:
    return [
        Case((100, 8, 1, 16), "a toy model", 2264),
        Case((1000, 64, 2, 172), "two layers", 227_136),
        Case((32000, 4096, 32, 11008), "LLaMA-7B", 6_738_415_616),
    ]


@exercise(
    "rms-norm",
    hint=[
        "the statement promises any shape (..., C): try the buggy function on inputs other than a matrix",
        "dim=1 is the last dimension of a (T, C) input but the TOKENS of a (B, T, C) one: each vector must be "
        "normalised over its own features, dim=-1",
        "then x / sqrt(mean(x ** 2) + eps) * (1 + weight), eps inside the square root",
        "300 ** 2 = 90,000 is above float16's largest value, 65,504: inf, and x / inf = 0; square a float16 or "
        "bfloat16 x in float32 (x.float()) and give the result back in x's dtype (.to(x.dtype))",
    ],
    bans=("torch.nn.functional.rms_norm", "torch.rms_norm", "course_lib.layers.RMSNorm"),
)
def _rms_norm_cases() -> list[Case]:
    g = _seeded(6)

    def answer(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        work = x.double()  # at least float32, as the statement asks: the same answer to within the check
        return (work / torch.sqrt(work.pow(2).mean(dim=-1, keepdim=True) + eps) * (1 + weight.double())).to(x.dtype)

    half = torch.tensor([[300.0, -400.0, 100.0, 0.0], [1.0, 2.0, -2.0, 1.0]], dtype=torch.float16)
    inputs = [
        ((torch.tensor([[3.0, 4.0]]), torch.zeros(2), 0.0), "one vector, weight 0: divided by its RMS, sqrt(12.5)"),
        ((torch.randn(5, 4, generator=g), torch.randn(4, generator=g), 1e-6), "(T, C) with weights"),
        ((torch.randn(2, 3, 8, generator=g) * 3, torch.randn(8, generator=g), 1e-6), "(B, T, C)"),
        ((torch.full((1, 4), 1e-3), torch.zeros(4), 1e-6), "a tiny vector: eps matters"),
        ((half, torch.tensor([0.0, 0.5, -0.5, 1.0], dtype=torch.float16), 1e-6), "float16: squares above 65,504"),
    ]
    cases = [Case(args, note, answer(*args)) for args, note in inputs]
    cases[3].hint, cases[4].hint = 2, 3  # the tiny vector tests where eps goes; float16, the float32 squares
    return cases


@exercise(
    "residual-std",
    hint=[
        "what happens to the variance when you add two independent random variables?",
        "variances of independent terms add: the stream's variance is 1 plus one branch_std ** 2 per branch, "
        "and a block has two branches (attention and feed-forward)",
    ],
)
def _residual_std_cases() -> list[Case]:
    return [
        Case((0, 1.0), "no blocks: the embeddings' std", 1.0),
        Case((1, 1.0), "one block, two branches of std 1", math.sqrt(3)),
        Case((12, 0.5), "12 blocks, branches of std 0.5", math.sqrt(7)),
    ]


@exercise(
    "dead-fraction",
    hint=[
        "a unit is one feature (the last dimension); it is dead when it is <= 0 at every position",
        "flatten every leading dimension into one, so that each column is one unit, then ask of each column "
        "whether all its entries are <= 0",
        "the answer is the share of such columns, a float; usual mistakes: the share of entries <= 0, "
        "< 0 instead of <= 0, the rows instead of the columns",
    ],
)
def _dead_fraction_cases() -> list[Case]:
    return [
        Case((torch.tensor([[1.0, -1.0, 0.0], [2.0, -3.0, 0.0]]),), "two dead units of three (0 counts)", 2 / 3),
        Case((torch.tensor([[-1.0, 2.0], [-1.0, -2.0]]),), "one unit fires once: alive", 0.5),
        Case((torch.tensor([[[-1.0, 1.0], [-2.0, -1.0]], [[-3.0, -1.0], [-1.0, -1.0]]]),), "(B, T, hidden)", 0.5),
    ]


# == 08 · Pretraining ======================================================================


@exercise(
    "lr-from-zero",
    hint=[
        "three pieces: before warmup_steps, between warmup_steps and total_steps, after; where is step 0?",
        "the warmup is a straight line through (0, 0) and (warmup_steps, max_lr); the cosine's progress runs "
        "from 0 at warmup_steps to 1 at total_steps, and (1 + cos(pi * progress)) / 2 goes from 1 to 0",
        "after total_steps the rate stays at min_lr; usual mistakes: the warmup of the chapter (step + 1), "
        "the cosine counted from step 0, decaying to 0 instead of min_lr",
    ],
    bans=("course_lib.training.lr_at",),
)
def _lr_from_zero_cases() -> list[Case]:
    return [
        Case((0, 1e-3, 1e-4, 10, 110), "step 0: nothing yet", 0.0),
        Case((5, 1e-3, 1e-4, 10, 110), "half way up", 5e-4),
        Case((60, 1e-3, 1e-4, 10, 110), "half way down the cosine", 5.5e-4),
        Case((200, 1e-3, 1e-4, 10, 110), "after the end: min_lr", 1e-4),
    ]


@exercise(
    "adamw-first-step",
    hint=[
        "on the first step Adam's averages hold one gradient each: what are m-hat and v-hat after bias correction?",
        "after bias correction m-hat is g itself and v-hat is g squared: what is m-hat / (sqrt(v-hat) + eps)?",
        "AdamW's decay is applied to the weight itself, by the factor 1 - lr * weight_decay, besides the Adam "
        "step; a zero gradient gives no Adam step at all",
    ],
    bans=("torch.optim.AdamW", "torch.optim.Adam", "torch.optim.adamw.adamw", "course_lib.training.make_optimizer"),
)
def _adamw_cases() -> list[Case]:
    return [
        Case((torch.tensor([1.0, -2.0]), torch.tensor([0.5, -30.0]), 0.1, 0.0), "no decay: every weight moves lr",
             torch.tensor([0.9, -1.9])),
        Case((torch.tensor([1.0, -2.0]), torch.tensor([1e-3, 4.0]), 0.01, 0.1), "with weight decay",
             torch.tensor([0.989, -2.008])),
        Case((torch.tensor([3.0]), torch.tensor([0.0]), 0.1, 0.5), "a zero gradient: the decay alone",
             torch.tensor([2.85])),
        Case((torch.tensor([1.0]), torch.tensor([1e-8]), 0.1, 0.0), "a gradient as small as eps",
             torch.tensor([0.95])),
    ]  # fmt: skip


@exercise(
    "accumulated-gradient",
    hint=[
        "give it two micro-batches of 3 and 1 examples: whose gradient should count more?",
        "each micro-gradient is a MEAN over its own examples: turn each back into a sum over its examples "
        "before you average over the whole batch",
        "the plain mean of the micro-gradients is right only when every micro-batch has the same size",
    ],
)
def _accumulated_gradient_cases() -> list[Case]:
    return [
        Case(([torch.tensor([1.0]), torch.tensor([3.0])], [1, 1]), "equal sizes: the plain mean", torch.tensor([2.0])),
        Case(([torch.tensor([1.0, 0.0]), torch.tensor([5.0, 4.0])], [3, 1]), "a short last micro-batch",
             torch.tensor([2.0, 1.0])),
        Case(([torch.ones(2, 2), torch.zeros(2, 2), 4 * torch.ones(2, 2)], [2, 4, 2]), "three micro-batches",
             1.25 * torch.ones(2, 2)),
    ]  # fmt: skip


@exercise(
    "smoothed-loss",
    hint=[
        "an average that forgets: each new value gets weight 1 - beta; where does it start, and what does that do?",
        "s starts at 0 and s = beta * s + (1 - beta) * x for each value in turn; at first s is pulled towards 0",
        "divide the t-th average (t = 1, 2, ...) by 1 - beta ** t, as Adam corrects m and v",
    ],
)
def _smoothed_cases() -> list[Case]:
    return [
        Case(([2.0, 2.0, 2.0], 0.9), "a constant: the correction keeps it", [2.0, 2.0, 2.0]),
        Case(([1.0, 3.0], 0.5), "two values", [1.0, 7 / 3]),
        Case(([4.0, 0.0, 4.0], 0.0), "beta 0: the values themselves", [4.0, 0.0, 4.0]),
    ]


# == 09 · Generating text ==================================================================


def _example_logits() -> tuple[torch.Tensor, torch.Tensor]:
    """One readable row of 5 logits, and a batch of 3 random rows; shared by the filters' cases."""
    g = _seeded(11)
    return torch.tensor([[2.0, -1.0, 0.5, 3.0, 1.0]]), torch.randn(3, 10, generator=g) * 2


def _nucleus(logits: torch.Tensor, p: float, keep: int) -> torch.Tensor:
    """The expected answer of a top-p case: the nucleus, or the ``keep`` most likely tokens if more."""
    probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)  # (B, V)
    rank = torch.arange(logits.shape[-1])  # (V,)
    drop_sorted = (probs.cumsum(-1) - probs >= p) & (rank >= keep)  # (B, V)
    return logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))


@exercise(
    "top-p-min-keep",
    hint=[
        "start from the nucleus of the chapter; when is it smaller than min_tokens_to_keep?",
        "in sorted order a token stays if the probability before it is below p OR its rank (0, 1, ...) is "
        "below min_tokens_to_keep; the rest become -inf",
        "decide on the sorted row, then carry the decision back to vocabulary order; usual mistakes: the "
        "nucleus counted with the token's own probability, the minimum ignored or off by one",
    ],
    bans=("course_lib.generation.filter_logits",),
)
def _top_p_min_keep_cases() -> list[Case]:
    small, batch = _example_logits()
    inputs = [
        ((small, 0.5, 1), "min 1: the nucleus alone"),
        ((small, 0.5, 3), "a small nucleus, three tokens kept"),
        ((small, 0.99, 2), "a nucleus larger than the minimum"),
        ((batch, 0.3, 2), "a batch of 3 rows"),
    ]
    return [Case(args, note, _nucleus(*args)) for args, note in inputs]


@exercise(
    "min-p",
    hint=[
        "the threshold moves with the most likely token: compute it per row",
        "work with probabilities, not logits, and compare each with min_p times its own row's largest",
        "-inf for the others, the kept logits unchanged; usual mistakes: a threshold on the logits themselves, "
        "one maximum for the whole batch",
    ],
)
def _min_p_cases() -> list[Case]:
    small, batch = _example_logits()

    def answer(logits: torch.Tensor, min_p: float) -> torch.Tensor:
        probs = torch.softmax(logits, dim=-1)
        return logits.masked_fill(probs < min_p * probs.amax(-1, keepdim=True), float("-inf"))

    flat_and_sharp = torch.tensor([[0.0, 0.0, 0.0, 0.0], [4.0, 0.0, -1.0, 2.0]])  # row maxima 0.25 and 0.86
    inputs = [
        ((small, 0.1), "min_p 0.1"),
        ((small, 0.5), "min_p 0.5"),
        ((batch, 0.2), "a batch of 3 rows"),
        ((flat_and_sharp, 0.5), "a flat row beside a sharp one: each row keeps its own most likely tokens"),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


@exercise(
    "repetition-penalty",
    hint=[
        "which logits and which previous lists did you try it on? Vary their signs, and repeat a token",
        "dividing a negative logit by 1.3 RAISES it: a negative logit must be multiplied by the penalty",
        "each distinct previous token is penalised once, however often it occurred (a set)",
    ],
)
def _penalty_cases() -> list[Case]:
    logits = torch.tensor([2.0, -1.0, 0.5, 3.0])
    return [
        Case((logits, [3], 2.0), "one positive logit", torch.tensor([2.0, -1.0, 0.5, 1.5])),
        Case((logits, [1, 2], 2.0), "a negative logit goes down", torch.tensor([2.0, -2.0, 0.25, 3.0])),
        Case((logits, [0, 0, 0], 2.0), "a token seen three times: once", torch.tensor([1.0, -1.0, 0.5, 3.0])),
    ]


@exercise(
    "distinct-n",
    hint=[
        "list every run of n consecutive tokens; how many are there, and how many differ?",
        "the n-grams overlap: one starts at every position that leaves room for n tokens; a set counts the "
        "distinct ones",
        "the answer is len(set) / number of n-grams, a float",
    ],
)
def _distinct_cases() -> list[Case]:
    return [
        Case(([1, 2, 3, 4], 2), "no repetition", 1.0),
        Case(([5, 5, 5, 5], 1), "one token four times", 0.25),
        Case(([1, 2, 1, 2, 1], 2), "a two-token loop", 0.5),
        Case(([1, 2, 2, 1, 1, 2], 2), "overlapping bigrams: (1, 2) twice", 0.8),
    ]


# == 10 · Fine-tuning for classification ===================================================


def _mean_pooled(features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The expected answer of a mean-pooling case, row by row."""
    return torch.stack([features[b, : int(n)].mean(dim=0) for b, n in enumerate(lengths)])  # (B, C)


@exercise(
    "mean-pooling",
    hint=[
        "which positions of row b are real tokens, and how many are there?",
        "row b's real tokens are positions 0 .. lengths[b] - 1: a (B, T) mask, positions < lengths[:, None], "
        "zeroes the padding; divide each row's sum by its own length",
        "usual mistakes: the mean over all T positions (padding included), the sum of the real tokens divided by "
        "T, one position too few",
    ],
)
def _mean_pooling_cases() -> list[Case]:
    g = _seeded(12)
    inputs = [
        (
            (torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]]), torch.tensor([2])),
            "one text: two real tokens, one pad",
        ),
        ((torch.randn(3, 5, 4, generator=g), torch.tensor([5, 2, 3])), "rows padded by 0, 3 and 2 tokens"),
        ((torch.randn(2, 6, 2, generator=g), torch.tensor([1, 6])), "a one-token text beside a full one"),
    ]
    return [Case(args, note, _mean_pooled(*args)) for args, note in inputs]  # fmt: skip


@exercise(
    "wilson-interval",
    hint=[
        "take the low end alone: there p is below k/n, so the condition reads (k - 1/2)/n - p <= z sqrt(p (1 - p) "
        "/ n); the unknown p is on both sides: square it; what kind of equation in p do you get?",
        "((k - 1/2)/n - p)^2 = z^2 p (1 - p) / n is a quadratic in p (collect it as a p^2 + b p + c = 0): the low "
        "end is its smaller root; the high end is the larger root of the same quadratic with (k + 1/2)/n",
        "at k = 0 the low side holds for every p (its left side is negative): the low end is 0; so is the high "
        "end 1 at k = n. Usual mistakes: Wilson's interval uncorrected, the half count on the wrong side, the "
        "standard error at k/n (Wald's), the ends returned high first",
    ],
    bans=("course_lib.evaluation.wilson_interval", "course_lib.evaluation.accuracy_text"),
)
def _wilson_cases() -> list[Case]:
    return [
        Case((5, 10), "5 of 10: symmetric about 0.5", (0.20142, 0.79858)),
        Case((0, 10), "none right: the low end is 0, the high end is not", (0.0, 0.344544)),
        Case((69, 135), "the head alone on validation", (0.424041, 0.597539)),
        Case((10, 10), "all right: the high end is 1", (0.655456, 1.0)),
    ]


@exercise(
    "last-real-token",
    hint=[
        "draw a row of 2 real tokens in a window of 5, padded on the left, then on the right: where is its last "
        "real token each time?",
        "padding on the left pushes every row's text to the END of the window, whatever its length; on the "
        "right the text starts at 0 and its last token depends on the length",
        "usual mistakes: lengths - 1 for both sides, position -1 for both sides, T - lengths (the FIRST real "
        "token of a left-padded row)",
    ],
    bans=("course_lib.classification.last_real_token",),
)
def _last_real_cases() -> list[Case]:
    f = torch.arange(5 * 5 * 2, dtype=torch.float32).view(5, 5, 2)  # (B=5, T=5, C=2): every entry different
    lengths = torch.tensor([5, 2, 3, 1, 4])
    rows = torch.arange(5)
    return [
        Case((f, lengths, "right"), "right-padded", f[rows, torch.tensor([4, 1, 2, 0, 3])]),
        Case((f, lengths, "left"), "the same lengths, left-padded", f[rows, torch.tensor([4, 4, 4, 4, 4])]),
        Case((f[:2, :4], torch.tensor([4, 4]), "left"), "no padding at all", f[:2, 3]),
        Case((f[:2], torch.tensor([1, 5]), "right"), "a one-token text beside a full one", f[[0, 1], [0, 4]]),
    ]


@exercise(
    "macro-f1",
    hint=[
        "one F1 per class, then their plain mean: which classes take part?",
        "for class k: TP texts of class k predicted k, FP other texts predicted k, FN texts of class k predicted "
        "something else; F1 = 2 TP / (2 TP + FP + FN); average over every class in labels or predictions",
        "a class never predicted right has F1 = 0 and still counts; usual mistakes: the accuracy, only the "
        "classes of the labels, the F1 of the mean precision and mean recall, a mean weighted by class size",
    ],
)
def _macro_f1_cases() -> list[Case]:
    return [
        Case(([0, 1, 2], [0, 1, 2]), "every answer right", 1.0),
        Case(([0, 0, 0, 0], [0, 0, 1, 2]), "always class 0", (4 / 6 + 0 + 0) / 3),
        Case(([0, 1, 1, 0], [0, 1, 0, 1]), "two classes, half right", 0.5),
        Case(([2, 0, 1], [0, 0, 1]), "a class that only the predictions have", (2 / 3 + 1 + 0) / 3),
    ]


# == 11 · Instruction fine-tuning ==========================================================


@exercise(
    "answer-loss",
    hint=[
        "give it targets with -100 in them: what does clamp(min=0) turn them into, and does the mean count them?",
        "-100 marks a target without a loss: leave it out of the sum AND out of the count; the mean is over the "
        "kept targets of the whole batch (not a mean of each row's mean)",
        "keep = targets != -100 (not targets > 0: token 0 is a token like any other); gather the log-softmax at "
        "the targets with the -100s replaced by any valid id, then -(picked * keep).sum() / keep.sum()",
    ],
    bans=(
        "torch.nn.functional.cross_entropy",
        "torch.nn.functional.nll_loss",
        "torch.nn.CrossEntropyLoss",
        "torch.nn.NLLLoss",
        "course_lib.instruct.instruction_loss",
    ),
)
def _answer_loss_cases() -> list[Case]:
    g = _seeded(21)

    def answer(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits.double(), dim=-1)  # (B, T, V)
        keep = targets != -100  # (B, T)
        picked = logp[keep, targets[keep]]  # (kept,)
        return (-picked.mean()).to(logits.dtype)

    targets_1 = torch.tensor([[1, 2, 3], [4, 0, 2]])
    targets_2 = torch.tensor([[3, 1, 4, 1], [5, 2, -100, -100]])
    targets_3 = torch.tensor([[-100, 0, 2, -100, -100], [-100, -100, 0, 0, 5]])
    inputs = [
        ((torch.randn(2, 3, 6, generator=g), targets_1), "no -100 at all: every target counts"),
        ((torch.randn(2, 4, 6, generator=g), targets_2), "the second row padded: two targets without a loss"),
        ((torch.randn(2, 5, 6, generator=g), targets_3), "prompts masked too; token 0 is a real target"),
        (
            (torch.tensor([[[100.0, 0.0, -100.0], [0.0, 200.0, 0.0]]]), torch.tensor([[2, 1]])),
            "large logits: -log p(2) = 200 in the first position, about 0 in the second",
        ),
    ]
    cases = [Case(args, note, answer(*args)) for args, note in inputs]
    cases[-1].hint = (
        "exp(200) overflows: log(exp / sum) gives inf / inf = nan; torch.log_softmax (or the logits minus their "
        "logsumexp) stays finite"
    )
    return cases


@exercise(
    "chat-targets",
    hint=[
        "walk through ids once and keep a flag: am I inside a reply? Which token switches it on, which one off?",
        "a reply starts AFTER the assistant marker (the marker itself is prompt) and ends WITH the end-of-text "
        "that closes it (a target: it teaches the model to stop); a reply cut off at the end still counts",
        "then shift: target t is ids[t + 1], so keep ids[t + 1] where token t + 1 is part of a reply, -100 "
        "elsewhere, a long tensor of len(ids) - 1; usual mistakes: the closing end-of-text masked, the marker "
        "kept, only the last reply kept (the single-turn prompt mask)",
    ],
)
def _chat_target_cases() -> list[Case]:
    U, A, E = 100, 101, 0  # <|user|>, <|assistant|>, <|endoftext|>
    x = -100
    return [
        Case(([U, 5, 6, A, 7, 8, E], A, E), "one turn", torch.tensor([x, x, x, 7, 8, E])),
        Case(([U, 5, A, 7, E, U, 6, 6, A, 8, 9, E], A, E), "two turns: both replies",
             torch.tensor([x, x, 7, E, x, x, x, x, 8, 9, E])),
        Case(([U, 5, A, 7, 8], A, E), "a reply cut off before its end-of-text", torch.tensor([x, x, 7, 8])),
        Case(([U, 5, 6, E], A, E), "no reply at all: no target", torch.tensor([x, x, x])),
        Case(([U, 5, A, E, U, 6, A, 7, E], A, E), "an empty reply, then one of one token",
             torch.tensor([x, x, E, x, x, x, 7, E])),
    ]  # fmt: skip


@exercise(
    "loss-share",
    hint=[
        "a row of n tokens gives how many targets? And a prompt of p tokens hides how many of them?",
        "n tokens give n - 1 targets (the shift), and every one of them up to the closing end-of-text has a loss; "
        "masking a prompt of p tokens hides the targets 0 .. p - 2, so p - 1 of them",
        "the batch is padded to the longest row L, so it holds B * (L - 1) target positions; the share is the "
        "targets with a loss over that, a float",
    ],
    bans=("course_lib.instruct.collate",),
    prediction=True,
)
def _loss_share_cases() -> list[Case]:
    return [
        Case(([6, 4], [3, 2], False), "two rows, nothing masked", 0.8),
        Case(([6, 4], [3, 2], True), "the same rows, prompts masked", 0.5),
        Case(([4, 4, 4], [3, 1, 2], True), "no padding; a one-token prompt hides nothing", 2 / 3),
        Case(([12, 2], [1, 1], False), "one long row beside a short one", 12 / 22),
    ]


@exercise(
    "bradley-terry",
    hint=[
        "start with two models: which gap s_A - s_B makes A's wins most likely? Set the derivative of "
        "wins_A * log sigma(s) + wins_B * log sigma(-s) to zero",
        "for M models maximise sum over i, j of wins[i, j] * log sigma(s_i - s_j): gradient ascent (autograd, "
        "thousands of steps) or the MM update p_i = W_i / sum_j n_ij / (p_i + p_j) with p = exp(s), "
        "W_i the wins of i and n_ij the games between i and j",
        "iterate until nothing moves by 1e-7, then subtract the mean; usual mistakes: strengths from each "
        "model's overall win rate, wins read transposed, too few steps",
    ],
    prediction=True,
)
def _bradley_terry_cases() -> list[Case]:
    log3 = math.log(3)
    return [
        Case((torch.tensor([[0.0, 30.0], [10.0, 0.0]]),), "A beat B 30 times in 40",
             torch.tensor([log3 / 2, -log3 / 2])),
        Case((torch.tensor([[0.0, 12.0], [12.0, 0.0]]),), "even: both 0", torch.tensor([0.0, 0.0])),
        Case((torch.tensor([[0.0, 30.0, 0.0], [10.0, 0.0, 30.0], [0.0, 10.0, 0.0]]),),
             "a chain: A and C never met", torch.tensor([log3, 0.0, -log3])),
    ]  # fmt: skip


# == 12 · Prompting, inference-time compute, and limits ====================================


@exercise(
    "pass-at-k",
    hint=[
        "turn it around: what is the chance that k samples drawn from the n contain NO right one?",
        "k drawn without replacement from n, of which n - c are wrong: all k are wrong in C(n - c, k) of the "
        "C(n, k) ways (math.comb)",
        "pass@k is the chance of the opposite, as a float (math.comb gives 0 when fewer than k samples are "
        "wrong). The usual mistake, 1 - (1 - c / n) ** k, draws with replacement and is biased low",
    ],
    prediction=True,
)
def _pass_at_k_cases() -> list[Case]:
    return [
        Case((5, 1, 2), "one right of five, two drawn", 0.4),
        Case((10, 3, 1), "k = 1: the share of right samples", 0.3),
        Case((6, 2, 3), "two right of six, three drawn", 0.8),
        Case((5, 3, 4), "only two wrong: four draws always hold a right one", 1.0),
        Case((8, 0, 8), "none right", 0.0),
    ]


@exercise(
    "mcnemar-exact",
    hint=[
        "which items say anything about which of the two is better? Count only those",
        "the items both get right, or both wrong, do not enter; of the d items where they disagree, A alone is "
        "right on some: under 'no difference' each disagreement is a fair coin, a binomial(d, 1/2)",
        "two-sided: the chance of a split at least as uneven as the one seen, in either direction (a tail on "
        "each side), capped at 1; no disagreement at all: 1.0",
    ],
    bans=(
        "course_lib.evaluation.mcnemar_p",
        "course_lib.evaluation.paired_difference",
        "course_lib.evaluation.compare_family",
    ),
)
def _mcnemar_cases() -> list[Case]:
    return [
        Case(([1, 1, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0, 1, 1, 0]), "6 : 1 disagreements, 2 items that agree",
             2 * 8 / 128),
        Case(([1, 0, 1, 0, 1, 0, 1], [0, 1, 0, 1, 0, 1, 1]), "3 : 3, even", 1.0),
        Case(([1] * 7 + [0] * 2 + [1] * 10, [0] * 7 + [1] * 2 + [1] * 10), "7 : 2, 10 items both right",
             2 * 46 / 512),
        Case(([0, 1, 1, 0], [0, 1, 1, 0]), "the same answers: no disagreement", 1.0),
    ]  # fmt: skip


@exercise(
    "holm-adjusted",
    hint=[
        "try p-values whose adjusted values 1 - (1 - p) ** (m - rank) come out smaller for a larger p: is the "
        "result still in the order of the p-values? Try two equal p-values too",
        "Holm-Sidak is a step-down procedure: a hypothesis is rejected only if every smaller p was rejected first, "
        "so an adjusted p can never be below the adjusted p of a smaller p",
        "sort; turn the smallest into 1 - (1 - p) ** m, the next into 1 - (1 - p) ** (m - 1), ...; carry the "
        "running maximum along the sorted order and give each adjusted p back at its input position (a list of "
        "floats); usual mistakes: Holm's (m - rank) * p, Sidak's 1 - (1 - p) ** m for every p, a running minimum "
        "from the largest p (Hochberg's step-up)",
    ],
    bans=("course_lib.evaluation.holm", "course_lib.evaluation.compare_family"),
)
def _holm_cases() -> list[Case]:
    return [
        Case(([0.001, 0.2, 0.01, 0.04],), "four p-values", [1 - 0.999**4, 0.2, 1 - 0.99**3, 1 - 0.96**2]),
        Case(([0.01, 0.04, 0.03],), "three p-values", [1 - 0.99**3, 1 - 0.97**2, 1 - 0.97**2]),
        Case(([0.02, 0.02],), "two equal p-values", [1 - 0.98**2, 1 - 0.98**2]),
        Case(([0.6, 0.7],), "a larger p below a smaller p's adjusted value", [0.84, 0.84]),
    ]


@exercise(
    "majority-right",
    hint=[
        "the majority is right when more than half of the n samples are right: how is the number of right "
        "samples distributed?",
        "the number of right samples is binomial(n, p): sum C(n, k) p^k (1 - p)^(n - k) over the k that are a majority",
        "n is odd, so a majority is k >= (n + 1) / 2, i.e. k > n / 2; the answer is a float. Usual mistakes: "
        "k >= n // 2, p ** n (all right), 1 - (1 - p) ** n (at least one right)",
    ],
    prediction=True,
)
def _majority_right_cases() -> list[Case]:
    return [
        Case((0.6, 1), "one sample: p itself", 0.6),
        Case((0.6, 3), "three samples", 0.648),
        Case((0.2, 3), "three samples of a weak model", 0.104),
        Case((0.5, 5), "a coin stays a coin", 0.5),
    ]


# == 13 · Learning from preferences and rewards ============================================


@exercise(
    "zero-contrast-share",
    hint=[
        "take one problem that one sampled answer gets right with probability p: what is the chance that all "
        "G of its answers are right? that all G are wrong?",
        "the G answers are independent draws: all right with probability p ** G, all wrong with (1 - p) ** G, "
        "and a group has no contrast in either case",
        "add the two for each problem, then average over the problems; usual mistakes: only the all-wrong "
        "groups, the formula applied to the mean rate instead of to each problem",
    ],
    prediction=True,
)
def _zero_contrast_cases() -> list[Case]:
    return [
        Case(([0.5], 2), "one problem, right half the time, groups of 2", 0.5),
        Case(([0.5], 8), "the same problem, groups of 8", 2 / 2**8),
        Case(([0.0, 1.0], 8), "never right, always right: no contrast either way", 1.0),
        Case(([0.1, 0.9, 0.5], 4), "three problems, groups of 4", (0.1**4 + 0.9**4 + 0.9**4 + 0.1**4 + 2 / 16) / 3),
    ]


@exercise(
    "answer-logprob",
    hint=[
        "try V = 2, T = 3, prompt_len = 1 and work the answer out by hand: which row of logits holds the "
        "model's probabilities for ids[1]?",
        "logits[t] is computed from ids[: t + 1], so it predicts the NEXT token, ids[t + 1]: the answer token "
        "ids[t] is scored by row t - 1",
        "the rows prompt_len - 1 to T - 2 against the tokens prompt_len to T - 1, log_softmax over the "
        "vocabulary, summed; usual mistakes: the rows of the answer itself, the prompt summed too, a mean",
    ],
)
def _answer_logprob_cases() -> list[Case]:
    g = _seeded(131)

    def answer(logits: torch.Tensor, ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
        total = torch.zeros((), dtype=logits.dtype)
        for t in range(prompt_len, len(ids)):  # each answer token, scored by the row before it
            total = total + logits[t - 1].log_softmax(dim=-1)[ids[t]]
        return total

    small = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    inputs = [
        ((small, torch.tensor([1, 0, 1]), 1), "V = 2, T = 3: a prompt of one token, an answer of two"),
        ((torch.randn(6, 5, generator=g), torch.randint(0, 5, (6,), generator=g), 4), "a prompt of 4 tokens"),
        ((torch.randn(9, 13, generator=g) * 3, torch.randint(0, 13, (9,), generator=g), 2), "T = 9, V = 13"),
    ]
    return [Case(args, note, answer(*args)) for args, note in inputs]


@exercise(
    "ipo-loss",
    hint=[
        "compute h for each pair first: the chosen answer's log-ratio to the reference minus the rejected one's",
        "h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected), with no beta in it; beta only sets "
        "the target margin 1 / (2 * beta)",
        "each pair's loss is (h - 1 / (2 * beta)) ** 2, and the loss is their mean, a 0-dim tensor; usual "
        "mistakes: beta * h inside the square, the sum over pairs, the reference left out",
    ],
)
def _ipo_cases() -> list[Case]:
    g = _seeded(132)
    ref_c, ref_r = -torch.rand(4, generator=g) * 10, -torch.rand(4, generator=g) * 10
    pol_c, pol_r = -torch.rand(4, generator=g) * 10, -torch.rand(4, generator=g) * 10
    return [
        Case((ref_c, ref_r, ref_c, ref_r, 0.1), "the policy is the reference: h = 0, loss 5 ** 2", torch.tensor(25.0)),
        Case((torch.tensor([-1.0]), torch.tensor([-9.0]), torch.tensor([-4.0]), torch.tensor([-4.0]), 0.5),
             "one pair, h = 8, beta 0.5", torch.tensor(49.0)),
        Case((torch.tensor([-2.0, -3.0]), torch.tensor([-7.0, -3.0]), torch.tensor([-2.0, -2.0]),
              torch.tensor([-2.0, -3.0]), 0.1), "two pairs: h = 5 and h = -1", torch.tensor(18.0)),
        Case((pol_c, pol_r, ref_c, ref_r, 0.25), "four pairs, beta 0.25",
             (((pol_c - ref_c) - (pol_r - ref_r) - 2.0) ** 2).mean()),
    ]  # fmt: skip


@exercise(
    "addition-checker",
    hint=[
        "compute the right answer from the prompt first, as a string; then ask what may differ from it",
        "the prompt looks like '37+45=': split it at '+' and '=', add, and reverse the sum's digits with [::-1]",
        "compare the whole answer, stripped of surrounding spaces, as a string: int() would accept '028' and "
        "'+28', 'in' would accept '2828'",
    ],
    bans=("course_lib.tasks.addition_reward", "course_lib.tasks.addition_answer"),
)
def _checker_cases() -> list[Case]:
    return [
        Case(("37+45=", "28"), "right: 82 reversed", 1.0),
        Case(("37+45=", " 28\n"), "right, with spaces and a newline around it", 1.0),
        Case(("37+45=", "82"), "the digits in the usual order: wrong", 0.0),
        Case(("37+45=", "2828"), "the right digits twice: a hedge, wrong", 0.0),
        Case(("5+5=", "01"), "right: 10 reversed, the zero first", 1.0),
        Case(("37+45=", "028"), "a leading zero: wrong", 0.0),
        Case(("37+45=", "+28"), "a sign: wrong", 0.0),
        Case(("99+99=", "891"), "right: three digits", 1.0),
        Case(("3+4=", "seven"), "not a number: wrong", 0.0),
    ]


# == 14 · Fast inference on a laptop =======================================================


def _zero_point_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The expected answers of "int8-zero-point", step by step as the statement says."""
    low = weight.float().amin(dim=1).clamp(max=0)  # (N,): the range always holds 0
    high = weight.float().amax(dim=1).clamp(min=0)  # (N,)
    scale = torch.where(high > low, (high - low) / 255, torch.ones_like(low))  # (N,)
    zero_point = torch.round(-low / scale).long()  # (N,)
    q = (torch.round(weight.float() / scale[:, None]) + zero_point[:, None]).clamp(0, 255).to(torch.uint8)
    return q, scale, zero_point


@exercise(
    "int8-zero-point",
    hint=[
        "one row at a time: which range must the 256 levels cover, and where does 0.0 land on them?",
        "the range is [min(row min, 0), max(row max, 0)], so scale = (high - low) / 255, and 0.0 sits at the "
        "level zero_point = round(-low / scale); a row of zeros gets scale 1",
        "q = round(w / scale) + zero_point, clamped to 0..255, as torch.uint8; usual mistakes: the range "
        "without 0 (a row of positive weights), 127 or 256 levels, q = round((w - low) / scale)",
    ],
    bans=("torch.quantize_per_channel", "torch.quantize_per_tensor"),
)
def _zero_point_cases() -> list[Case]:
    g = _seeded(141)
    inputs = [
        ((torch.tensor([[-1.0, 0.0, 2.0]]),), "one row from -1 to 2: 0.0 is level 85"),
        ((torch.tensor([[0.2, 1.0, 0.6], [-0.4, -0.2, -1.0]]),), "a row of positive weights, a row of negatives"),
        ((torch.randn(4, 8, generator=g) * 0.02 + 0.01,), "weights of a trained model's size, off centre"),
        ((torch.tensor([[0.0, 0.0], [3.0, -1.0]]),), "a row of zeros: scale 1, all at the zero point"),
    ]
    return [Case(args, note, _zero_point_int8(*args)) for args, note in inputs]


@exercise(
    "int4-unpack",
    reference=lambda packed: unpack_int4(packed),
    hint=[
        "pack a row of four values by hand, e.g. [1, 2, 3, 4]: which bits of which byte hold each?",
        "the low four bits of byte j (packed & 15) are column 2j, the high four (packed >> 4) column 2j + 1",
        "put them back in the order even, odd, even, odd: stack the two on a new last dimension and reshape to "
        "(N, K); usual mistakes: the high bits first, the evens and the odds side by side (torch.cat)",
    ],
    bans=("course_lib.quantization.unpack_int4", "course_lib.quantization.Int4Linear"),
)
def _unpack_cases() -> list[Case]:
    g = _seeded(142)
    return [
        Case((torch.tensor([[0x21, 0xF0]], dtype=torch.uint8),), "one row: 0x21 holds 1 (low) and 2 (high)"),
        Case((torch.tensor([[0x43, 0x00], [0xFF, 0x5A]], dtype=torch.uint8),), "two rows"),
        Case((torch.randint(0, 256, (3, 8), generator=g).to(torch.uint8),), "(3, 8) bytes: 16 values a row"),
    ]


@exercise(
    "draft-acceptance",
    hint=[
        "a guess x comes with probability q(x) and is then kept with probability min(1, p(x) / q(x)): add "
        "that up over the vocabulary",
        "q(x) * min(1, p(x) / q(x)) simplifies: it is min(q(x), p(x)), and it stays right where q(x) = 0 (such "
        "a token is never proposed), where p / q would not",
        "so the rate is the sum of min(p, q) over the last dimension, one number per row; usual mistakes: "
        "q * min(1, p / q) (0 / 0 where q = 0), a mean instead of a sum, 1 - sum |p - q| without the half",
    ],
    prediction=True,
)
def _acceptance_cases() -> list[Case]:
    p = torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])
    q = torch.tensor([[0.1, 0.1, 0.1, 0.3, 0.4], [0.2, 0.2, 0.2, 0.2, 0.2]])
    return [
        Case((torch.tensor([0.6, 0.4]), torch.tensor([0.6, 0.4])), "the draft is the target: every guess kept",
             torch.tensor(1.0)),
        Case((torch.tensor([0.6, 0.4]), torch.tensor([0.3, 0.7])), "two tokens", torch.tensor(0.7)),
        Case((torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.75, 0.0])), "a token neither proposes",
             torch.tensor(0.75)),
        Case((p, q), "a batch of two rows: the second draft is exact", torch.tensor([0.4, 1.0])),
    ]  # fmt: skip


@exercise(
    "residual-rows",
    hint=[
        "try the function on a batch of two rows (B, V), and on a row where q equals p",
        "the sum must run over each row's vocabulary only (dim=-1, keepdim=True), and a row with nothing left "
        "over has a sum of 0: 0 / 0",
        "where a row's sum is 0, return that row of p (torch.where over the rows); a shorter q is padded with "
        "zeros on the right, as the function above does; usual mistakes: one sum for the whole batch, NaN for "
        "q == p, p for the whole batch when one row is left with nothing",
    ],
    bans=("course_lib.speculative.residual_distribution",),
)
def _residual_rows_cases() -> list[Case]:
    return [
        Case((torch.tensor([0.4, 0.4, 0.2]), torch.tensor([0.1, 0.2, 0.7])), "one row: two tokens left over",
             torch.tensor([0.6, 0.4, 0.0])),
        Case((torch.tensor([[0.7, 0.3], [0.5, 0.5]]), torch.tensor([[0.5, 0.5], [0.9, 0.1]])), "a batch of rows",
             torch.tensor([[1.0, 0.0], [0.0, 1.0]])),
        Case((torch.tensor([0.3, 0.7]), torch.tensor([0.3, 0.7])), "q == p: nothing left over, p itself",
             torch.tensor([0.3, 0.7])),
        Case((torch.tensor([[0.2, 0.8], [0.5, 0.5]]), torch.tensor([[0.2, 0.8], [0.75, 0.25]])),
             "a batch whose first row has q == p", torch.tensor([[0.2, 0.8], [0.0, 1.0]])),
        Case((torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]]), torch.tensor([[0.6, 0.4], [0.1, 0.9]])),
             "a draft of 2 tokens for a target of 3: q is 0 for the third",
             torch.tensor([[0.0, 0.0, 1.0], [0.1 / 0.6, 0.0, 0.5 / 0.6]])),
    ]  # fmt: skip


# == 15 · What the model learned ===========================================================


def _attention_stack(seed: int, L: int, H: int, T: int) -> list[torch.Tensor]:
    """L causal attention tensors (1, H, T, T) with random rows: a case no pattern answers by luck."""
    g = _seeded(seed)
    mask = causal_mask(T)
    return [softmax(torch.randn(1, H, T, T, generator=g).masked_fill(~mask, float("-inf"))) for _ in range(L)]


def _duplicate_scores(attention: list[torch.Tensor], period: int) -> torch.Tensor:
    """The expected answers of "duplicate-token-scores", worked out position by position."""
    T = attention[0].shape[-1]
    rows = []
    for a in attention:  # (B, H, T, T)
        weights = [a[:, :, t, t - period] for t in range(T - period, T)]  # each (B, H)
        rows.append(torch.stack(weights).mean(dim=(0, 1)))  # (H,)
    return torch.stack(rows)  # (L, H)


@exercise(
    "uniform-previous-token-score",
    hint=[
        "at position t a uniform head gives each of the t + 1 positions it may see the same weight: how much "
        "lands on t - 1?",
        "the score is the mean of those weights over t = 1, ..., T - 1 (position 0 has no previous token): "
        "T - 1 numbers 1/2, 1/3, ..., 1/T",
        "usual mistakes: 1/T everywhere, position 0 counted (weight 1 on nothing), 1/t instead of 1/(t + 1)",
    ],
    prediction=True,
)
def _uniform_score_cases() -> list[Case]:
    def exact(T: int) -> float:
        return sum(1 / (t + 1) for t in range(1, T)) / (T - 1)

    return [
        Case((2,), "two tokens: one position with a previous token", 0.5),
        Case((3,), "three tokens", exact(3)),
        Case((64,), "the toy model's 64 tokens", exact(64)),
        Case((128,), "the course GPT's 128 tokens", exact(128)),
    ]


@exercise(
    "duplicate-token-scores",
    hint=[
        "which key does a duplicate-token head look at from query t: the earlier copy of the token at t, or "
        "the token after it?",
        "the second copy is the last `period` positions; from each query t there, which key holds the same "
        "token? Average that weight over the batch and those queries: (H,) per layer, stacked to (L, H)",
        "usual mistakes: t - period + 1 (that is the induction score), queries from the first copy too, the "
        "mean over heads",
    ],
)
def _duplicate_cases() -> list[Case]:
    one = torch.zeros(1, 1, 4, 4)  # tokens a b a b: position 2 looks at 0, position 3 at 1
    one[0, 0, 0, 0] = one[0, 0, 1, 0] = one[0, 0, 2, 0] = one[0, 0, 3, 1] = 1.0
    random = _attention_stack(151, 2, 3, 10)  # 2 tokens first, then a block of 4 twice
    bos = _attention_stack(152, 1, 2, 7)  # a first token, then a block of 3 twice
    return [
        Case(([one], 2), "one head that always looks at the earlier copy: 1", torch.ones(1, 1)),
        Case(([one.flip(-1).tril()], 2), "a head that never does: 0", torch.zeros(1, 1)),
        Case((random, 4), "two layers of three heads, random weights", _duplicate_scores(random, 4)),
        Case((bos, 3), "a first token before the two copies", _duplicate_scores(bos, 3)),
    ]


def _mean_ablated(z: torch.Tensor, head: int) -> torch.Tensor:
    """The expected answers of "mean-ablate"."""
    out = z.clone()
    out[:, :, head] = z[:, :, head].mean(dim=(0, 1))  # (D,): one mean per dimension
    return out


@exercise(
    "mean-ablate",
    hint=[
        "how many numbers does z[:, :, head].mean() return, and how many should the head's mean have?",
        "the mean keeps the head's dimension D: average over the batch and the positions only, "
        "z[:, :, head].mean(dim=(0, 1)), shape (D,), which broadcasts over (B, T, D)",
        "usual mistakes: one number for all of D, the mean over the batch only (one per position), the "
        "other heads changed too",
    ],
)
def _mean_ablate_cases() -> list[Case]:
    g = _seeded(153)
    small = torch.arange(24.0).view(2, 2, 2, 3)  # (B=2, T=2, H=2, D=3)
    z, wide = torch.randn(3, 5, 4, 8, generator=g), torch.randn(1, 6, 2, 4, generator=g)
    return [
        Case((small, 0), "B = 2, T = 2, H = 2, D = 3: head 0", _mean_ablated(small, 0)),
        Case((small.clone(), 1), "the same z, head 1", _mean_ablated(small, 1)),
        Case((z, 2), "random z (3, 5, 4, 8), head 2", _mean_ablated(z, 2)),
        Case((wide, 1), "one sequence: the mean over its positions", _mean_ablated(wide, 1)),
    ]


@exercise(
    "settled-fraction",
    hint=[
        "first decide, for each prompt and each layer, whether the answer is within the top k there; then: "
        "which layers count for a prompt that is in the top k early, drops out, and comes back?",
        "the answer's rank is how many logits are strictly larger than its own (gather it per prompt); a layer "
        "counts only if the answer stays within the top k from there to the last layer: an 'and' over the "
        "later layers, read from the last layer backwards",
        "then average over the prompts, not the layers; usual mistakes: every layer where the answer is in the "
        "top k counted, ties counted against the answer, a count instead of a fraction",
    ],
)
def _settled_cases() -> list[Case]:
    rises = torch.tensor([[3.0, 1.0, 0.0], [2.0, 1.5, 0.0], [0.0, 2.0, 1.0], [0.0, 3.0, 1.0]])  # (4 layers, V = 3)
    dips = torch.tensor([[0.0, 2.0, 1.0], [3.0, 1.0, 2.0], [0.0, 2.0, 1.0], [0.0, 2.0, 1.0]])
    return [
        Case((rises[None], torch.tensor([1]), 1), "one prompt, top from layer 2 on", torch.tensor([0.0, 0, 1, 1])),
        Case((rises[None], torch.tensor([1]), 2), "the same within the top 2: from layer 0", torch.ones(4)),
        Case((torch.stack([rises, dips, dips]), torch.tensor([1, 1, 0]), 1),
             "three prompts: one settles at 2, one is top at 0, lost at 1, top from 2; one never",
             torch.tensor([0.0, 0, 2 / 3, 2 / 3])),
        Case((torch.tensor([[[1.0, 1.0], [2.0, 2.0]]]), torch.tensor([1]), 1), "a tie counts for the answer",
             torch.ones(2)),
    ]  # fmt: skip
