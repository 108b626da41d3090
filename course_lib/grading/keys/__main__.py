"""``python3 course.py solutions`` lists the exercises, ``python3 course.py solutions NAME...`` prints the
solutions of those (``python -m course_lib.grading.keys``)."""

from __future__ import annotations

import inspect
import sys

from course_lib.exercises import EXERCISES

from . import SOLUTIONS


def main(argv: list[str]) -> int:
    if not argv:
        print("exercises (python3 course.py solutions NAME... prints their solutions):")
        print("\n".join(f"  {name}" for name in EXERCISES))
        return 0
    unknown = [name for name in argv if name not in EXERCISES]
    if unknown:
        print(f"no exercise named {', '.join(map(repr, unknown))}; `python3 course.py solutions` lists them")
        return 2
    for name in argv:
        print(f"# == {name} ==\n{inspect.getsource(SOLUTIONS[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
