"""The package's floor plan: every module listed where a newcomer looks, no import circles,
and the model importing nothing but its layers."""

import ast
import importlib
import re
from pathlib import Path

import pytest

import course_lib

PACKAGE = Path(course_lib.__file__).parent


def module_name(path: Path) -> str:
    """``grading/grader.py`` -> ``grading.grader``; a package by its own name (``grading/__init__.py`` ->
    ``grading``, course_lib's own ``__init__.py`` -> ``""``)."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


PATHS = {module_name(p): p for p in PACKAGE.rglob("*.py")}
MODULES = sorted(m for m in PATHS if m)
SUBPACKAGES = sorted(m for m in MODULES if PATHS[m].name == "__init__.py")
TOP_LEVEL = [m for m in MODULES if "." not in m]


def imports_of(module: str) -> set[str]:
    """The modules of course_lib that ``module`` imports (``from . import x`` and ``from course_lib.x``)."""
    path = PATHS[module]
    package = module.split(".")[: None if path.name == "__init__.py" else -1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        named = node.module.split(".") if node.module else []
        if node.level:
            base = package[: len(package) + 1 - node.level] + named
        elif named[:1] == ["course_lib"]:
            base = named[1:]
        else:
            continue
        for alias in node.names:  # a name imported from a package may be one of its modules
            name = ".".join([*base, alias.name])
            found.add(name if name in PATHS else ".".join(base))
    return found


def named(module: str) -> str:
    """How the documents name a module: by its own name, or a chapter's (exercises.ch04) as their family, chNN."""
    name = module.rpartition(".")[2]
    return "chNN" if re.fullmatch(r"ch\d\d", name) else name


def test_the_package_docstrings_and_the_contributors_guide_list_every_module():
    listed = re.findall(r"^- ``(\w+)``", course_lib.__doc__, re.M)
    assert listed == [m for m in listed if m in TOP_LEVEL] and sorted(listed) == TOP_LEVEL
    for package in SUBPACKAGES:
        doc = importlib.import_module(f"course_lib.{package}").__doc__
        unnamed = [m for m in MODULES if m.startswith(f"{package}.") and named(m) not in doc]
        assert not unnamed, f"course_lib.{package}'s docstring does not name {unnamed}"
    readme = (PACKAGE.parent / "CONTRIBUTING.md").read_text(encoding="utf-8")
    missing = [m for m in MODULES if (f"{named(m)}/" if m in SUBPACKAGES else f"{named(m)}.py") not in readme]
    assert not missing, f"CONTRIBUTING.md's layout does not mention {missing}"


def test_no_import_circles():
    graph = {m: imports_of(m) for m in MODULES}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import circle: {' -> '.join((*path, module))}"
        if module not in done:
            for imported in graph.get(module, ()):  # a module a students' copy lacks imports nothing
                visit(imported, (*path, module))
            done.add(module)

    for module in MODULES:
        visit(module, ())


def test_the_model_imports_only_its_layers_and_nothing_imports_the_command_line():
    assert imports_of("model") <= {"attention", "layers", "positional"}
    for command_line in ("train", "grading.__main__", "grading.keys.__main__"):
        assert not [m for m in MODULES if command_line in imports_of(m)], f"only `python -m` runs {command_line}"


@pytest.mark.skipif(not (PACKAGE / "grading" / "keys").is_dir(), reason="a students' copy: the key is left out")
def test_each_chapters_exercises_and_key_have_a_module_of_their_own_under_600_lines():
    """A notebook's exercises in one place: their visible cases in exercises/chNN.py, the instructors' key
    (each one's solution, hidden cases, typical mistakes) in grading/keys/chNN.py; no exercise file is long."""
    from course_lib.exercises import EXERCISES
    from course_lib.grading.keys import HIDDEN, MISTAKES, SOLUTIONS

    for name, ex in EXERCISES.items():
        chapter = ex.cases.__module__.rpartition(".")[2]
        key = f"course_lib.grading.keys.{chapter}"
        assert re.fullmatch(r"ch\d\d", chapter), f"{name}'s visible cases are not in a chapter's module"
        assert SOLUTIONS[name].__module__ == HIDDEN[name].__module__ == key, f"{name}'s key is not in {key}"
        assert any(getattr(m, "__module__", None) == key for m in MISTAKES[name]), f"{name}'s mistakes are not in {key}"
    files = [
        *PACKAGE.glob("exercises/*.py"),
        *PACKAGE.glob("grading/keys/*.py"),
        *PACKAGE.parent.glob("tests/test_exercise*.py"),
    ]
    long = {f.name: n for f in files if (n := len(f.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, f"exercise files over 600 lines: {long}"
