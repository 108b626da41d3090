"""The instructor decks, opened in a real browser (headless Chromium driven by Playwright).

Locally the test is skipped when Chromium, npm or Playwright is missing; CI sets
COURSE_REQUIRE_BROWSER=1 (see .ci/run), which turns a missing piece into a failure.
"""

import contextlib
import importlib.util
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from test_notebooks import IMAGE_LINK  # a figure linked from markdown

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SCREENSHOTS = ROOT / "slides" / "screenshots"
CHROMIUM = os.environ.get("COURSE_CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
AXE = ROOT / "slides" / "vendor" / "node_modules" / "axe-core" / "axe.min.js"  # vendored with the decks
NO_ALT = "No description has been provided for this image"  # what nbconvert writes for an image without alt


def unavailable(reason: str):
    if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def build_slides():
    """scripts/build_slides.py as a module, with the decks' pinned packages (axe-core among them)."""
    if shutil.which("npm") is None:
        unavailable("npm is needed to vendor reveal.js for the decks")
    spec = importlib.util.spec_from_file_location("build_slides", ROOT / "scripts" / "build_slides.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install_vendor()
    return module


@pytest.fixture(scope="module")
def decks(build_slides) -> dict[str, Path]:
    return dict(zip((p.stem for p in NOTEBOOKS), build_slides.build(NOTEBOOKS)))


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


# axe-core, WCAG 2.0/2.1 level A and AA, and the best-practice rules that mean something for a deck. A deck
# is one page of which reveal.js shows, and exposes to assistive technology, one slide at a time; axe judges
# only what is shown (colour contrast above all), so it runs on every slide in turn.
WCAG = {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}
# axe would fetch the deck's stylesheet files to read them again (only for css-orientation-lock, and reveal.js
# locks no orientation), which a file:// page may not do: it reads the page's styles as the browser has them.
SETTINGS = {"preload": False, "resultTypes": ["violations"]}
# Once, on the title slide, over the whole page (reveal's controls and slide number included): the deck in
# its <main> landmark with nothing outside a landmark, and its "# NN · Title" the page's level-1 heading
# (on any other slide the title is hidden with its slide, as it should be).
PAGE_RULES = ("landmark-one-main", "region", "landmark-complementary-is-top-level", "page-has-heading-one")
PAGE_AXE = {"runOnly": WCAG, "rules": {rule: {"enabled": True} for rule in PAGE_RULES}, **SETTINGS}
# On each slide: headings in order as a screen reader meets them, a slide at a time (## then ###, not ####).
SLIDE_AXE = {"runOnly": WCAG, "rules": {"heading-order": {"enabled": True}}, **SETTINGS}

# Every slide shown in full, in turn: the code wider than its slide (cut off) and what axe finds.
SWEEP = """async ([pageRules, slideRules]) => {
  const clipped = [], violations = [];
  const report = (result, where) => { for (const rule of result.violations) for (const node of rule.nodes)
    violations.push(`${rule.id} (${rule.impact}) ${where}: ${node.target.join(" ")}: ${node.html.slice(0, 100)}`); };
  for (const [index, slide] of Reveal.getSlides().entries()) {
    const at = Reveal.getIndices(slide);
    Reveal.slide(at.h, at.v || 0);
    while (Reveal.nextFragment()) {}
    // fragments fade in: end that, so that their colours are judged as they end
    for (const a of document.getAnimations()) if (a.effect.getTiming().iterations !== Infinity) a.finish();
    await new Promise((done) => MathJax.Hub.Queue(done)); // the slide's math laid out again
    for (const pre of slide.querySelectorAll("pre"))
      if (pre.scrollWidth > pre.clientWidth + 1) clipped.push(pre.textContent.slice(0, 60));
    if (index === 0) report(await axe.run(document, pageRules), "on the page");
    report(await axe.run(slide, slideRules), `on slide ${index}`);
  }
  return [clipped, violations];
}"""

# Every token colour the code highlighting defines, used on these slides or not, on the current slide's
# first code cell: axe's colour contrast on a line of one token of each.
TOKEN_COLOURS = """async () => {
  for (const a of document.getAnimations()) if (a.effect.getTiming().iterations !== Infinity) a.finish();
  const classes = new Set();
  for (const sheet of document.styleSheets) {
    let rules = [];
    try { rules = [...sheet.cssRules]; } catch (e) {} // a stylesheet file of its own: not the highlighting
    for (const rule of rules.filter((rule) => rule.style && rule.style.color))
      for (const m of (rule.selectorText || "").matchAll(/\\.highlight \\.(\\w+)/g)) classes.add(m[1]);
  }
  const probe = document.createElement("span");
  probe.innerHTML = [...classes].map((name) => `<span class="${name}">${name}_token</span>`).join(" ");
  Reveal.getCurrentSlide().querySelector(".jp-InputArea-editor .highlight pre").append(probe);
  const result = await axe.run(probe, { runOnly: ["color-contrast"], preload: false });
  probe.remove();
  return [classes.size, result.violations.flatMap((rule) => rule.nodes.map((node) => node.failureSummary))];
}"""


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
    page.add_script_tag(path=str(AXE))
    title = re.search(r"^# (.+)$", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"), re.M)[1]
    assert page.title() == f"{title} slides"  # the notebook's title, not its file name
    assert page.evaluate("Reveal.getTotalSlides()") == n_slides
    assert page.evaluate("document.querySelectorAll('aside.notes').length") == n_notes

    def mathjax_idle() -> None:  # typesetting is queued; wait until the queue has run
        page.evaluate("window.__typeset = false; MathJax.Hub.Queue(() => { window.__typeset = true; })")
        page.wait_for_function("window.__typeset === true", timeout=30_000)

    # Math typeset by the vendored MathJax, where the notebook has any.
    mathjax_idle()
    has_math = any(cell.cell_type == "markdown" and "$" in cell.source for cell in nb.cells)
    if has_math:
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
    assert page.locator("section.present .jp-CodeCell").first.is_visible()
    n_classes, dim = page.evaluate(TOKEN_COLOURS)
    assert n_classes > 20  # the highlighting's token classes were found
    assert not dim, "code highlighting below 4.5:1 contrast:\n" + "\n".join(dim)

    # Every slide: no code cut off at a slide's edge, nothing axe finds (WCAG 2.1 A and AA).
    clipped, violations = page.evaluate(SWEEP, [PAGE_AXE, SLIDE_AXE])
    assert not clipped, f"code wider than its slide: {clipped[:3]}"
    assert not violations, f"{len(violations)} accessibility violations (axe-core):\n" + "\n".join(violations)
    if has_math:  # a screen reader reads each formula from its MathML, MathJax's assistive copy
        bare = page.evaluate(
            """[...document.querySelectorAll('.MathJax_CHTML')]
                 .filter(m => !m.querySelector('.MJX_Assistive_MathML math'))
                 .map(m => MathJax.Hub.getJaxFor(m).originalText)"""
        )
        assert not bare, f"formulas without assistive MathML: {bare[:3]}"
    page.evaluate(f"Reveal.slide({h}, {v}); while (Reveal.nextFragment()) {{}}")
    mathjax_idle()

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{notebook.stem}.png"))
    no_alt = page.evaluate(
        f"[...document.images].filter(i => !i.alt.trim() || i.alt === {NO_ALT!r}).map(i => i.closest('.jp-Cell')?.id)"
    )
    found = list(problems)  # before closing: closing aborts requests still in flight
    page.close()
    assert not found, "\n".join(found)
    # Plots carry their description in output.metadata['image/png']['alt'] (course_lib), figures in markdown.
    assert not no_alt, f"images without a description (alt) in {no_alt}"


def watch_requests(page, base: str) -> list[str]:
    """The URLs of the page's requests that leave the machine (filled as they are made)."""
    outside: list[str] = []
    local = (base, "data:", "blob:", "about:")
    page.on("request", lambda request: None if request.url.startswith(local) else outside.append(request.url))
    return outside


def course_py():
    """The repository's course.py, as a module (the command line a student runs)."""
    spec = importlib.util.spec_from_file_location("course", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def jupyterlab(root: Path = ROOT):
    """A JupyterLab server (RISE included) started with `python3 course.py lab`'s command
    (``course.lab_arguments``) on ``root``, on a free localhost port; yields (base URL, token, the
    folder it serves). The page exposes the app as ``window.jupyterapp`` (for the tests to run cells);
    the server's settings and workspaces are its own (a temporary folder, news notifications and
    autosave off), not the user's."""
    import socket
    import subprocess
    import sys
    import tempfile
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "course-test"
    command = course_py().lab_arguments(sys.executable, root)
    served = Path(next(a for a in command if a.startswith("--ServerApp.root_dir=")).partition("=")[2])
    with tempfile.TemporaryDirectory() as home:
        notification = Path(home, "settings", "@jupyterlab", "apputils-extension", "notification.jupyterlab-settings")
        notification.parent.mkdir(parents=True)
        notification.write_text('{"fetchNews": "false"}')
        autosave = Path(home, "settings", "@jupyterlab", "docmanager-extension", "plugin.jupyterlab-settings")
        autosave.parent.mkdir(parents=True)
        autosave.write_text('{"autosave": false}')  # a test's page never writes the course's notebooks
        env = {
            **os.environ,
            "JUPYTERLAB_SETTINGS_DIR": str(Path(home, "settings")),
            "JUPYTERLAB_WORKSPACES_DIR": str(Path(home, "workspaces")),
        }
        server = subprocess.Popen(
            [
                *command,
                "--no-browser",
                f"--port={port}",
                "--ip=127.0.0.1",
                f"--IdentityProvider.token={token}",
                "--LabApp.expose_app_in_browser=True",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(240):
                try:
                    urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=1)
                    break
                except OSError:
                    time.sleep(0.5)
            else:
                pytest.fail("JupyterLab did not start within 120 s")
            yield base, token, served
        finally:
            server.terminate()  # its kernels too
            server.wait(timeout=60)


@pytest.fixture(scope="module")
def lab_server():
    """JupyterLab as `python3 course.py lab` serves the course (one server for the tests below)."""
    with jupyterlab() as server:
        yield server


def url_path(notebook: Path, served: Path) -> str:
    """The notebook's path in the server's URLs (``/lab/tree/<it>``, ``/rise/<it>``)."""
    return notebook.resolve().relative_to(served.resolve()).as_posix()


def test_rise_presents_a_notebook_live(lab_server, browser):
    base, token, served = lab_server
    notebook = NOTEBOOKS[0]
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    outside = watch_requests(page, base)
    page.goto(f"{base}/rise/{url_path(notebook, served)}?token={token}")
    page.wait_for_selector(".reveal .slides section", timeout=60_000)
    types = [c.metadata["slideshow"]["slide_type"] for c in nbformat.read(notebook, as_version=4).cells]
    page.wait_for_timeout(1000)
    # one horizontal section per "slide" cell, holding its "subslide" cells as vertical sections
    assert page.evaluate("document.querySelectorAll('.reveal .slides > section').length") == types.count("slide")
    assert page.evaluate("document.querySelectorAll('.reveal .slides > section > section').length") == types.count(
        "slide"
    ) + types.count("subslide")
    assert page.locator(".reveal section.present").first.is_visible()
    broken = page.evaluate("[...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)")
    assert not broken, f"images that do not load on the live slides: {broken}"
    page.screenshot(path=str(SCREENSHOTS / "rise_live.png"))
    found = list(outside)
    page.close()
    assert not found, f"the live slideshow reached outside the machine: {found}"


def figures_of(notebook: Path) -> list[str]:
    """The images a notebook's markdown shows (files of figures/, linked as ../figures/NAME.png)."""
    cells = nbformat.read(notebook, as_version=4).cells
    return [m[1] or m[2] for c in cells if c.cell_type == "markdown" for m in IMAGE_LINK.finditer(c.source)]


FIGURED = [p for p in NOTEBOOKS if figures_of(p)]


def test_every_figure_loads_in_jupyterlab_as_course_py_lab_serves_it(lab_server, browser):
    """A student's first view: each notebook with figures opened in JupyterLab, every figure scrolled
    to and decoded. (The server once served notebooks/ alone, and every ../figures/ link answered 404.)"""
    base, token, served = lab_server
    assert FIGURED, "no notebook shows a figure: the pattern is stale"
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    outside = watch_requests(page, base)
    missing: list[str] = []
    page.on("response", lambda r: missing.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    problems = []
    for k, notebook in enumerate(FIGURED):
        path = url_path(notebook, served)
        if k == 0:  # as a student opens it (?reset: a fresh workspace, whatever an earlier test left)
            page.goto(f"{base}/lab/tree/{path}?reset&token={token}")
        else:  # the next one in a tab of the same page, as from the file browser
            page.evaluate("(path) => { jupyterapp.commands.execute('docmanager:open', { path }); }", path)
        panel_id = page.wait_for_function(  # the notebook's panel, found by its path
            """(path) => { if (!window.jupyterapp) return null;
                           const w = [...jupyterapp.shell.widgets('main')].find((w) => w.context?.path === path);
                           return w ? w.id : null; }""",
            arg=path,
            timeout=60_000,
        ).json_value()
        page.evaluate("(id) => jupyterapp.shell.activateById(id)", panel_id)
        panel = f'[id="{panel_id}"]'
        expected = len(figures_of(notebook))
        page.wait_for_function(
            f"document.querySelectorAll('{panel} .jp-MarkdownOutput img').length >= {expected}", timeout=60_000
        )
        images = page.locator(f"{panel} .jp-MarkdownOutput img")
        assert images.count() == expected, f"{notebook.name}: {images.count()} images shown, {expected} linked"
        for image in images.all():
            decoded = image.evaluate(  # scrolled to (a cell far down may be laid out only when reached), decoded
                "img => { img.scrollIntoView({ block: 'center' }); return img.complete ? img.naturalWidth > 0 :"
                " new Promise((done) => {"
                " img.onload = () => done(img.naturalWidth > 0); img.onerror = () => done(false);"
                " setTimeout(() => done(img.naturalWidth > 0), 30000); }); }"
            )
            if not decoded:
                problems.append(f"{notebook.name}: {image.get_attribute('src')}")
        if notebook == FIGURED[0]:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "lab_figures.png"))
    found = list(outside)
    page.close()
    assert not problems, f"figures that do not load in JupyterLab ({len(problems)}):\n" + "\n".join(problems)
    assert not missing, "\n".join(missing)
    assert not found, f"JupyterLab reached outside the machine: {found}"


# ----------------------------------------------------------------------------------------
# The chat widget, live: typed into and answered in JupyterLab and on a RISE slide
# ----------------------------------------------------------------------------------------

CHAT_CELL = """\
import torch

from course_lib.model import GPT, GPTConfig
from course_lib.tokenization import gpt2_encoding
from course_lib.widgets import chat_widget

torch.set_num_threads(1)
torch.manual_seed(0)
tokenizer = gpt2_encoding()
config = GPTConfig(vocab_size=tokenizer.n_vocab, context_length=128, n_layers=1, n_heads=2, d_model=32)
model = GPT(config).eval()
chat_widget(model, tokenizer, "short", eos_id=tokenizer.eot_token, max_new_tokens=12, temperature=0.8, seed=0)"""
MESSAGE = "What does a tokenizer do?"


def write_chat_notebook(path: Path) -> str:
    """A one-slide notebook whose code cell builds a tiny random GPT (GPT-2's tokenizer, built
    offline) and shows its chat widget; the RISE settings of the course's notebooks."""
    nb = nbformat.v4.new_notebook()
    course = nbformat.read(NOTEBOOKS[0], as_version=4).metadata
    nb.metadata["kernelspec"], nb.metadata["rise"] = course["kernelspec"], course["rise"]
    slide = {"slideshow": {"slide_type": "slide"}}
    nb.cells = [
        nbformat.v4.new_markdown_cell("## A chat with a tiny model", metadata=slide),
        nbformat.v4.new_code_cell(CHAT_CELL, metadata={"slideshow": {"slide_type": "-"}}),
    ]
    nbformat.write(nb, path)
    return path.name


@pytest.fixture(scope="module")
def chat_lab(tmp_path_factory):
    """JupyterLab on a temporary folder (what it saves stays out of notebooks/)."""
    root = tmp_path_factory.mktemp("chat")
    with jupyterlab(root) as (base, token, _):
        yield root, base, token


def chat_view(scope):
    """The chat widget's view in ``scope`` (a page or a slide) and its parts."""
    view = scope.locator(".jp-OutputArea-output .widget-vbox:has(> .widget-textarea)").first
    return {
        "view": view,
        "history": view.locator(".widget-html").first,
        "text": view.locator(".widget-textarea textarea"),
        "send": view.locator(".widget-button", has_text="Send"),
        "stop": view.locator(".widget-button", has_text="Stop"),
        "new": view.locator(".widget-button", has_text="New chat"),
        "temperature": view.get_by_label("temperature"),  # found by its label, as a screen reader names it
    }


def converse(parts: dict, timeout: int = 120_000, keyboard=None) -> None:
    """Type the message, Send, and wait until the reply is in and measured. With ``keyboard``
    (the page's), as a user without a mouse: focus the box, type, Tab to Send, press Enter."""
    from playwright.sync_api import expect

    if keyboard is None:
        parts["text"].fill(MESSAGE)
        parts["send"].click()
    else:
        parts["text"].focus()
        keyboard.type(MESSAGE)
        keyboard.press("Tab")
        expect(parts["send"]).to_be_focused()
        keyboard.press("Enter")
    expect(parts["history"]).to_contain_text(f"You: {MESSAGE}", timeout=timeout)
    expect(parts["history"]).to_contain_text("Model:", timeout=timeout)  # written by the reply's thread
    expect(parts["view"]).to_contain_text("tokens/s", timeout=timeout)
    expect(parts["send"]).to_be_enabled(timeout=timeout)
    expect(parts["stop"]).to_be_disabled()
    expect(parts["text"]).to_have_value("")


def test_the_chat_widget_answers_in_jupyterlab(chat_lab, browser, build_slides):
    """Used as a student without a mouse would, with a screen reader: every control found by
    its label, the conversation held with the keyboard alone, nothing axe-core finds."""
    from playwright.sync_api import expect

    root, base, token = chat_lab
    name = write_chat_notebook(root / "chat_lab.ipynb")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    outside = watch_requests(page, base)
    page.goto(f"{base}/lab/tree/{name}?token={token}")
    page.wait_for_function(  # the notebook open, its kernel started (slow on a busy machine)
        """() => { const w = window.jupyterapp && jupyterapp.shell.currentWidget;
                   const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
                   return !!k && k.connectionStatus === 'connected' && k.status === 'idle'; }""",
        timeout=120_000,
    )
    page.evaluate("jupyterapp.commands.execute('notebook:run-all-cells')")
    parts = chat_view(page)
    expect(parts["send"]).to_be_visible(timeout=120_000)
    for control in ("text", "stop", "new", "temperature"):
        expect(parts[control]).to_be_visible()
    expect(parts["stop"]).to_be_disabled()
    expect(parts["history"]).to_have_text("")
    expect(parts["view"].get_by_role("textbox", name="Message")).to_have_count(1)
    for button in ("Send", "Stop", "New chat"):
        expect(parts["view"].get_by_role("button", name=button, exact=True)).to_have_count(1)
    page.add_script_tag(path=str(AXE))
    violations = page.evaluate(
        """async ([view, options]) => (await axe.run(view, options)).violations.flatMap(
               (rule) => rule.nodes.map((node) => `${rule.id}: ${node.target.join(" ")}`))""",
        [parts["view"].element_handle(), {"runOnly": WCAG, "resultTypes": ["violations"]}],
    )
    assert not violations, f"the chat widget in JupyterLab: {violations}"

    parts["temperature"].focus()  # the arrow keys step the temperature
    page.keyboard.press("ArrowUp")
    expect(parts["temperature"]).to_have_value("0.9")
    page.keyboard.press("ArrowDown")
    expect(parts["temperature"]).to_have_value("0.8")
    converse(parts, keyboard=page.keyboard)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "chat_lab.png"))

    parts["new"].focus()  # the conversation forgotten: history and speed emptied
    page.keyboard.press("Enter")
    expect(parts["history"]).not_to_contain_text("You:", timeout=60_000)
    expect(parts["view"]).not_to_contain_text("tokens/s", timeout=60_000)
    found = list(outside)
    page.close()
    assert not found, f"JupyterLab reached outside the machine: {found}"


def test_the_chat_widget_answers_on_a_rise_slide(chat_lab, browser):
    import json
    import time
    import urllib.request

    from playwright.sync_api import expect

    root, base, token = chat_lab
    name = write_chat_notebook(root / "chat_rise.ipynb")
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    outside = watch_requests(page, base)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text) if message.type == "error" else None)
    page.goto(f"{base}/rise/{name}?token={token}")
    page.wait_for_selector(".reveal section.present .jp-CodeCell", timeout=60_000)

    # RISE exposes no app: wait for its kernel through the server's API, then run the cell on
    # the slide as a presenter does (select it, Ctrl+Enter).
    for _ in range(120):  # polls a second apart
        with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as response:
            kernels = [s["kernel"] for s in json.load(response) if s["path"] == name]
        if kernels and kernels[0]["execution_state"] == "idle":
            break
        time.sleep(1)
    else:
        pytest.fail(f"no idle kernel for the RISE slideshow after 120 polls: {kernels}")
    slide = page.locator(".reveal section.present")
    slide.locator(".jp-CodeCell .jp-InputPrompt").first.click()
    page.keyboard.press("Control+Enter")
    output = slide.locator(".jp-CodeCell .jp-OutputArea-output").first
    expect(output).to_be_visible(timeout=120_000)  # the cell ran on the slide

    # The view renders only where RISE's app can load the widget manager: jupyterlab_widgets
    # 3.0.11+ needs @jupyterlab/console, which jupyterlab_rise 0.43.1's app does not share
    # (jupyterlab-contrib/rise#119), hence the pins in requirements.txt.
    parts = chat_view(slide)
    try:
        expect(parts["send"]).to_be_visible(timeout=120_000)
    except AssertionError:
        pytest.fail(
            f"the chat widget did not render on the RISE slide; browser errors: {console[-3:]} (if a shared "
            "module @jupyterlab/console is missing, keep jupyterlab_widgets==3.0.10, requirements.txt)"
        )
    expect(parts["send"]).to_be_in_viewport()  # on the slide, not scrolled away
    converse(parts)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "chat_rise.png"))
    found = list(outside)
    page.close()
    assert not found, f"the live slideshow reached outside the machine: {found}"
