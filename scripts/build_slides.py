"""Build an offline reveal.js deck for every notebook into slides/ (an ignored folder).

    python scripts/build_slides.py              # every notebook
    python scripts/build_slides.py notebooks/04_self_attention.ipynb

Each deck is ``slides/NN_name.slides.html``; it loads reveal.js, MathJax, require.js, jQuery
and the Jupyter widgets renderer (for the saved widget views) from ``slides/vendor``
(installed from the npm registry with the versions pinned in ``scripts/slides/package-lock.json``),
and has its images embedded, so the folder works in a lecture hall with no network. Speaker
notes come from cells of slide type ``notes`` (press ``s`` in the deck). The vendor folder also
holds axe-core, which no deck loads: tests/test_slides.py checks the decks' accessibility with it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter
from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "scripts" / "slides"
OUT = ROOT / "slides"
VENDOR = OUT / "vendor"
MODULES = "vendor/node_modules"  # as seen from a deck in slides/


def install_vendor() -> None:
    """npm ci the pinned packages into slides/vendor, again only when the lock file changes."""
    VENDOR.mkdir(parents=True, exist_ok=True)
    lock = (SOURCE / "package-lock.json").read_bytes()
    stamp = VENDOR / "node_modules" / ".package-lock.json"
    if (
        (VENDOR / "package-lock.json").exists()
        and (VENDOR / "package-lock.json").read_bytes() == lock
        and stamp.exists()
    ):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("building the decks needs npm (Node.js) to fetch reveal.js once; install Node.js and retry")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(SOURCE / name, VENDOR / name)
    subprocess.run(
        [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], cwd=VENDOR, check=True
    )


def exporter() -> SlidesExporter:
    c = Config()
    c.SlidesExporter.extra_template_basedirs = [str(SOURCE / "template")]
    c.SlidesExporter.template_name = "course_reveal"
    c.SlidesExporter.reveal_url_prefix = f"{MODULES}/reveal.js"
    c.SlidesExporter.reveal_theme = "white"
    c.SlidesExporter.reveal_transition = "none"
    c.SlidesExporter.reveal_number = "c/t"
    c.SlidesExporter.reveal_width = "1280"  # room for 100-character code lines
    c.SlidesExporter.reveal_height = "800"
    c.SlidesExporter.reveal_scroll = True  # a slide taller than the screen scrolls
    c.SlidesExporter.require_js_url = f"{MODULES}/requirejs/require.js"
    c.SlidesExporter.jquery_url = f"{MODULES}/jquery/dist/jquery.min.js"
    c.SlidesExporter.mathjax_url = f"{MODULES}/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"
    c.SlidesExporter.widget_renderer_url = (
        f"{MODULES}/@jupyter-widgets/html-manager/dist/embed-amd.js"  # saved widget views
    )
    c.SlidesExporter.embed_images = True  # markdown images (figures/) go inside the deck
    return SlidesExporter(config=c)


def title(nb) -> str | None:
    """The notebook's first level-1 heading, plain text: the deck's <title> (nbconvert's default is the file name)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return re.sub(r"[*`]", "", line[2:]).strip()
    return None


def build(paths: list[Path]) -> list[Path]:
    install_vendor()
    slides = exporter()
    written = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nb.metadata.setdefault("title", title(nb) or path.stem)
        body, _ = slides.from_notebook_node(nb, resources={"metadata": {"name": path.stem, "path": str(path.parent)}})
        target = OUT / f"{path.stem}.slides.html"
        target.write_text(body, encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for deck in build(paths):
        print(deck.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
