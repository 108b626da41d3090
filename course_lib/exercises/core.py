"""The checker of the exercises at the end of each notebook: cases, hints and the check.

A student writes a function and calls ``check("exercise-name", their_function)``. The
checker runs it on a handful of cases and answers "passed" or, for the first case that
fails, the input, the expected answer, what the function returned, where the two first differ and
a hint. Hints come in steps: a nudge on the first failure, more on each failure after it (counted
per exercise in the running kernel); a case may name the step it tests, shown first, and a
result whose one fault is its dtype is told so instead. A starter
function that still raises ``NotImplementedError`` gets one neutral line, so a notebook is stored
showing no case, no answer and no hint. Each call gets a fresh copy of its case's inputs
(:func:`call`), and a function that changes one of them in place fails that case: the statements ask
for a new value, and the caller's tensors must stay as they were. What it returns is read as the
grader reads it (:func:`plain`: tensors and plain Python values), so a return the grader refuses, a
NumPy array say, fails here too, with the same words.

An exercise may ban functions (``bans``, :mod:`course_lib.exercises.bans`). Before the first
case, the student's function is read (:func:`banned_use`): its code and the code nested in it, its
default arguments, closures, the globals it names (followed through the student's own functions,
classes and containers) and the attributes it names on modules (a re-export such as
``course_lib.rl.wilson_interval`` is the banned function itself); reaching a banned function, or
torch's private namespaces (``torch._C``, ``torch.ops``, ``torch._*``), fails every case with a
sentence saying how. While the cases run, each banned function is replaced, in its module and in
every module that re-exports it, by one that raises :class:`BannedFunction`. A ban is a rule the
checker enforces against these routes, not a sandbox: code built to hide what it calls (names
assembled at run time) can still get through, and the grader runs the same checks.

Each case's expected answer is either the case's own ``expected`` value (for an exercise whose
answer is no course_lib function: nothing a student could import answers it) or the
``reference`` applied to the case's inputs (a tested course_lib function, so the exercise and
the course can never disagree). The exercises themselves, one module per notebook, are
``course_lib/exercises/chNN.py``.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .bans import banned, banned_use, resolve

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
        resolve(path)  # a misspelt ban fails here, not silently later

    def register(cases: Callable[[], list[Case]]) -> Callable[[], list[Case]]:
        if name in EXERCISES:
            raise ValueError(f"exercise {name!r} is defined twice")
        EXERCISES[name] = Exercise(name, reference, cases, hints, tuple(bans), prediction)
        return cases

    return register


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


# == what a function may return: one rule for the check and the grader =======================

MAX_RETURNED = 1 << 24  # elements of a returned tensor the grader sends back; more is refused


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as tensors and plain values only (a Python number, string, None, or a list, tuple or dict
    of them), or TypeError/ValueError naming what it is instead. The check compares what this gives,
    and the grader's student process sends it back, so the two accept and refuse the same returns."""
    if depth > 20:
        raise ValueError("nested more than 20 levels deep")
    if type(value) in (torch.Tensor, torch.nn.Parameter):
        if value.numel() > MAX_RETURNED:
            raise ValueError(f"a tensor of shape {tuple(value.shape)}, too large to send back")
        return value.detach().to("cpu").clone()
    if isinstance(value, torch.Tensor):
        raise TypeError(f"an object of type {type(value).__name__}, a subclass of torch.Tensor, not a plain tensor")
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
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in list(value.items())[:100_000]}
    if isinstance(value, tuple):
        return tuple(plain(v, depth + 1) for v in value[:100_000])
    if isinstance(value, list):
        return [plain(v, depth + 1) for v in value[:100_000]]
    raise TypeError(
        f"an object of type {type(value).__name__}, not a tensor or a plain value "
        "(return a torch tensor, or a Python number, string, list, tuple or dict: `.item()` gives a number)"
    )


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


def _dtype_only(got: Any, expected: Any) -> bool:
    """Whether ``got`` holds ``expected``'s values in another dtype: the one thing wrong is the dtype."""
    if not (isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)) or got.dtype == expected.dtype:
        return False
    return got.dtype.is_complex == expected.dtype.is_complex and _same(got.to(expected.dtype), expected)


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
            agree = " (the values agree)" if _dtype_only(got, expected) else ""
            return f"the dtype: expected {expected.dtype}, got {got.dtype}{agree}"
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
        if key is None:
            return None
        want, have = (repr(d[key]) if key in d else "no such key" for d in (expected, got))
        return f"at key {key!r}: expected {want}, got {have}"
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
                    returned = call(fn, case.args)
            except ChangedInput as err:
                got_text, ok = str(err), False
            except NotImplementedError:
                if k == 1:
                    return CheckResult(name, False, f"{NOT_ATTEMPTED} {name}: not attempted yet; {NEXT_STEP}")
                got_text, ok = "raised NotImplementedError", False
            except Exception as err:  # the student's code failing is a result to explain
                got_text, ok = f"raised {type(err).__name__}: {err}", False
            else:
                try:
                    got = plain(returned)  # what the grader receives: a return it refuses is refused here
                except (TypeError, ValueError) as err:
                    got_text, ok = f"returned {err}", False
                else:
                    got_text, ok = _show(got), _same(got, expected)
        if not ok:
            FAILURES[name] = FAILURES.get(name, 0) + 1
            if _dtype_only(got, expected):  # the one step that helps, whatever the case tests
                steps = ex.steps(f"the values are right: return them as {expected.dtype}, as the statement says")
            else:
                steps = ex.steps(case.hint)
            shown = steps[: FAILURES[name]]
            more = " (each failed run shows one more step)" if len(shown) < len(steps) else ""
            if ex.prediction:  # the expected value is the number the student is asked to predict
                expected_text, where = "not shown: it is what this exercise asks you to predict", None
            else:
                answered = got is not _FROM_REFERENCE
                expected_text, where = _show(expected), _difference(got, expected) if answered else None
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
