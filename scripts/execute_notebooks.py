"""Execute notebooks top to bottom in a fresh kernel and store them normalised.

This is the only way stored outputs are produced, so that they are reproducible:

    python scripts/execute_notebooks.py                 # every notebook, full budget
    python scripts/execute_notebooks.py notebooks/01_tokenization.ipynb --budget ci

Each notebook runs in its own kernel with the working directory set to ``notebooks/``,
``COURSE_THREADS`` fixed (2 by default), ``COURSE_DEVICE=cpu``, ``PYTHONHASHSEED=0`` and progress
bars off. Afterwards volatile metadata (timings, kernel versions) is removed so a re-run that
computes the same outputs leaves the file byte-for-byte unchanged. Widget state is kept: the
explorers' saved views are what the static slide decks show.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
KEPT_CELL_METADATA = ("slideshow", "tags")


def normalise(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Keep only what the course needs: slide and tag metadata, outputs, counts, and where
    the outputs come from."""
    nb.metadata = nbformat.from_dict(
        {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
        | {k: nb.metadata[k] for k in ("rise", "widgets") if k in nb.metadata}
    )
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict({k: cell.metadata[k] for k in KEPT_CELL_METADATA if k in cell.metadata})
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
            for output in cell.outputs:
                if output.output_type == "error":
                    output.traceback = [short_paths(line) for line in output.traceback]
    return nb


# an absolute path (POSIX or Windows) up to the installed packages' folder, or up to the course's package
SITE_PACKAGES = re.compile(r"(?:[A-Za-z]:)?[/\\][^\s\x1b]*?[/\\]site-packages[/\\]")
REPOSITORY = re.compile(r"(?:[A-Za-z]:)?[/\\][^\s\x1b]*?[/\\](?=course_lib[/\\])")


def short_paths(text: str) -> str:
    """A stored traceback names files as a student's own run would, not where the machine that
    executed it keeps them: the course's files relative to the repository (``course_lib/model.py``),
    installed packages from ``site-packages/`` on."""
    return REPOSITORY.sub("", SITE_PACKAGES.sub("site-packages/", text.replace(f"{ROOT}{os.sep}", "")))


def merge_streams(outputs: list) -> list:
    """One output per run of printed text: a cell that streams 150 tokens with
    ``print(piece, end="")`` is stored as one block, not 150 (nbval compares them merged too)."""
    merged = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if previous and output.output_type == previous.output_type == "stream" and output.name == previous.name:
            previous.text += output.text
        else:
            merged.append(output)
    return merged


def execute(path: Path, budget: str, threads: int, timeout: int) -> float:
    nb = nbformat.read(path, as_version=4)
    # No progress bars in stored outputs: a saved bar is frozen at 0% when rendered on GitHub.
    env = {
        "COURSE_BUDGET": budget,
        "COURSE_THREADS": str(threads),
        "PYTHONHASHSEED": "0",
        "COURSE_PROGRESS": "0",
        "COURSE_DEVICE": "cpu",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        start = time.perf_counter()
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOKS)}},
            store_widget_state=True,  # the static slide decks render the saved widget views
        )
        try:
            client.execute()
        except CellExecutionError:
            # The stored notebook is left as it was; what ran before the failing cell is kept
            # beside it in the temporary folder, so that a long run's outputs can be read.
            partial = Path(tempfile.gettempdir()) / f"{path.stem}.failed.ipynb"
            nbformat.write(normalise(nb), partial)
            print(f"  failed: the outputs up to the failing cell are in {partial}", flush=True)
            raise
        elapsed = time.perf_counter() - start
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    nbformat.write(normalise(nb), path)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in notebooks/")
    parser.add_argument("--budget", choices=("full", "ci"), default="full")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    for path in paths:
        print(f"executing {path.name} (budget {args.budget}, {args.threads} threads) ...", flush=True)
        print(f"  done in {execute(path.resolve(), args.budget, args.threads, args.timeout):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
