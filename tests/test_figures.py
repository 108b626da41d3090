from pathlib import Path

from repo_scripts import load_script

ROOT = Path(__file__).resolve().parent.parent


def test_committed_figures_are_what_the_script_makes(tmp_path):
    import matplotlib

    from course_lib.plotting import use_course_style

    make_figures = load_script("make_figures")
    with matplotlib.rc_context():
        use_course_style()  # what a notebook run earlier in the same test process leaves behind
        written = make_figures.make_all(tmp_path)
    committed = {p.name for p in (ROOT / "figures").glob("*.png")}
    assert committed == {p.name for p in written}, "every figure needs a generator, and every generator a figure"
    if matplotlib.__version__ != "3.11.2":  # the figures were drawn by the pinned release (Python 3.10 gets 3.10.9)
        return
    for path in written:
        assert path.read_bytes() == (ROOT / "figures" / path.name).read_bytes(), (
            f"figures/{path.name} is stale: run python scripts/make_figures.py"
        )
