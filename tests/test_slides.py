"""The instructor decks, opened in a real browser (headless Chromium driven by Playwright).

Locally the test is skipped when Chromium, npm or Playwright is missing; CI sets
COURSE_REQUIRE_BROWSER=1 (see .ci/run), which turns a missing piece into a failure.
"""

import importlib.util
import os
import shutil
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SCREENSHOTS = ROOT / "slides" / "screenshots"
CHROMIUM = os.environ.get("COURSE_CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")


def unavailable(reason: str):
    if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def decks() -> dict[str, Path]:
    if shutil.which("npm") is None:
        unavailable("npm is needed to vendor reveal.js for the decks")
    spec = importlib.util.spec_from_file_location("build_slides", ROOT / "scripts" / "build_slides.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(zip((p.stem for p in NOTEBOOKS), module.build(NOTEBOOKS)))


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install -r requirements-test.txt)")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


def expected(nb) -> tuple[int, int]:
    """(slides, speaker notes) implied by the cells' slide metadata."""
    types = [cell.metadata.get("slideshow", {}).get("slide_type", "-") for cell in nb.cells]
    return sum(t in ("slide", "subslide") for t in types), sum(t == "notes" for t in types)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem[:2] for p in NOTEBOOKS])
def test_deck_in_a_real_browser(notebook, decks, browser):
    nb = nbformat.read(notebook, as_version=4)
    n_slides, n_notes = expected(nb)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    problems: list[str] = []
    page.on("requestfailed", lambda request: problems.append(f"request failed: {request.url}"))
    page.on(
        "response",
        lambda response: problems.append(f"HTTP {response.status}: {response.url}") if response.status >= 400 else None,
    )
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "request",
        lambda request: (
            problems.append(f"left the machine: {request.url}")
            if not request.url.startswith(("file://", "data:", "blob:", "about:"))
            else None
        ),
    )

    page.goto(decks[notebook.stem].as_uri())
    page.wait_for_function("window.Reveal && Reveal.isReady()", timeout=30_000)
    assert page.evaluate("Reveal.getTotalSlides()") == n_slides
    assert page.evaluate("document.querySelectorAll('aside.notes').length") == n_notes

    def mathjax_idle() -> None:  # typesetting is queued; wait until the queue has run
        page.evaluate("window.__typeset = false; MathJax.Hub.Queue(() => { window.__typeset = true; })")
        page.wait_for_function("window.__typeset === true", timeout=30_000)

    # Math typeset by the vendored MathJax, where the notebook has any.
    mathjax_idle()
    if any(cell.cell_type == "markdown" and "$" in cell.source for cell in nb.cells):
        # start-up typesetting can still be queued behind the marker above: poll for its result
        page.wait_for_function("document.querySelectorAll('.MathJax_CHTML').length > 0", timeout=60_000)

    # Every image (embedded figures and plots) decoded.
    broken = page.evaluate("[...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length")
    assert broken == 0 and page.evaluate("document.images.length") > 0

    # Saved widget views (the explorers) are rendered from the stored widget state.
    n_views = sum(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
    if n_views:
        page.wait_for_function(
            f"document.querySelectorAll('.jupyter-widgets.widget-vbox').length >= {n_views}", timeout=30_000
        )

    # Go to the first slide with a code cell and step through its fragments: the cell must show.
    h, v = page.evaluate(
        """() => { const s = Reveal.getSlides().find(s => s.querySelector('.jp-CodeCell'));
                   const i = Reveal.getIndices(s); return [i.h, i.v || 0]; }"""
    )
    page.evaluate(f"Reveal.slide({h}, {v}); while (Reveal.nextFragment()) {{}}")  # show every fragment
    mathjax_idle()
    page.wait_for_timeout(2500)  # let MathJax finish re-typesetting the shown slide before the screenshot
    assert page.locator("section.present .jp-CodeCell").first.is_visible()

    # No code is cut off at a slide's edge: show every slide with all its fragments and measure.
    clipped = page.evaluate(
        """() => { const found = [];
                   for (const s of Reveal.getSlides()) {
                     const i = Reveal.getIndices(s); Reveal.slide(i.h, i.v || 0);
                     while (Reveal.nextFragment()) {}
                     for (const p of s.querySelectorAll('pre'))
                       if (p.scrollWidth > p.clientWidth + 1) found.push(p.textContent.slice(0, 60)); }
                   return found; }"""
    )
    assert not clipped, f"code wider than its slide: {clipped[:3]}"
    page.evaluate(f"Reveal.slide({h}, {v}); while (Reveal.nextFragment()) {{}}")

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{notebook.stem}.png"))
    found = list(problems)  # before closing: closing aborts requests still in flight
    page.close()
    assert not found, "\n".join(found)


@pytest.fixture(scope="module")
def lab_server():
    """A JupyterLab server on a free localhost port, as `python3 course.py lab` starts it."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "course-test"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            "--allow-root",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={ROOT / 'notebooks'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start within 60 s")
        yield base, token
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_rise_presents_a_notebook_live(lab_server, browser):
    base, token = lab_server
    notebook = NOTEBOOKS[0]
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    outside: list[str] = []
    page.on(
        "request",
        lambda request: (
            outside.append(request.url) if not request.url.startswith((base, "data:", "blob:", "about:")) else None
        ),
    )
    page.goto(f"{base}/rise/{notebook.name}?token={token}")
    page.wait_for_selector(".reveal .slides section", timeout=60_000)
    types = [c.metadata["slideshow"]["slide_type"] for c in nbformat.read(notebook, as_version=4).cells]
    page.wait_for_timeout(1000)
    # one horizontal section per "slide" cell, holding its "subslide" cells as vertical sections
    assert page.evaluate("document.querySelectorAll('.reveal .slides > section').length") == types.count("slide")
    assert page.evaluate("document.querySelectorAll('.reveal .slides > section > section').length") == types.count(
        "slide"
    ) + types.count("subslide")
    assert page.locator(".reveal section.present").first.is_visible()
    page.screenshot(path=str(SCREENSHOTS / "rise_live.png"))
    found = list(outside)
    page.close()
    assert not found, f"the live slideshow reached outside the machine: {found}"
