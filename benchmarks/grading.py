"""How long `python3 course.py grade` takes for a class (a benchmark, not a test).

Builds a class of N student copies of the course notebooks (cycling through every notebook with
exercises; in each copy the first exercise is solved with its solution in course_lib/grading/keys/,
the second left as handed out), grades it as `course.py grade` does, and prints the time per
notebook and the time for classes of 30 and 80. With --baseline it also grades the same class running
every cell of each notebook (training included, as the student's kernel did), for the ratio.

    .venv/bin/python benchmarks/grading.py                 # 13 students, default jobs
    .venv/bin/python benchmarks/grading.py --students 26 --baseline
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.update(COURSE_BUDGET="ci", COURSE_DEVICE="cpu", PYTHONHASHSEED="0")

from course_lib.grading import grader, submissions  # noqa: E402
from course_lib.grading.keys import SOLUTIONS  # noqa: E402


def make_class(folder: Path, students: int) -> list[Path]:
    course = [nb for nb in submissions.course_notebooks() if nb.exercises]
    paths = []
    for k in range(students):
        nb_info = course[k % len(course)]
        nb = json.loads((submissions.COURSE_NOTEBOOKS / f"{nb_info.name}.ipynb").read_text(encoding="utf-8"))
        solved = nb_info.exercises[0]
        for cell in nb["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and f'check("{solved}"' in source:
                fn_name = submissions.find_checks(source)[0][0][1]
                solution = SOLUTIONS[solved]
                code = "import math\nimport torch\nimport torch.nn.functional as F\n\n" + inspect.getsource(solution)
                cell["source"] = f'{code}\n{fn_name} = {solution.__name__}\ncheck("{solved}", {fn_name})\n'
        path = folder / f"student{k:03d}.ipynb"
        path.write_text(json.dumps(nb), encoding="utf-8")
        paths.append(path)
    return paths


def grade(folder: Path, out: Path, jobs: int | None, every_cell: bool) -> tuple[float, list]:
    start = time.perf_counter()
    reports = grader.grade_class([folder], out, jobs=jobs, timeout=300, every_cell=every_cell, log=lambda s: None)
    return time.perf_counter() - start, reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=13)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--baseline", action="store_true", help="also grade running every cell")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        make_class(folder, args.students)
        jobs = args.jobs or max(1, (os.cpu_count() or 2) // 2)
        print(f"{args.students} students, {os.cpu_count()} cores, {jobs} notebooks at a time, CI budget")
        took, reports = grade(folder, Path(tmp) / "grades", args.jobs, every_cell=False)
        statuses = [g.status for r in reports for g in r.grades]
        print(f"graded: {statuses.count('passed')} passed, {statuses.count('not attempted')} not attempted")
        per = took / args.students
        print(f"the cells the exercises need: {took:.0f} s, {per:.1f} s per notebook")
        print(f"  a class of 30: {30 * per / 60:.1f} min; of 80: {80 * per / 60:.1f} min")
        if args.baseline:
            full, _ = grade(folder, Path(tmp) / "grades-all", args.jobs, every_cell=True)
            print(f"every cell (--every-cell): {full:.0f} s, {full / args.students:.1f} s per notebook")
            print(f"  ratio: {full / took:.1f}x slower than the cells the exercises need")


if __name__ == "__main__":
    main()
