"""Where stored notebook outputs can be compared (pytest loads this file for every run).

The notebooks' numbers are computed from the running Python's own documentation, which differs
between Python versions. ``scripts/execute_notebooks.py`` records the SHA-256 of the corpus each
notebook was run on; where the running Python ships another corpus, nbval still runs every cell
with its assertions but compares outputs only where a cell asks (``nbval-check-output``), and the
summary says which notebooks ran that way.
"""

import json
import platform

from course_lib.data import stdlib_docs_sha256

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
