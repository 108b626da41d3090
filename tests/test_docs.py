"""The three documents (README.md for students, INSTRUCTORS.md, CONTRIBUTING.md) against the
repository: every count they state, every chapter they name for a need, every command they give.
A number that cannot be checked here (a download size, a measured memory) is tied to the pin it was
measured with."""

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = {name: (ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "INSTRUCTORS.md", "CONTRIBUTING.md")}
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def course_py():
    spec = importlib.util.spec_from_file_location("course_for_docs", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def text_of(notebook: Path) -> str:
    return "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells)


def outputs_of(notebook: Path) -> str:
    cells = nbformat.read(notebook, as_version=4).cells
    return "\n".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in cells
        if c.cell_type == "code"
        for o in c.outputs
    )


def chapters(listed: str) -> set[str]:
    """``"11, 12, 14 and 15"`` -> {"11", "12", "14", "15"}."""
    return set(re.findall(r"\b\d\d\b", listed))


def every(pattern: str) -> list[tuple[str, str]]:
    return [(name, m) for name, text in DOCS.items() for m in re.findall(pattern, text)]


def test_the_number_of_notebooks():
    stated = every(r"\b(\d+) (?:Jupyter )?notebooks\b")
    assert stated and all(int(n) == len(NOTEBOOKS) for _, n in stated), stated


def test_the_number_of_exercises():
    from course_lib.exercises import EXERCISES

    stated = every(r"exercises \((\d+) in all\)")
    assert stated and all(int(n) == len(EXERCISES) for _, n in stated), stated


def test_the_characters_of_the_default_corpus():
    from course_lib.data import load_corpus

    stated = every(r"(\d{3},\d{3}) characters")  # the corpus's count, not a path's length
    assert stated and all(int(n.replace(",", "")) == len(load_corpus()) for _, n in stated), stated


def test_the_pythons_the_course_supports():
    (oldest, newest) = course_py().PYTHONS
    stated = every(r"Python (3\.\d+) to (3\.\d+)")
    assert stated and all(pair == (f"3.{oldest[1]}", f"3.{newest[1]}") for _, pair in stated), stated


def chapter_table() -> list[list[str]]:
    lines = [line for line in DOCS["README.md"].splitlines() if re.match(r"\| \d\d \|", line)]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]


def test_the_chapter_table_lists_every_notebook_with_its_link():
    rows = chapter_table()
    assert [r[0] for r in rows] == [p.name[:2] for p in NOTEBOOKS]
    for (number, title, needs, timed), notebook in zip(rows, NOTEBOOKS):
        assert f"(notebooks/{notebook.name})" in title


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_what_each_chapter_needs_and_its_timed_training(notebook):
    number, title, needs, timed = next(r for r in chapter_table() if r[0] == notebook.name[:2])
    source = text_of(notebook)
    assert ("SmolLM2" in needs) == ("load_smollm2(" in source), "SmolLM2 in the table <=> the notebook loads it"
    assert ("optional" in needs) == ("download" in source.lower()), "an optional download <=> the notebook has one"
    for size in re.findall(r"\d+ [kM]B", needs):
        assert size in source, f"{size} is not what the notebook says it downloads"
    for seconds in re.findall(r"\d+ s\b", timed):
        assert seconds in outputs_of(notebook), f"{seconds} is not a time the stored run printed"


def test_the_chapters_named_for_smollm2():
    users = {p.name[:2] for p in NOTEBOOKS if "load_smollm2(" in text_of(p)}
    stated = every(r"SmolLM2 \(chapters ([\d, and]+)\)")
    assert stated and all(chapters(listed) == users for _, listed in stated), (stated, users)


STATISTICS = {"Holm's correction": "holm", "p-values": "p-value", "Wilson's interval": "wilson", "McNemar's": "mcnemar"}


@pytest.mark.parametrize("idea", STATISTICS)
def test_the_prerequisites_name_the_chapters_that_use_each_idea(idea):
    row = re.search(rf"^\| {re.escape(idea)}[^|]* \| ([\d, ]+) \|$", DOCS["INSTRUCTORS.md"], re.M)
    assert row, f"INSTRUCTORS.md's prerequisites have no row for {idea}"
    users = {p.name[:2] for p in NOTEBOOKS if STATISTICS[idea] in text_of(p).lower()}
    assert chapters(row[1]) == users


def test_the_measured_sizes_name_the_torch_they_were_measured_with():
    pinned = re.search(r"^torch==(\S+)", (ROOT / "requirements.txt").read_text(encoding="utf-8"), re.M)[1]
    measured = re.search(r"measured with torch (\S+) \(CPU build\)", DOCS["CONTRIBUTING.md"])
    assert measured and measured[1] == pinned, "torch's pin changed: measure the README's sizes again"
    assert f"torch=={pinned} --index-url https://download.pytorch.org/whl/cpu" in DOCS["README.md"]


def commands(text: str) -> list[str]:
    """Every command the document gives: lines of its code blocks and inline code that run something."""
    blocks = re.findall(r"```(?:bash|console)?\n(.*?)```", text, re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    setting = r"(?:\$env:\S+ |set \S+ |[A-Z_]+=\S+ )?"  # an environment variable set before it
    runs = re.compile(setting + r"(?:python\d*(?:\.\d+)? |py |\.venv[/\\](?:bin|Scripts)[/\\])")
    return [c for c in lines + inline if runs.match(c)]


@pytest.mark.parametrize("name", DOCS)
def test_every_command_runs_as_written(name):
    """No bare ``python scripts/...`` (it needs .venv activated, which no document asks for): the
    course's commands go through course.py, scripts through .venv's Python; every script, test file
    and course.py command named exists."""
    known = course_py().COMMANDS
    found = commands(DOCS[name])
    assert found
    for command in found:
        command = re.sub(r"^(?:\$env:\S+|set \S+|[A-Z_]+=\S+) ", "", command)
        first, _, rest = command.partition(" ")
        if first in ("python3", "py") or re.fullmatch(r"python3\.\d+|py -3\.\d+", first):
            rest = re.sub(r"^-3\.\d+ ", "", rest)
            assert rest.startswith(("course.py", "-m venv", "--version")), f"{name}: {command!r} needs .venv's Python"
            if rest.startswith("course.py "):
                sub = rest.split()[1]
                assert sub in known or sub.startswith("-"), f"{name}: course.py has no command {sub!r}"
        else:
            assert re.fullmatch(r"\.venv(/bin/|\\Scripts\\)(python|ruff|torchrun)", first), f"{name}: {command!r}"
    for path in re.findall(r"\b((?:scripts|benchmarks|tests)[/\\][\w/\\]+\.py)\b", DOCS[name]):
        assert (ROOT / path.replace("\\", "/")).is_file(), f"{name} names {path}, which does not exist"
