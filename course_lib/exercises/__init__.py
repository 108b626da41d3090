"""Self-checks for the exercises at the end of each notebook: ``check("exercise-name", fn)``.

The checker (cases, hints, the check) is :mod:`course_lib.exercises.core`, its bans
:mod:`course_lib.exercises.bans`; each notebook's exercises, with their visible cases, are in a
module of their own, ``chNN.py``, imported here in the course's order (00 first), so that
:data:`EXERCISES` lists them as the notebooks use them. The instructors' key (solutions, hidden
cases, typical mistakes) is in :mod:`course_lib.grading.keys`, one module per notebook too.
"""

from . import bans, ch00, ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11, ch12, ch13, ch14, ch15, core
from .bans import BanBypassed, BannedFunction, banned, banned_use
from .core import (
    _FROM_REFERENCE,
    EXERCISES,
    MAX_RETURNED,
    Case,
    ChangedInput,
    CheckResult,
    Exercise,
    _difference,
    _same,
    _show,
    call,
    check,
    exercise,
    plain,
)

__all__ = [  # the private names too: the grader's scoring reads answers and shows values as check does
    "_FROM_REFERENCE",
    "_difference",
    "_same",
    "_show",
    "EXERCISES",
    "MAX_RETURNED",
    "BanBypassed",
    "BannedFunction",
    "Case",
    "ChangedInput",
    "CheckResult",
    "Exercise",
    "banned",
    "banned_use",
    "bans",
    "call",
    "check",
    "core",
    "exercise",
    "plain",
    "ch00",
    "ch01",
    "ch02",
    "ch03",
    "ch04",
    "ch05",
    "ch06",
    "ch07",
    "ch08",
    "ch09",
    "ch10",
    "ch11",
    "ch12",
    "ch13",
    "ch14",
    "ch15",
]
