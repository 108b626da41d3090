"""Hygiene of the stored notebooks: the checks nbval does not make."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SLIDE_TYPES = {"slide", "subslide", "fragment", "skip", "notes", "-"}
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)[^)]*\)|<img[^>]*\bsrc=[\"']([^\"']+)[\"']")


def test_notebooks_are_numbered_in_order():
    numbers = [int(p.name[:2]) for p in NOTEBOOKS]
    assert numbers == list(range(len(numbers))) and len(numbers) >= 3


@pytest.fixture(params=NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def nb(request):
    return nbformat.read(request.param, as_version=4)


def tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def test_executed_in_order(nb):
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), "re-run with scripts/execute_notebooks.py"


def test_no_errors_except_tagged_cells(nb):
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if "raises-exception" in tags(cell):
            assert errors, f"cell tagged raises-exception did not raise:\n{cell.source}"
        else:
            assert not errors, f"unexpected error in:\n{cell.source}"
        stderr = [o for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
        assert not any("Warning" in o.text for o in stderr), f"warning printed by:\n{cell.source}"


def test_slide_metadata_on_every_cell_and_a_title_slide(nb):
    for cell in nb.cells:
        assert cell.metadata.get("slideshow", {}).get("slide_type") in SLIDE_TYPES, cell.source[:80]
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert first.metadata.slideshow.slide_type == "slide"


def test_only_relative_links_to_images_that_exist(nb):
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for match in IMAGE_LINK.finditer(cell.source):
            link = match.group(1) or match.group(2)
            assert "://" not in link and not link.startswith("/"), f"image link must be relative: {link}"
            assert (ROOT / "notebooks" / link).resolve().is_file(), f"missing image: {link}"


def test_varying_outputs_are_followed_by_an_assertion(nb):
    cells = nb.cells
    for k, cell in enumerate(cells):
        if "nbval-ignore-output" in tags(cell):
            following = next((c for c in cells[k + 1 :] if c.cell_type == "code"), None)
            assert following is not None and "assert" in following.source, (
                f"an nbval-ignore-output cell needs a following cell that asserts what must hold:\n{cell.source}"
            )


def test_at_least_two_self_checked_exercises(nb):
    checks = [c for c in nb.cells if c.cell_type == "code" and "check(" in c.source]
    assert len(checks) >= 2
    for cell in checks:
        text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in cell.outputs)
        assert "✅" in text or "❌" in text, "each exercise cell shows the checker's verdict"


def test_no_volatile_metadata(nb):
    assert set(nb.metadata) <= {"kernelspec", "language_info", "rise", "widgets"}
    assert nb.metadata.get("rise", {}).get("theme") == "white", "RISE theme 'white' uses local fonts only"
    for cell in nb.cells:
        assert set(cell.metadata) <= {"slideshow", "tags"}


def test_widget_views_have_saved_state(nb):
    """An explorer's output is only a placeholder without its state; the decks need both."""
    views = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    if views:
        state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        for view in views:
            assert view["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] in state
