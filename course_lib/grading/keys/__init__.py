"""The instructors' key: for every exercise its solution, its hidden cases and its typical mistakes, one
module per notebook (``chNN.py``, beside the exercise's visible cases in ``course_lib/exercises/chNN.py``).

``core.py`` holds the registers the chapters fill (:data:`SOLUTIONS`, :data:`HIDDEN`, :data:`MISTAKES`)
and :func:`demo_cases`, the demo set of hidden cases the grader uses without ``--cases``; ``__main__.py``
is ``python3 course.py solutions [NAME...]``. Nothing a student runs imports this folder, and the
students' copy (``course.py students-copy``) leaves all of it out. A solution is written as a student
would; ``tests/test_exercises.py`` checks it passes every visible case and that each typical mistake fails
one, ``tests/test_grading.py`` that the solution passes every hidden case and each mistake fails one.
"""

from . import ch00, ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11, ch12, ch13, ch14, ch15
from .core import HIDDEN, MISTAKES, SEED, SOLUTIONS, demo_cases

__all__ = [  # the chapters in the course's order: importing them fills the registers in that order
    "HIDDEN", "MISTAKES", "SEED", "SOLUTIONS", "demo_cases",
    "ch00", "ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07",
    "ch08", "ch09", "ch10", "ch11", "ch12", "ch13", "ch14", "ch15",
]  # fmt: skip
