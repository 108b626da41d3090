"""The code reads the same everywhere: ruff's lint rules and formatter (configured in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("ruff is not installed: it is in requirements-test.txt (python3 course.py test installs it)")
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_finds_nothing():
    result = ruff("check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted():
    result = ruff("format", "--check", "--no-cache", ".")
    assert result.returncode == 0, "run `.venv/bin/ruff format .`\n" + result.stdout + result.stderr
