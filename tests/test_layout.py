"""The package's floor plan: every module listed where a newcomer looks, no import circles,
and the model importing nothing but its layers."""

import ast
import re
from pathlib import Path

import course_lib

PACKAGE = Path(course_lib.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def imports_of(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}


def test_the_package_docstring_and_the_readme_list_every_module():
    listed = re.findall(r"^- ``(\w+)``", course_lib.__doc__, re.M)
    assert listed == [m for m in listed if m in MODULES] and sorted(listed) == MODULES
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    missing = [m for m in MODULES if f"{m}.py" not in readme]
    assert not missing, f"README's layout does not mention {missing}"


def test_no_import_circles():
    graph = {m: imports_of(m) for m in MODULES}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import circle: {' -> '.join((*path, module))}"
        if module not in done:
            for imported in graph[module]:
                visit(imported, (*path, module))
            done.add(module)

    for module in MODULES:
        visit(module, ())


def test_the_model_imports_only_its_layers_and_nothing_imports_the_command_line():
    assert imports_of("model") <= {"attention", "layers", "positional"}
    assert not [m for m in MODULES if "train" in imports_of(m)], "only `python -m course_lib.train` uses train.py"
