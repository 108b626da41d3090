"""The key's registers, which each chapter's module (``chNN.py``) fills: a solution, hidden cases and
typical mistakes per exercise, and the demo set of hidden cases drawn from a seed (:func:`demo_cases`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from course_lib.exercises import Case

SEED = 1000  # the demo set's random inputs are drawn from generators seeded from this


class Register(dict):
    """Exercise name -> one part of its key, in the course's order; a name is registered once."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def __setitem__(self, name: str, value: object) -> None:
        if name in self:
            raise ValueError(f"{self.what} of {name!r} defined twice")
        super().__setitem__(name, value)


SOLUTIONS: dict[str, Callable] = Register("solution")  # a correct solution, written as a student would
HIDDEN: dict[str, Callable[[int], list[Case]]] = Register("hidden cases")  # seed -> its hidden cases
MISTAKES: dict[str, list[Callable]] = Register("typical mistakes")  # wrong solutions, each failing a visible case


def solution(name: str) -> Callable[[Callable], Callable]:
    """Register the solution of exercise ``name``."""

    def register(fn: Callable) -> Callable:
        SOLUTIONS[name] = fn
        return fn

    return register


def hidden(name: str) -> Callable[[Callable[[int], list[Case]]], Callable[[int], list[Case]]]:
    """Register the hidden cases of exercise ``name``: a function of the seed its random inputs are drawn
    from, which leaves ``expected`` out where the exercise's reference or its solution answers the case."""

    def register(cases: Callable[[int], list[Case]]) -> Callable[[int], list[Case]]:
        HIDDEN[name] = cases
        return cases

    return register


def demo_cases(seed: int = SEED) -> dict[str, Callable[[], list[Case]]]:
    """The demo set as the grader reads hidden cases: exercise name -> a function building its cases
    afresh, their random inputs drawn from ``seed``."""
    return {name: functools.partial(cases, seed) for name, cases in HIDDEN.items()}
