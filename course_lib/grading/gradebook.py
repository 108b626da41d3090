"""The report: what a grading run writes, written as it goes, so that no finished grade is lost.

The output folder holds ``grades.csv`` (one row per student and exercise), ``feedback/<student>.md``
(the file handed back) and ``records/<student>.json``. As soon as a notebook is graded its feedback
file and its record are written, then grades.csv again, each replaced atomically: grades.csv always
lists every exercise of each notebook it names, and a run that stopped (Ctrl-C, power, a crash)
leaves every finished grade behind. A record says which file (by SHA-256) was graded with which
settings, so the same command run again grades only what is missing; ``regrade`` starts over.
"""

from __future__ import annotations

import csv
import io
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from ..exercises import EXERCISES, _show
from ..files import sha256_file, write_atomically
from .scoring import STATUSES, Grade

COLUMNS = ("notebook", "exercise", "status", "cases_passed", "cases_total", "feedback")
RECORD_VERSION = 1


@dataclass
class NotebookReport:
    """One notebook graded: which course notebook it copies, a grade per exercise, notes on the run."""

    path: str
    course_notebook: str | None
    grades: list[Grade]
    notes: list[str]
    seconds: float


def feedback_markdown(report: NotebookReport) -> str:
    """The file a student gets back: each exercise's status, what happened in a sentence when it did
    not run to the end, every case, the first failure in full."""
    lines = [f"# Feedback: {Path(report.path).name}", ""]
    if report.course_notebook:
        lines += [f"Graded as notebook `{report.course_notebook}`, with the CI training budget.", ""]
    lines += ["| exercise | status | cases passed |", "|---|---|---|"]
    lines += [f"| {g.exercise or '-'} | {g.status} | {g.cases_passed}/{g.cases_total} |" for g in report.grades]
    for g in report.grades:
        lines += ["", f"## {g.exercise or 'the file'}: {g.status}"]
        if g.what_happened:
            lines += ["", g.what_happened[0].upper() + g.what_happened[1:].rstrip(".") + "."]
        if g.cases and g.status != "not attempted":
            lines.append("")
            for case, ok, _ in g.cases:
                kind = "hidden" if case.hidden else "visible"
                lines.append(f"- {'✅' if ok else '❌'} {kind}: {case.note or 'case'}")
            missing = g.cases_total - len(g.cases)
            if missing:
                lines.append(f"- ⏹ {missing} more case(s) not run")
            failing = next(((c, got) for c, ok, got in g.cases if not ok), None)
            if failing:
                case, got = failing
                hint = EXERCISES[g.exercise].hint(case.hint)
                lines += ["", "First failing case" + (f" ({case.note})" if case.note else "") + ":", "", "```"]
                lines += [f"input:    {case.args_text}", f"expected: {_show(case.expected)}", f"got:      {got}"]
                lines += ["```", "", f"Hint: {hint}"]
        elif g.feedback and not g.what_happened:
            lines += ["", g.feedback]
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


def file_names(notebooks: list[Path]) -> dict[Path, str]:
    """A file name (no suffix) per notebook for its feedback and record: its stem, made safe and unique."""
    names: dict[Path, str] = {}
    for path in notebooks:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem) or "notebook"
        name, k = stem, 1
        while name in names.values():
            k += 1
            name = f"{stem}-{k}"
        names[path] = name
    return names


def _sha256(path: Path) -> str:
    try:
        return sha256_file(path)
    except OSError:  # gone or unreadable: graded as such, and again next time
        return ""


class Gradebook:
    """The output folder of one class: the notebooks already graded (from their records) and the
    writing of each new result as soon as it is known."""

    def __init__(self, out: str | Path, notebooks: list[Path], settings: dict, regrade: bool = False) -> None:
        self.out = Path(out)
        self.notebooks = notebooks
        self.settings = settings
        self.names = file_names(notebooks)
        self.reports: dict[Path, NotebookReport] = {}
        self._lock = threading.Lock()
        if not regrade:
            for path in notebooks:
                report = self._resumed(path)
                if report is not None:
                    self.reports[path] = report
        self._write_csv()

    def _record_path(self, path: Path) -> Path:
        return self.out / "records" / f"{self.names[path]}.json"

    def _resumed(self, path: Path) -> NotebookReport | None:
        """The report of ``path`` recorded by an earlier run, if it graded this very file with these settings."""
        try:
            record = json.loads(self._record_path(path).read_text(encoding="utf-8"))
            same = (record["version"], record["path"], record["sha256"], record["settings"])
            if same != (RECORD_VERSION, str(path), _sha256(path), self.settings):
                return None
            grades = [
                Grade(
                    r["notebook"],
                    r["exercise"],
                    r["status"],
                    int(r["cases_passed"]),
                    int(r["cases_total"]),
                    r["feedback"],
                )
                for r in record["grades"]
            ]
            return NotebookReport(str(path), record["course_notebook"], grades, record["notes"], record["seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def todo(self) -> list[Path]:
        """The notebooks still to grade, in order."""
        return [p for p in self.notebooks if p not in self.reports]

    def add(self, path: Path, report: NotebookReport) -> None:
        """Write the feedback file and the record of ``path``, then grades.csv again (each atomically)."""
        record = {
            "version": RECORD_VERSION,
            "path": str(path),
            "sha256": _sha256(path),
            "settings": self.settings,
            "course_notebook": report.course_notebook,
            "notes": report.notes,
            "seconds": report.seconds,
            "grades": [g.row() for g in report.grades],
        }
        with self._lock:
            write_atomically(self.out / "feedback" / f"{self.names[path]}.md", feedback_markdown(report))
            write_atomically(self._record_path(path), json.dumps(record, indent=1))
            self.reports[path] = report
            self._write_csv()

    def _write_csv(self) -> None:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=COLUMNS)
        writer.writeheader()
        for path in self.notebooks:
            if path in self.reports:
                writer.writerows(g.row() for g in self.reports[path].grades)
        write_atomically(self.out / "grades.csv", text.getvalue())

    def all_reports(self) -> list[NotebookReport]:
        """Every notebook's report, graded now or earlier, in order."""
        return [self.reports[p] for p in self.notebooks if p in self.reports]
