"""The course as students get it elsewhere: a clone made by Git for Windows (``core.autocrlf=true``) and
the wheel that ``pip install`` of the repository builds (Colab installs it from a git URL), installed
outside the checkout. Each loads what the notebooks load first, GPT-2's tokenizer (its file checked by
SHA-256) and the shipped model, in a process of its own whose course_lib is that copy, never this one."""

import ast
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LOADS = """
import pathlib
import course_lib
from course_lib.pretrained import load_pretrained
from course_lib.tokenization import gpt2_encoding

assert gpt2_encoding().encode("Hello world") == [15496, 995]
model, tokenizer, notes = load_pretrained()
assert tokenizer.decode(tokenizer.encode("def f(x):")) == "def f(x):"
print(pathlib.Path(course_lib.__file__).resolve().parent)
"""


def load_from(path: Path, cwd: Path) -> Path:
    """Run :data:`LOADS` in ``cwd`` with ``path`` first on the import path: the folder course_lib came from."""
    env = {**os.environ, "PYTHONPATH": str(path)}
    run = subprocess.run([sys.executable, "-c", LOADS], cwd=cwd, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return Path(run.stdout.split()[-1])


def git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def test_a_clone_by_git_for_windows_holds_every_file_as_committed(tmp_path):
    """Git for Windows clones with ``core.autocrlf=true``: without .gitattributes it wrote CRLF into every
    text file, gpt2.tiktoken included, whose checksum then failed. The clone is of this checkout's last
    commit (what is not committed is not in it)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: no clone to make")
    top = git("rev-parse", "--show-toplevel")
    if top.returncode or Path(top.stdout.strip()).resolve() != ROOT:
        pytest.skip("not a git checkout of the course (a download or an installed copy): nothing to clone")
    clone = tmp_path / "clone"
    head = git("rev-parse", "HEAD").stdout.strip()
    made = git("clone", "--quiet", "--no-checkout", "--config", "core.autocrlf=true", str(ROOT), str(clone))
    assert made.returncode == 0, made.stderr
    checkout = git("checkout", "--quiet", "--detach", head, cwd=clone)
    assert checkout.returncode == 0, checkout.stderr
    assert load_from(clone, cwd=clone) == clone.resolve() / "course_lib"
    # and every other tracked file: its line ends as committed (i/) and as checked out (w/)
    eol = [line.split(maxsplit=3) for line in git("ls-files", "--eol", cwd=clone).stdout.splitlines()]
    changed = [f"{path} ({index} -> {work})" for index, work, _, path in eol if work[2:] != index[2:]]
    assert len(eol) > 100 and not changed, f"converted on checkout: {changed[:10]}"


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def imported_modules(package: Path) -> set[str]:
    """The top-level modules that ``package``'s modules import, outside the standard library and itself."""
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {package.name}


def test_the_wheel_installs_outside_the_checkout_with_its_assets_and_dependencies(tmp_path):
    """What ``pip install`` of the repository installs: course_lib with its assets, and metadata that
    asks for every distribution it imports, never as a pin (Colab keeps its own CUDA build of torch).
    Built from a copy of the sources without build isolation or an index (nothing downloaded), installed
    without dependencies into a folder of its own (this environment provides them), loaded from
    another folder."""
    pytest.importorskip("setuptools", reason="no setuptools in this environment to build the wheel offline")
    source, wheels, target, elsewhere = (tmp_path / name for name in ("source", "wheels", "site", "elsewhere"))
    shutil.copytree(ROOT / "course_lib", source / "course_lib", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("course_lib-*.whl")
    installed = subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)])
    assert installed.returncode == 0
    (dist,) = metadata.distributions(path=[str(target)])
    requirements = dist.requires or []
    declared = {normalized(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in requirements}
    provides = metadata.packages_distributions()  # module -> the installed distributions that provide it
    modules = imported_modules(target / "course_lib")
    assert {"torch", "tiktoken", "safetensors"} <= modules
    missing = [m for m in sorted(modules) if not {normalized(d) for d in provides.get(m, [])} & declared]
    assert not missing, f"course_lib imports these, but its metadata does not ask for them: {missing}"
    assert not [r for r in requirements if "==" in r], "pins belong in requirements.txt"
    elsewhere.mkdir()
    assert load_from(target, cwd=elsewhere) == target.resolve() / "course_lib"
