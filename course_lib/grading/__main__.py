"""The grader's command line, ``python -m course_lib.grading`` (what ``python3 course.py grade`` runs)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from course_lib import grading

from .gradebook import summary_table
from .grader import grade_class
from .scoring import export_cases, load_cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course.py grade", description=grading.__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="student notebooks, or folders of them")
    parser.add_argument("--out", default="grades", help="folder for grades.csv and feedback/ (default: grades)")
    parser.add_argument("--cases", help="your hidden cases (a file from --export-cases); default: the demo set")
    parser.add_argument("--export-cases", metavar="FILE", help="write the demo set, new seed, to FILE and stop")
    parser.add_argument("--regrade", action="store_true", help="grade every notebook again, even those in --out")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per cell and per exercise (default 60)")
    parser.add_argument("--jobs", type=int, default=None, help="notebooks graded at once (default: half the cores)")
    parser.add_argument(
        "--every-cell", action="store_true", help="run every code cell, not only those the exercises depend on"
    )
    parser.add_argument("--memory", type=float, default=6.0, help="GiB of memory per notebook (default 6)")
    args = parser.parse_args(argv)
    if not args.paths and not args.export_cases:
        parser.error("give student notebooks or folders of them (or --export-cases FILE)")
    try:
        if args.export_cases:
            path = export_cases(args.export_cases)
            print(f"wrote {path}: change or add cases, keep it from students, grade with --cases {path}")
            return 0
        cases = load_cases(args.cases)
    except (OSError, ValueError) as err:  # a file that is there, one that is not, one that is not cases
        parser.error(str(err))
    start = time.perf_counter()
    try:
        reports = grade_class(
            args.paths,
            args.out,
            timeout=args.timeout,
            jobs=args.jobs,
            memory_gb=args.memory,
            every_cell=args.every_cell,
            cases=cases,
            regrade=args.regrade,
        )
    except KeyboardInterrupt:
        print(f"\nstopped; every finished grade is in {Path(args.out) / 'grades.csv'}: run the same command to go on")
        return 130
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
