import json
import os
import platform

import pytest
from hypothesis import settings

from course_lib.data import stdlib_docs_sha256, stdlib_docs_text
from course_lib.tokenization import gpt2_encoding, gpt2_tokenizer

# No timing-based failures on a shared machine, no example database left behind, and in CI
# the same examples every run (they were explored at 25,000 examples when written).
settings.register_profile("course", deadline=None, database=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("course")

CORPUS_SHA256 = stdlib_docs_sha256()
LAX_NOTEBOOKS: list[str] = []


def corpus_of(notebook_path) -> dict:
    """What a stored notebook's outputs were computed from (written by execute_notebooks.py)."""
    with open(notebook_path, encoding="utf-8") as f:
        return json.load(f).get("metadata", {}).get("course", {})


def pytest_collectstart(collector):
    """Stored outputs hold numbers computed from this Python's documentation. Where the running
    Python ships other documentation, compare them only where a cell asks (nbval-check-output):
    every cell still runs, with its assertions."""
    if type(collector).__name__ == "IPyNbFile":
        produced = corpus_of(collector.path)
        if produced.get("corpus_sha256") != CORPUS_SHA256:
            collector.compare_outputs = False
            LAX_NOTEBOOKS.append(f"{collector.path.name} (stored with Python {produced.get('python', '?')})")


def pytest_terminal_summary(terminalreporter):
    if LAX_NOTEBOOKS:
        terminalreporter.write_line(
            f"\nPython {platform.python_version()} ships other documentation (the default corpus) than the one the "
            f"stored outputs were computed from, so these notebooks ran with their assertions but without comparing "
            f"outputs: {', '.join(LAX_NOTEBOOKS)}",
            yellow=True,
        )


@pytest.fixture(scope="session")
def corpus() -> str:
    return stdlib_docs_text()


@pytest.fixture(scope="session")
def tiktoken_gpt2():
    return gpt2_encoding()


@pytest.fixture(scope="session")
def course_gpt2():
    return gpt2_tokenizer()
